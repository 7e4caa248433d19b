"""The Headroom planner: how many replicas a pool needs now, and why (design.md §6).

`plan(inputs, pool, state)` is pure. The target is the largest of five terms:

1. *reactive*: the HPA-conformant core on queue depth per ready replica (`queue_depth.py`), and
   the request rate arriving now served at the corrected per-replica capacity (the queue is a
   stock that grows only once capacity is short; the rate moves first on a ramp), grown as it grew
   over the last minute for the lead time a new replica takes (at most `rate_trend_cap`);
2. *predictive*: the p90 request-rate forecast at now + cold-start p95 + decision delay, divided
   by the per-replica capacity at the SLO (the pool profile's, corrected online by observed
   latency against the latency the profile expects at that load);
3. *scheduled*: known windows, pre-scaled by their factor one lead time before they start;
4. *warm floor*: the warm-pool fraction of the expected peak, never below min replicas;

then the guardrails: a scale-down stabilization window and rate limits in both directions, then
min/max replicas. Capacity counts ready replicas only; replicas still starting are credited at
their expected ready time. When the key signals are unknown the planner holds (never scales
down); after 60 s it falls back to the schedule and the last known good target, and at 90 s it
raises the staleness alert. The >= 3x-in-30-minutes pre-scale proposal is one more output.

Every `Decision` carries its reason codes and the numbers behind each term; `PlannerState` is the
part that must survive a restart (`to_dict`/`from_dict`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from scaling.engine.constants import default
from scaling.engine.hpa_spec import HpaState
from scaling.engine.queue_depth import QueueDepthPolicy, decide_on_queue_depth
from scaling.engine.signals import PoolSignals, Reading

# Reason codes (stable strings: the UI and the audit log key on them).
REACTIVE = "ReactiveQueueDepth"
REACTIVE_RATE = "ReactiveRequestRate"
REACTIVE_BUSY = "ReactiveGpuBusyShare"
PREDICTIVE = "PredictiveForecast"
SCHEDULED = "ScheduledWindow"
WARM_FLOOR = "WarmFloor"
LAST_GOOD = "LastKnownGoodTarget"
HELD = "HoldCurrent"
QUEUE_UNKNOWN = "QueueDepthUnknown"
RATE_UNKNOWN = "RequestRateUnknown"
FORECAST_UNKNOWN = "ForecastUnknown"
SIGNALS_UNKNOWN = "SignalsUnknownHold"
SIGNALS_FALLBACK = "SignalsUnknownFallback"
STALENESS_ALERT = "StalenessAlert"
REPLICAS_UNKNOWN = "ReplicaCountsUnknown"
STABILIZED_DOWN = "ScaleDownStabilized"
RATE_LIMITED_UP = "ScaleUpRateLimited"
RATE_LIMITED_DOWN = "ScaleDownRateLimited"
CAPPED_MAX = "CappedByMaxReplicas"
RAISED_MIN = "RaisedToMinReplicas"
PRESCALE = "PreScaleProposed"
PRESCALE_HOLD = "PreScaleApproved"
PRESCALE_COOLDOWN = "PreScaleCoolingDown"
NO_QUEUE_SOURCE = "NoReadyReplicaToReadQueue"
CAPACITY_CORRECTED = "CapacityCorrectedByLatency"


@dataclass(frozen=True)
class ScheduleWindow:
    """One occurrence of a known peak, in the planner's clock (the caller expands recurring windows)."""

    start_s: float
    end_s: float
    prescale_factor: float = 0.4  # +40 %
    expected_rps: float | None = None  # None: the input's expected peak
    # The highest rate seen in the window's previous occurrence (the caller reads it from its history):
    # what the factor applies to when there is no forecast, exactly when the fallback needs the schedule.
    last_peak_rps: float | None = None


@dataclass(frozen=True)
class PoolPlan:
    """A pool's planning profile and guardrails (the constants' values and their provenance: constants.py)."""

    capacity_rps_per_replica: float  # requests/s one ready replica serves within the SLO (pool profile)
    min_replicas: int = 1
    max_replicas: int = 64
    slo_latency_s: float = 1.0  # the objective the capacity is stated at
    unloaded_latency_s: float = 0.2  # the profile's latency with no queue
    slo_signal: str = "ttft_p95_s"  # the PoolSignals field compared with the expected latency
    # The profile's latency between no load and the SLO: (share of stated capacity, latency s)
    # points, e.g. from the load test that measured the capacity; empty: linear from unloaded
    # latency to the SLO. The capacity correction is only as right as this shape.
    latency_curve: tuple[tuple[float, float], ...] = ()
    # The curve's end: the SLO percentile's latency at the stated capacity. None: the SLO. Above it
    # where prompts alone miss the SLO (prefill-bound TTFT): the load test then states the capacity
    # at the objective less the misses no load causes, and the latency there is what load explains.
    capacity_latency_s: float | None = None
    cold_start_p95_s: float = 90.0
    decision_delay_s: float = 30.0  # a tick, approval and the API call before a replica is requested
    warm_pool_fraction: float = 0.4
    # The reactive rate term serves the request rate arriving now times this margin at the
    # corrected capacity; 0 turns the term off.
    request_rate_margin: float = default("request_rate_margin")
    # The queue term orders at most this multiple of the replicas the arriving rate needs (never
    # fewer than the current count); 0 turns the limit off.
    queue_term_rate_multiple: float = default("queue_term_rate_multiple")
    # A replica asked for now serves a lead time from now: where the rate grew over the last minute,
    # the rate term plans for it growing as much again each minute of the lead time, at most this
    # multiple of the rate lately (`PlanInput.rate_trend_rps`; 1 turns it off). A surge's ramp
    # outruns a term that sizes the pool for the rate already arrived.
    rate_trend_cap: float = default("rate_trend_cap")
    # Opt-in (0: off): the busy share read at the tick (the work share: batch fill or prefill share, from
    # vLLM's series; `signals.work_share`) asks for ready x busy / target replicas, scale-ups only, as the
    # HPA on GPU utilisation would. A gauge sees a burst's work the tick it lands, where the rate over a
    # minute still averages it away. Not DCGM's busy share: a vLLM GPU that decodes reads busy at any load.
    busy_share_target: float = default("busy_share_target")
    # When on, it acts only at an onset: the tick's busy replicas (busy share x ready, the work, which a
    # scale-down does not move) at least this multiple of their mean over the previous minute, or a busy
    # share at `busy_share_saturated` (it cannot show how much more waits). Smooth traffic then pays
    # nothing for it (0: every tick, as the HPA).
    busy_share_onset: float = default("busy_share_onset")
    busy_share_saturated: float = default("busy_share_saturated")
    queue: QueueDepthPolicy = field(default_factory=QueueDepthPolicy)
    # Guardrails on the combined target.
    # Per period: max(+pods, +percent), the HPA's defaults (constants.py says why not 10x a period).
    scale_up_pods: int = default("scale_up_pods")
    scale_up_percent: float = default("scale_up_percent")
    scale_up_period_s: float = 15.0
    scale_down_window_s: float = default("scale_down_window_s")  # a removed GPU replica costs a cold start to get back
    scale_down_pods: int = default("scale_down_pods")  # per period: max(-pods, -percent); a quarter a minute at most
    scale_down_percent: float = default("scale_down_percent")
    scale_down_period_s: float = 60.0
    # Unknown signals.
    hold_after_unknown_s: float = 60.0
    stale_alert_after_s: float = 90.0
    # Pre-scaling protocol.
    prescale_ratio: float = default("prescale_ratio")
    prescale_horizon_s: float = 1800.0
    prescale_buffer: float = default("prescale_buffer")
    # After a proposal, none for this long unless it asks for more than the last one plus its
    # buffer (a proposal made, approved or rejected, is not made again every tick).
    prescale_cooldown_s: float = default("prescale_cooldown_s")
    # The forecast's upper band is believed up to this multiple of the peak seen lately (on/off traffic
    # makes a log-scale band explode; a ramp still gets room to grow)...
    recent_peak_factor: float = default("recent_peak_factor")
    # ...the highest of the newest known minutes, this long (`PlanInput.lead_peak_rps`). After a surge the
    # band stays as wide as the surge's errors while the forecaster remembers them (an hour); capped by
    # the surge's own peak for 30 minutes, a code pool held its surge size a quarter of an hour after it.
    lead_peak_window_s: float = default("lead_peak_window_s")
    # Online capacity correction (multiplicative, bounded; only learned under real load).
    correction_min: float = default("correction_min")
    correction_max: float = default("correction_max")
    correction_gain: float = default("correction_gain")
    correction_min_load: float = default("correction_min_load")  # share of stated capacity in use before latency says anything
    # Latency over the profile's says capacity is short only when load explains it: the queue time
    # at the SLO's percentile is at least this share of the SLO. Long prompts make TTFT prefill-bound
    # while nothing waits, and more replicas cannot fix that. Unknown queue time: not checked.
    correction_queue_share: float = default("correction_queue_share")
    # The window the latency percentiles are read over (the cluster's Prometheus rate window, 1m): the
    # correction learns only once the ready count has held this long, so that the latency it reads was
    # served by the replicas it divides the load by. Right after replicas arrive, the window's latency is
    # the backlog of the fewer replicas before them, which says nothing about a replica's capacity.
    latency_window_s: float = 60.0
    # The share of the corrected capacity the pool is planned to use: the profile states capacity
    # where latency reaches the SLO at a steady rate, and bursts above the rate need room.
    capacity_utilisation: float = default("capacity_utilisation")

    @property
    def lead_s(self) -> float:
        """How far ahead a replica requested now becomes capacity."""
        return self.cold_start_p95_s + self.decision_delay_s


@dataclass(frozen=True)
class ForecastPoint:
    """A request-rate forecast for one horizon (`scaling.engine.forecast.Forecast` fits)."""

    horizon_s: float
    expected_rps: float
    p90_rps: float

    @property
    def usable(self) -> bool:
        return math.isfinite(self.expected_rps) and math.isfinite(self.p90_rps) and self.p90_rps >= 0


@dataclass(frozen=True)
class PlanInput:
    now_s: float
    signals: PoolSignals
    arriving_ready_in_s: tuple[float, ...] = ()  # per starting replica: seconds until expected Ready
    forecast_lead: ForecastPoint | None = None  # at now + pool.lead_s
    forecast_peak: ForecastPoint | None = None  # the largest forecast within pool.prescale_horizon_s
    windows: tuple[ScheduleWindow, ...] = ()
    approved_floor: int = 0  # an approved pre-scale the caller is holding (replicas), 0 for none
    recent_peak_rps: float | None = None  # highest observed 1-minute rate of the last 30 minutes
    # The rate the pool's own replicas were sent, where `signals` holds the route's demand and a fallback
    # takes a share of it: the capacity correction learns latency against the load the replicas carried.
    # None: the signals' request rate is what they carried.
    served_rate: Reading | None = None
    lead_peak_rps: float | None = None  # the peak seen lately: `decide.recent_peak_rps`
    # The rate a minute before and the rate lately (`decide.rate_trend_rps`), oldest first; () when unknown.
    rate_trend_rps: tuple[float, ...] = ()


@dataclass(frozen=True)
class Term:
    name: str  # a reason code
    replicas: int | None  # None: the term has no opinion (its inputs are unknown)
    numbers: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PreScaleProposal:
    target_replicas: int
    current_rps: float
    forecast_peak_rps: float
    ratio: float
    warm_pool_replicas: int
    horizon_s: float


@dataclass(frozen=True)
class PlannerState:
    """What the planner remembers between ticks; persist it (to_dict) so a restart resumes."""

    hpa: HpaState = field(default_factory=HpaState)
    last_known_at_s: float | None = None  # when the key signals were last known
    last_good_target: int | None = None  # the last target decided on known signals
    recommendations: tuple[tuple[float, int], ...] = ()  # (at, raw target) inside the scale-down window
    scale_events: tuple[tuple[float, int], ...] = ()  # (at, replica change) inside the rate periods
    capacity_correction: float = 1.0
    last_prescale_at_s: float | None = None
    last_prescale_target: int | None = None  # the last proposal's replicas (the cooldown compares with it)
    ready_since: tuple[int, float] | None = None  # (ready replicas, when that count was first seen)
    busy_replicas: tuple[tuple[float, float], ...] = ()  # (at, busy share x ready) over the last minute

    def to_dict(self) -> dict[str, Any]:
        return {
            "hpa": self.hpa.to_dict(),
            "last_known_at_s": self.last_known_at_s,
            "last_good_target": self.last_good_target,
            "recommendations": [list(r) for r in self.recommendations],
            "scale_events": [list(e) for e in self.scale_events],
            "capacity_correction": self.capacity_correction,
            "last_prescale_at_s": self.last_prescale_at_s,
            "last_prescale_target": self.last_prescale_target,
            "ready_since": list(self.ready_since) if self.ready_since else None,
            "busy_replicas": [list(b) for b in self.busy_replicas],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlannerState:
        return cls(
            hpa=HpaState.from_dict(data.get("hpa", {})),
            last_known_at_s=data.get("last_known_at_s"),
            last_good_target=data.get("last_good_target"),
            recommendations=tuple((float(t), int(r)) for t, r in data.get("recommendations", [])),
            scale_events=tuple((float(t), int(c)) for t, c in data.get("scale_events", [])),
            capacity_correction=float(data.get("capacity_correction", 1.0)),
            last_prescale_at_s=data.get("last_prescale_at_s"),
            last_prescale_target=data.get("last_prescale_target"),
            ready_since=(int(data["ready_since"][0]), float(data["ready_since"][1])) if data.get("ready_since") else None,
            busy_replicas=tuple((float(t), float(b)) for t, b in data.get("busy_replicas", [])),
        )


@dataclass(frozen=True)
class Decision:
    target_replicas: int | None  # None: nothing is known, not even the current count; do nothing
    current_replicas: int | None
    ready_replicas: int | None
    arriving_replicas: int
    terms: tuple[Term, ...]
    binding: str  # the term that set the target, or the guardrail that moved it last
    reasons: tuple[str, ...]
    hold: bool  # signals unknown: the target is never below the current count
    signals_unknown_for_s: float
    staleness_alert: bool
    capacity_per_replica_rps: float
    prescale: PreScaleProposal | None
    state: PlannerState

    def term(self, name: str) -> Term | None:
        return next((t for t in self.terms if t.name == name), None)


# ---------------------------------------------------------------------------- helpers


# More replicas than any pool runs is a broken series, not a count: unknown (never acted on).
MAX_PLAUSIBLE_REPLICAS = 100_000


def replica_count(reading: Reading) -> int | None:
    """A replica count read from a signal: None when unknown or not a plausible count."""
    if not reading.is_known or float(reading.value) > MAX_PLAUSIBLE_REPLICAS:  # type: ignore[arg-type]
        return None
    return max(0, int(round(reading.value)))  # type: ignore[arg-type]


def _oldest_key_sample_age_s(signals: PoolSignals) -> float:
    """How old the oldest of the key samples (queue, request rate) is: the load is as fresh as that."""
    readings = [signals.queue_depth, signals.request_rate_rps, *signals.waiting_per_ready_replica]
    return max((r.age_s for r in readings if r.is_known and r.age_s is not None), default=0.0)


TREND_STEP_S = 60.0  # the rate's growth is measured over a minute (`decide.rate_trend_rps`)
BUSY_ONSET_WINDOW_S = 60.0  # the busy share's onset compares a tick with the minute before it


def _replicas_for(rate_rps: float, capacity_rps: float) -> int:
    return max(0, math.ceil(rate_rps / capacity_rps - 1e-9))


def _waiting_per_ready(signals: PoolSignals, ready: int | None) -> list[float | None]:
    per_replica = signals.waiting_values()
    if any(v is not None for v in per_replica):
        # Ready replicas without a series are missing pods, not absent ones: the HPA core counts
        # them conservatively (empty on a scale-up, at target on a scale-down).
        return per_replica + [None] * max(0, (ready or 0) - len(per_replica))
    if signals.queue_depth.is_known and ready:
        # Only the pool total is known: spread it evenly (the HPA averages anyway).
        return [float(signals.queue_depth.value) / ready] * ready  # type: ignore[arg-type]
    return []


def expected_latency_s(pool: PoolPlan, load: float) -> float:
    """The profile's latency at `load` (share of the capacity in use): its curve, up to the latency at
    capacity at 1 (the SLO unless `capacity_latency_s` says otherwise).

    Piecewise linear through (0, unloaded), the `latency_curve` points and (1, latency at capacity);
    without a curve, a straight line.
    """
    end = latency_at_capacity_s(pool)
    points = [(0.0, pool.unloaded_latency_s)]
    points += sorted((x, y) for x, y in pool.latency_curve if 0.0 < x < 1.0)
    points.append((1.0, end))
    load = min(max(load, 0.0), 1.0)
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if load <= x1:
            return y0 + (y1 - y0) * (load - x0) / (x1 - x0) if x1 > x0 else y1
    return end


def latency_at_capacity_s(pool: PoolPlan) -> float:
    return pool.capacity_latency_s if pool.capacity_latency_s is not None else pool.slo_latency_s


KV_CACHE_FULL = 0.9  # vLLM's KV-cache use from which new requests wait for blocks: the batch is full


def _load_explains_latency(pool: PoolPlan, signals: PoolSignals) -> bool:
    """Slow first tokens are load's doing: requests waited long enough before their prefill, or the
    KV cache is full (admissions wait for blocks). Unknown queue time: assumed so, as before."""
    kv_cache = signals.kv_cache_usage
    if kv_cache.is_known and float(kv_cache.value) >= KV_CACHE_FULL:  # type: ignore[arg-type]
        return True
    queued = signals.reading(pool.slo_signal.replace("ttft_", "queue_time_"))
    if queued is None or not queued.is_known:
        return True
    return float(queued.value) >= pool.correction_queue_share * pool.slo_latency_s  # type: ignore[arg-type]


def corrected_capacity(pool: PoolPlan, state: PlannerState, signals: PoolSignals, ready: int | None) -> tuple[float, str | None]:
    """Move the capacity correction toward expected/observed latency, when the load says anything.

    The correction is true capacity / stated capacity, so a pool at `load` of its stated capacity
    runs at `load / correction` of the capacity believed in; the profile's latency there is what
    the observed latency is compared with. Too slow: less capacity than believed; too fast: more.
    """
    observed = signals.reading(pool.slo_signal)
    rate = signals.request_rate_rps
    if observed is None or not (observed.is_known and rate.is_known and ready):
        return state.capacity_correction, None
    stated = pool.capacity_rps_per_replica * ready
    load = float(rate.value) / stated  # type: ignore[arg-type]
    latency = float(observed.value)  # type: ignore[arg-type]
    over_slo = latency > latency_at_capacity_s(pool)
    # The load the pool believes it carries gates the learning: on the stated capacity, a
    # correction at 0.5 sizes the pool to half load, so it could fall but never rise again.
    believed_load = load / state.capacity_correction
    if latency <= 0 or (believed_load < pool.correction_min_load and not over_slo):
        return state.capacity_correction, None
    if believed_load > 1.0:
        # Past the capacity it believes in, latency is the queue's: no evidence about capacity.
        return state.capacity_correction, None
    ratio = min(max(expected_latency_s(pool, believed_load) / latency, 0.5), 2.0)
    if ratio < 1.0 and not _load_explains_latency(pool, signals):
        return state.capacity_correction, None
    step = ratio**pool.correction_gain
    updated = min(max(state.capacity_correction * step, pool.correction_min), pool.correction_max)
    return updated, CAPACITY_CORRECTED if abs(updated - state.capacity_correction) > 1e-9 else None


# ---------------------------------------------------------------------------- terms


def _queue_with_none_ready(signals: PoolSignals, ready: int | None) -> float | None:
    """The pool's queue while no replica is ready (scaled to zero, or every replica still loading)."""
    return float(signals.queue_depth.value) if ready == 0 and signals.queue_depth.is_known else None  # type: ignore[arg-type]


_QUEUE_POLICIES: dict[tuple[int, int], tuple[QueueDepthPolicy, QueueDepthPolicy]] = {}


def _queue_policy(queue: QueueDepthPolicy, min_replicas: int, max_replicas: int) -> QueueDepthPolicy:
    """The pool's queue policy within its bounds: built once per bounds, not every tick (the pool's
    policy is the same object tick after tick; hashing it would cost more than building it)."""
    cached = _QUEUE_POLICIES.get((min_replicas, max_replicas))
    if cached is None or (cached[0] is not queue and cached[0] != queue):
        if len(_QUEUE_POLICIES) >= 256:
            _QUEUE_POLICIES.clear()
        cached = _QUEUE_POLICIES[(min_replicas, max_replicas)] = (
            queue, replace(queue, min_replicas=min_replicas, max_replicas=max_replicas))
    return cached[1]


def reactive_term(inputs: PlanInput, pool: PoolPlan, state: PlannerState, current: int, ready: int | None,
                  capacity_rps: float) -> tuple[Term, HpaState]:
    policy = _queue_policy(pool.queue, pool.min_replicas, pool.max_replicas)
    waiting = _waiting_per_ready(inputs.signals, ready)
    known = [v for v in waiting if v is not None]
    numbers = {"waiting_total": float(sum(known)), "ready_with_queue": float(len(known)),
               "target_waiting_per_replica": policy.target_waiting_per_replica}
    hpa_state = state.hpa
    queue_at_zero = _queue_with_none_ready(inputs.signals, ready)
    if queue_at_zero is not None:
        # No ready pod to average over, where the HPA stops; like KEDA's activation, a waiting
        # request asks for capacity, sized by the queue target.
        numbers["waiting_total"] = queue_at_zero
        recommendation = max(1, math.ceil(queue_at_zero / policy.target_waiting_per_replica - 1e-9)) if queue_at_zero > 0 else 0
    else:
        outcome = decide_on_queue_depth(waiting, len(inputs.arriving_ready_in_s), current, state.hpa, inputs.now_s, policy)
        hpa_state = outcome.state
        if outcome.metric_recommendation is None:
            return Term(REACTIVE, None, numbers), hpa_state
        # The term is the metric's own demand; stabilization and rate limits apply once, to the
        # combined target (the core's stabilized value would echo the other terms back as "current").
        numbers["hpa_stabilized"] = float(outcome.desired_replicas) if outcome.desired_replicas is not None else math.nan
        recommendation = outcome.metric_recommendation
    replicas = min(max(recommendation, pool.min_replicas), pool.max_replicas)
    rate = inputs.signals.request_rate_rps
    if pool.queue_term_rate_multiple > 0 and rate.is_known:
        # Queued requests stay on the replica they wait on; a new replica only takes new arrivals.
        # So past a few times what the arriving rate needs, a larger queue buys nothing but GPUs.
        useful = _replicas_for(pool.queue_term_rate_multiple * float(rate.value), capacity_rps)  # type: ignore[arg-type]
        limit = max(pool.min_replicas, current, useful, 1)
        numbers["limit_by_request_rate"] = float(limit)
        replicas = min(replicas, limit)
    return Term(REACTIVE, replicas, numbers), hpa_state


def request_rate_term(inputs: PlanInput, pool: PoolPlan, capacity_rps: float) -> Term:
    rate = inputs.signals.request_rate_rps
    if not rate.is_known or pool.request_rate_margin <= 0:
        return Term(REACTIVE_RATE, None, {"request_rate_margin": pool.request_rate_margin})
    now_rps = float(rate.value)  # type: ignore[arg-type]
    growth = rate_growth(inputs.rate_trend_rps, pool)
    trend = inputs.rate_trend_rps if len(inputs.rate_trend_rps) == 2 else (math.nan, math.nan)
    # The growth applies to the rate lately (a mean), not to one tick's rate, which may be a burst's.
    ahead = trend[1] * growth if growth > 1 else now_rps
    planned = max(now_rps, ahead) * pool.request_rate_margin
    return Term(REACTIVE_RATE, _replicas_for(planned, capacity_rps), {
        "request_rate_rps": now_rps, "request_rate_margin": pool.request_rate_margin,
        "rate_minute_before_rps": trend[0], "rate_lately_rps": trend[1], "rate_growth": growth, "rate_ahead_rps": ahead,
        "capacity_rps_per_replica": capacity_rps,
    })


def busy_share_term(inputs: PlanInput, pool: PoolPlan, state: PlannerState, current: int,
                    ready: int | None) -> tuple[Term | None, tuple[tuple[float, float], ...]]:
    """The HPA's proportion on the GPU busy share: ready x busy / target, asked only when that is more than
    the pool has (a busy share under the target says nothing the rate and the queue do not), and only at an
    onset (`PoolPlan.busy_share_onset`). None: off. Also the busy replicas of the last minute, to keep."""
    if pool.busy_share_target <= 0:
        return None, ()
    busy = inputs.signals.work_share
    numbers = {"busy_share_target": pool.busy_share_target}
    if not busy.is_known or not ready:
        return Term(REACTIVE_BUSY, None, numbers), state.busy_replicas
    share = min(max(float(busy.value), 0.0), 1.0)  # type: ignore[arg-type]
    now = inputs.now_s
    # The minute before (or the rate window, where the cluster reads the rate over longer): a rate window
    # of a tick or less would leave no "before", and no onset to see.
    minute = tuple((at, work) for at, work in state.busy_replicas
                   if 0 <= now - at < max(pool.latency_window_s, BUSY_ONSET_WINDOW_S))
    before = [work for _, work in minute]
    kept = minute + ((now, share * ready),)
    numbers.update(busy_share=share, ready_replicas=float(ready))
    if pool.busy_share_onset > 0 and share < pool.busy_share_saturated:
        # No minute behind it (a new pool, a minute without readings): no onset to see; a saturated share
        # still acts. A restart resumes the minute: it is part of the stored state.
        mean_before = sum(before) / len(before) if before else math.inf
        if share * ready < pool.busy_share_onset * mean_before:
            return Term(REACTIVE_BUSY, None, numbers), kept
    if before and sum(before) > 0:  # the rise the proposal's sentence reports
        numbers["busy_rise"] = share * ready * len(before) / sum(before)
    wanted = math.ceil(ready * share / pool.busy_share_target - 1e-9)
    return Term(REACTIVE_BUSY, min(max(wanted, pool.min_replicas), pool.max_replicas) if wanted > current else None,
                numbers), kept


def rate_growth(rate_trend_rps: tuple[float, ...], pool: PoolPlan) -> float:
    """The rate's growth over the lead time if it keeps growing as it grew over the last minute, between
    1 (flat, falling or unknown) and `rate_trend_cap`."""
    if pool.rate_trend_cap <= 1 or len(rate_trend_rps) != 2:
        return 1.0
    before, lately = rate_trend_rps
    if not (math.isfinite(before) and math.isfinite(lately)) or before <= 0 or lately <= before:
        return 1.0
    exponent = pool.lead_s / TREND_STEP_S
    # Capped in logs first: an idle minute's residue (1e-18 rps) raised to a long lead time's power is
    # past a float's range.
    if exponent * math.log(lately / before) >= math.log(pool.rate_trend_cap):
        return pool.rate_trend_cap
    return (lately / before) ** exponent


def predictive_term(inputs: PlanInput, pool: PoolPlan, capacity_rps: float, ready: int | None) -> Term:
    forecast = inputs.forecast_lead
    if forecast is None or not forecast.usable:
        return Term(PREDICTIVE, None, {"lead_s": pool.lead_s})
    credited = sum(1 for ready_in in inputs.arriving_ready_in_s if ready_in <= pool.lead_s)
    planned_rps = forecast.p90_rps
    lately = inputs.lead_peak_rps
    if lately is not None and math.isfinite(lately):
        # An upper band past both the expected value and anything seen lately is the forecast's
        # uncertainty about on/off traffic, not evidence of load: plan for the peak seen lately.
        planned_rps = min(planned_rps, max(forecast.expected_rps, lately) * pool.recent_peak_factor)
    return Term(PREDICTIVE, _replicas_for(planned_rps, capacity_rps), {
        "p90_rps": forecast.p90_rps, "planned_rps": planned_rps, "expected_rps": forecast.expected_rps,
        "lead_peak_rps": lately if lately is not None else math.nan,
        "lead_peak_window_s": pool.lead_peak_window_s,
        "horizon_s": forecast.horizon_s,
        "lead_s": pool.lead_s, "capacity_rps_per_replica": capacity_rps,
        "ready_replicas": float(ready or 0), "arriving_ready_by_lead": float(credited),
    })


def expected_peak_rps(inputs: PlanInput) -> float | None:
    points = [p for p in (inputs.forecast_lead, inputs.forecast_peak) if p is not None and p.usable]
    return max(p.expected_rps for p in points) if points else None


def _a_rate(value: float | None) -> float | None:
    """A rate, or None: NaN, infinite or negative is no rate (never a crash, never 0)."""
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def scheduled_term(inputs: PlanInput, pool: PoolPlan, capacity_rps: float) -> Term:
    """A known window's factor applied to its expected rate: the window's own, else the forecast's
    expected peak, else (no forecast: exactly when the fallback needs the schedule) the peak of the
    window's previous occurrence, else the recent peak."""
    now, forecast_peak, recent = inputs.now_s, expected_peak_rps(inputs), _a_rate(inputs.recent_peak_rps)
    active = [w for w in inputs.windows if w.start_s - pool.lead_s <= now < w.end_s]
    best: tuple[int, ScheduleWindow, float, str] | None = None
    for window in active:
        rate, source = next(((r, name) for r, name in ((_a_rate(window.expected_rps), "window"),
                                                       (forecast_peak, "forecast"),
                                                       (_a_rate(window.last_peak_rps), "last_occurrence"),
                                                       (recent, "recent_peak")) if r is not None), (None, ""))
        if rate is None:
            continue
        replicas = _replicas_for(rate * (1 + window.prescale_factor), capacity_rps)
        if best is None or replicas > best[0]:
            best = (replicas, window, rate, source)
    if best is None:
        return Term(SCHEDULED, None, {"active_windows": float(len(active))})
    replicas, window, rate, source = best
    return Term(SCHEDULED, replicas, {"window_start_s": window.start_s, "window_end_s": window.end_s,
                                      "expected_rps": rate, "prescale_factor": window.prescale_factor,
                                      "from_last_occurrence": float(source == "last_occurrence"),
                                      "from_recent_peak": float(source == "recent_peak")})


def warm_floor_term(inputs: PlanInput, pool: PoolPlan, capacity_rps: float) -> Term:
    peak = expected_peak_rps(inputs)
    if peak is None:
        return Term(WARM_FLOOR, pool.min_replicas, {"warm_pool_fraction": pool.warm_pool_fraction})
    replicas = max(pool.min_replicas, _replicas_for(pool.warm_pool_fraction * peak, capacity_rps))
    return Term(WARM_FLOOR, replicas, {"expected_peak_rps": peak, "warm_pool_fraction": pool.warm_pool_fraction})


def prescale_proposal(inputs: PlanInput, pool: PoolPlan, capacity_rps: float, current: int) -> PreScaleProposal | None:
    """design.md §6: the forecast shows >= 3x the current load within 30 minutes."""
    peak, rate = inputs.forecast_peak, inputs.signals.request_rate_rps
    if peak is None or not peak.usable or not rate.is_known or peak.horizon_s > pool.prescale_horizon_s:
        return None
    lead = inputs.forecast_lead
    if lead is not None and lead.usable and peak.expected_rps <= lead.expected_rps:
        # The peak is the lead-time forecast's (the last minutes' level, a minute or two ahead), not a
        # rise the longer history foretells: in a burst that is the burst, which the reactive and
        # predictive terms size every tick. Pre-scaling on it would hold that size for 30 minutes.
        return None
    recent = inputs.recent_peak_rps
    if recent is not None and math.isfinite(recent) and peak.expected_rps <= recent:
        # The forecast expects no more than the pool served within the last 30 minutes: an echo of
        # a burst that just ended (its level still in the smoothing), not a new peak to warm up for.
        # The reactive terms already know that load; a pre-scale would hold it for 30 minutes more.
        return None
    current_rps = float(rate.value)  # type: ignore[arg-type]
    # A pool idling below one replica's capacity is compared with that capacity, not with ~0 (a pool
    # scaled to zero, min replicas 0, with one replica's).
    base = max(current_rps, capacity_rps * max(pool.min_replicas, 1))
    ratio = peak.expected_rps / base
    if ratio < pool.prescale_ratio:
        return None
    # The pool warmed for the forecast peak, plus the buffer (the playbook's "warm pool + 50 %").
    warm = max(pool.min_replicas, _replicas_for(peak.expected_rps, capacity_rps))
    target = min(pool.max_replicas, math.ceil(warm * (1 + pool.prescale_buffer) - 1e-9))
    if target <= current:
        return None
    return PreScaleProposal(target, current_rps, peak.expected_rps, round(ratio, 3), warm, peak.horizon_s)


def _prescale_cooling_down(proposal: PreScaleProposal, pool: PoolPlan, state: PlannerState, now: float) -> bool:
    """A proposal was made within the cooldown and this one asks for no more than it plus its buffer."""
    if state.last_prescale_at_s is None or now - state.last_prescale_at_s >= pool.prescale_cooldown_s:
        return False
    if state.last_prescale_target is None:  # a state saved before the target was kept
        return True
    return proposal.target_replicas < state.last_prescale_target * (1 + pool.prescale_buffer)


# ---------------------------------------------------------------------------- guardrails


def _guard(raw: int, current: int, now: float, pool: PoolPlan, state: PlannerState, hold: bool
           ) -> tuple[int, list[str], dict[str, Any]]:
    """The target within the stabilization window, the rate limits, min/max and a hold; with its reasons
    and the state's fields it changes."""
    reasons: list[str] = []
    window_start = now - pool.scale_down_window_s
    # A state with no history (first tick, or a restart without the saved state) remembers the
    # current count as its first recommendation, as the HPA does (recordInitialRecommendation):
    # a controller that just started has not seen the load that set the current count.
    history = state.recommendations or ((now, current),)
    recommendations = tuple(r for r in history if r[0] > window_start) + ((now, raw),)
    target = raw
    if target < current:
        ceiling = max(r for _, r in recommendations)
        if ceiling > target:
            target, _ = min(ceiling, current), reasons.append(STABILIZED_DOWN)
    period = max(pool.scale_up_period_s, pool.scale_down_period_s)
    events = tuple(e for e in state.scale_events if e[0] > now - period)
    if target > current:
        added = sum(c for t, c in events if c > 0 and t > now - pool.scale_up_period_s)
        base = current - added
        limit = max(base + pool.scale_up_pods, math.ceil(base * (1 + pool.scale_up_percent / 100)))
        if target > limit:
            target = max(current, limit)
            reasons.append(RATE_LIMITED_UP)
    elif target < current:
        removed = -sum(c for t, c in events if c < 0 and t > now - pool.scale_down_period_s)
        base = current + removed
        limit = base - max(pool.scale_down_pods, math.floor(base * pool.scale_down_percent / 100))
        if target < limit:
            target = min(current, limit)
            reasons.append(RATE_LIMITED_DOWN)
    if target > pool.max_replicas:
        target = pool.max_replicas
        reasons.append(CAPPED_MAX)
    if target < pool.min_replicas:
        target = pool.min_replicas
        reasons.append(RAISED_MIN)
    if hold and target < current:
        target = current
        reasons.append(HELD)
    # Scale events are not added here: a target is only a wish until the cluster accepts it
    # (see record_scale_event), so a change waiting for approval does not count against the rate.
    return target, reasons, {"recommendations": recommendations, "scale_events": events}


def record_scale_event(state: PlannerState, at_s: float, change: int) -> PlannerState:
    """Remember a change the cluster accepted, for the rate limits (the HPA records it after its update)."""
    if change == 0:
        return state
    return replace(state, scale_events=tuple(sorted(state.scale_events + ((at_s, change),))))


# ---------------------------------------------------------------------------- the planner


def _as_of(state: PlannerState, now: float, pool: PoolPlan) -> PlannerState:
    """The state with nothing dated after `now` and its correction within the pool's bounds.

    A clock stepped back, or a worker whose clock runs ahead stamping a scale event, would otherwise
    leave future times that block scale-ups (events still "in the period") and silence the staleness
    alert (signals "known" in the future), for as long as the step. A correction learned under bounds
    an override has since narrowed would size the pool past them until it learned again.
    """
    def stamped(pairs: tuple[tuple[float, Any], ...]) -> tuple[tuple[float, Any], ...]:
        return tuple((min(at, now), value) for at, value in pairs)

    changes: dict[str, Any] = {}
    hpa = state.hpa
    # Each series is kept in time order and every step brings it to now, so its newest entry is its last.
    newest = (state.last_known_at_s, state.last_prescale_at_s, state.ready_since[1] if state.ready_since else None,
              state.recommendations[-1][0] if state.recommendations else None,
              state.scale_events[-1][0] if state.scale_events else None,
              hpa.recommendations[-1].at_s if hpa.recommendations else None,
              hpa.scale_up_events[-1].at_s if hpa.scale_up_events else None,
              hpa.scale_down_events[-1].at_s if hpa.scale_down_events else None)
    if any(at is not None and at > now for at in newest):
        changes.update(
            last_known_at_s=min(state.last_known_at_s, now) if state.last_known_at_s is not None else None,
            last_prescale_at_s=min(state.last_prescale_at_s, now) if state.last_prescale_at_s is not None else None,
            ready_since=(state.ready_since[0], min(state.ready_since[1], now)) if state.ready_since else None,
            recommendations=stamped(state.recommendations), scale_events=stamped(state.scale_events),
            hpa=replace(hpa, recommendations=tuple(replace(r, at_s=min(r.at_s, now)) for r in hpa.recommendations),
                        scale_up_events=tuple(replace(e, at_s=min(e.at_s, now)) for e in hpa.scale_up_events),
                        scale_down_events=tuple(replace(e, at_s=min(e.at_s, now)) for e in hpa.scale_down_events)))
    if not pool.correction_min <= state.capacity_correction <= pool.correction_max:  # NaN included
        correction = state.capacity_correction if math.isfinite(state.capacity_correction) else 1.0
        changes["capacity_correction"] = min(max(correction, pool.correction_min), pool.correction_max)
    return replace(state, **changes) if changes else state


def plan(inputs: PlanInput, pool: PoolPlan, state: PlannerState | None = None) -> Decision:
    """Decide the pool's target replicas with its reasons; returns the new state inside the Decision."""
    now, signals = inputs.now_s, inputs.signals
    state = _as_of(state or PlannerState(), now, pool)
    ready, desired = replica_count(signals.ready_replicas), replica_count(signals.desired_replicas)
    arriving = len(inputs.arriving_ready_in_s)
    # Only the cluster says what it runs: ready replicas seen by Prometheus plus nothing is not
    # "current" (a failed Kubernetes read would turn +2 into a write of ready + 2 onto more).
    current = desired
    queue_known = (any(v is not None for v in _waiting_per_ready(signals, ready))
                   or _queue_with_none_ready(signals, ready) is not None)
    queue_usable = queue_known and ready is not None and current is not None
    # The load is known when both the queue and the arriving rate are: a failing rate query is
    # unknown load, never zero, so the queue alone may scale up but never down.
    key_known = queue_usable and signals.request_rate_rps.is_known
    # With no replica ready nothing in the pool exports vLLM's queue: unless a queue in front of
    # vLLM (the route's gateway) is read, its absence is expected, not a stale signal (hold, but
    # no fallback and no staleness alert).
    no_queue_source = ready == 0 and current is not None and not queue_known
    # The timers run from the last fresh sample (its own time, not this tick's), so a signal that
    # stopped arriving falls back at 60 s and alerts at 90 s after its last sample. A state that never
    # knew them (a new pool whose first scrape has not come yet) counts from its first step: a pool
    # whose metrics never come still alerts 90 s later, but a new one does not page at its first tick.
    last_known = ((now - _oldest_key_sample_age_s(signals)) if key_known
                  else now if no_queue_source or state.last_known_at_s is None else state.last_known_at_s)
    unknown_for = 0.0 if key_known else now - last_known
    staleness_alert = unknown_for >= pool.stale_alert_after_s
    reasons: list[str] = []

    carried = signals if inputs.served_rate is None else replace(signals, request_rate_rps=inputs.served_rate)
    ready_since = state.ready_since if state.ready_since and state.ready_since[0] == ready else (
        (ready, now) if ready is not None else None)
    ready_held = ready_since is not None and now - ready_since[1] >= pool.latency_window_s
    correction, corrected = (corrected_capacity(pool, state, carried, ready) if key_known and ready_held
                             else (state.capacity_correction, None))
    capacity_rps = pool.capacity_rps_per_replica * correction * pool.capacity_utilisation
    # What the step changes in the state, applied once at the end (every reader below reads fields it
    # does not change; `replace` is a tenth of a replay's decide step when called once per change).
    changes: dict[str, Any] = {"capacity_correction": correction, "last_known_at_s": last_known,
                               "ready_since": ready_since}
    if corrected:
        reasons.append(corrected)
    if no_queue_source:
        reasons.append(NO_QUEUE_SOURCE)

    predictive = predictive_term(inputs, pool, capacity_rps, ready)
    scheduled = scheduled_term(inputs, pool, capacity_rps)
    warm = warm_floor_term(inputs, pool, capacity_rps)
    if current is None:
        fallback = [r for r in (scheduled.replicas, state.last_good_target) if r is not None]
        # Within min/max like every other target (a window expecting no traffic asks for 0 replicas).
        target = min(max(*fallback, pool.min_replicas), pool.max_replicas) if fallback else None
        reasons += [REPLICAS_UNKNOWN, SIGNALS_FALLBACK] if target is not None else [REPLICAS_UNKNOWN]
        return Decision(target, None, ready, arriving, (predictive, scheduled, warm),
                        SIGNALS_FALLBACK if target is not None else HELD,
                        tuple(reasons + ([STALENESS_ALERT] if staleness_alert else [])), True, unknown_for,
                        staleness_alert, capacity_rps, None, replace(state, **changes))

    # Each reactive signal still read keeps its say; while the other is unknown the hold below keeps
    # it from scaling down (as the HPA scales up on the metrics it can still read).
    reactive_rate = request_rate_term(inputs, pool, capacity_rps) if ready is not None else Term(REACTIVE_RATE, None, {})
    if queue_usable:
        reactive, changes["hpa"] = reactive_term(inputs, pool, state, current, ready, capacity_rps)
        if not key_known:
            reasons.append(RATE_UNKNOWN)
    else:
        reactive = Term(REACTIVE, None, {})
        reasons.append(QUEUE_UNKNOWN)
    if predictive.replicas is None:
        reasons.append(FORECAST_UNKNOWN)

    hold = not key_known
    terms: list[Term] = [reactive, reactive_rate, predictive, scheduled, warm]
    busy = None
    if queue_usable:
        busy, changes["busy_replicas"] = busy_share_term(inputs, pool, state, current, ready)
    if busy is not None:
        terms.append(busy)
    if hold:
        held = Term(HELD, current, {"current_replicas": float(current)})
        terms.append(held)
        reasons.append(SIGNALS_UNKNOWN)
        if unknown_for >= pool.hold_after_unknown_s:
            # Fall back to the schedule and the last good target; the forecast and the floor were
            # built on the same missing data, so they do not count here. A queue or a rate still
            # read keeps its say: it can only add replicas while the hold stands.
            terms = [t for t in terms if t.name in (SCHEDULED, HELD, REACTIVE, REACTIVE_RATE)]
            if state.last_good_target is not None:
                terms.append(Term(LAST_GOOD, state.last_good_target, {"last_good_target": float(state.last_good_target)}))
            reasons.append(SIGNALS_FALLBACK)
    if inputs.approved_floor:
        terms.append(Term(PRESCALE_HOLD, inputs.approved_floor, {"approved_replicas": float(inputs.approved_floor)}))

    opinions = [t for t in terms if t.replicas is not None]
    binding_term = max(opinions, key=lambda t: t.replicas)  # type: ignore[arg-type, return-value]
    raw = int(binding_term.replicas)  # type: ignore[arg-type]
    target, guard_reasons, guarded = _guard(raw, current, now, pool, state, hold)
    changes.update(guarded)
    reasons = [binding_term.name] + reasons + guard_reasons
    if staleness_alert:
        reasons.append(STALENESS_ALERT)
    if not hold:
        changes["last_good_target"] = target

    proposal = prescale_proposal(inputs, pool, capacity_rps, current) if key_known else None
    if proposal is not None and _prescale_cooling_down(proposal, pool, state, now):
        proposal = None
        reasons.append(PRESCALE_COOLDOWN)
    if proposal is not None:
        reasons.append(PRESCALE)
        changes.update(last_prescale_at_s=now, last_prescale_target=proposal.target_replicas)
    state = replace(state, **changes)
    return Decision(
        target_replicas=target,
        current_replicas=current,
        ready_replicas=ready,
        arriving_replicas=arriving,
        terms=tuple(terms),
        binding=guard_reasons[-1] if guard_reasons else binding_term.name,
        reasons=tuple(dict.fromkeys(reasons)),
        hold=hold,
        signals_unknown_for_s=unknown_for,
        staleness_alert=staleness_alert,
        capacity_per_replica_rps=capacity_rps,
        prescale=proposal,
        state=state,
    )
