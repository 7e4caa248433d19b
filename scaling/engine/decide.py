"""One decide step: everything between a pool's stored history and the planner (design.md §6).

The live loop (`scaling/loop.py`) and the replay's `headroom` policy (`scaling/sim/policies/
headroom.py`) both call `decide()` with the same inputs: the pool's `PoolPlan`, this tick's
`PoolSignals`, the persisted `DecideState` and a `PoolHistory`. The history is the only thing the
two hold differently (the loop reads it from the database, the replay keeps it in memory), so it
is one small interface. The step feeds the two forecasters (lead time and 30 minutes) each request-rate
bin on the clock as it completes (incremental: a tick costs the same after a week as after a
minute; the state is kept between ticks), takes the recent peak, credits arriving replicas at their
expected ready time and runs the planner.

`ApprovalModel` is the replay's stand-in for the people and the policy that approve proposals:
what `scaling/services.py` approves by policy (reactive scale-ups within the guardrail) is applied
at once, everything else after a configurable approval delay.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

import numpy as np

from controlplane.config import ApprovalPolicy, guardrail_step
from scaling.engine import planner
from scaling.engine.forecast import DEFAULT_MEMORY, ForecastMemory, OnlineForecast
from scaling.engine.planner import Decision, ForecastPoint, PlanInput, PlannerState, PoolPlan, ScheduleWindow
from scaling.engine.queue_depth import QueueDepthPolicy
from scaling.engine.signals import PoolSignals, Reading

logger = logging.getLogger(__name__)

FORECAST_BIN_S = 60.0  # the lead-time forecast reads 1-minute bins (on the clock's minutes)...
RECENT_HISTORY_S = 3600.0  # ...remembers an hour of them, and starts from the last hour of history
SEASONAL_BIN_S = 600.0  # the 30-minute forecast reads 10-minute bins...
SEASONAL_HISTORY_S = 8 * 86_400.0  # ...and starts from up to 8 days of history: daily and weekly seasons
PEAK_WINDOW_S = 1800.0  # the recent peak: the highest 1-minute bin of the last 30 minutes
HISTORY_MAX_AGE_S = 300.0  # history whose newest known rate is older than this is no forecast of now
# The lead-time forecast's memory: today's traffic, not last week's (residuals of the last hour,
# scores with a 30-minute half-life); the 30-minute forecast keeps the backtested default (3 days, 12 h).
LEAD_MEMORY = ForecastMemory(residual_s=RECENT_HISTORY_S, score_half_life_s=1800.0)
LEAD_METHOD = "trend"  # self-tuned damped trend (docs/engine.md, "The lead-time forecast's method")
SEASONAL_METHOD = "adaptive"
DECISION_DELAY_S = 30.0  # a tick, an approval within the guardrails and the API call
DEFAULT_COLD_START_S = 90.0  # a pool's cold start until one is measured (design.md §2: 45-90 s)
DEFAULT_TTFT_P95_S = 1.0  # the latency a pool with no TTFT p95 SLO is planned to (the pages say so)
# A load-tested latency curve lets latency raise the capacity past the stated one; a straight line
# to the SLO may only lower it (a flat curve would read as spare capacity).
CORRECTION_MAX_WITH_CURVE = 1.5
CORRECTION_MAX_WITHOUT_CURVE = 1.0

# Which planner term becomes which kind of proposal (values of `scaling.choices.ProposalKind`).
# The predictive term looks one cold start ahead: the safety net acting early, decided like a reactive
# change (its own kind, the same guardrail). The 30-minute pre-scale (`Decision.prescale`) and its
# hold are what waits for a person.
PRESCALE_KIND, REACTIVE_KIND, PREDICTIVE_KIND = "prescale", "reactive", "predictive"
GUARDRAIL_KINDS = frozenset({REACTIVE_KIND, PREDICTIVE_KIND})
KIND_BY_BINDING = {
    planner.PREDICTIVE: PREDICTIVE_KIND,
    planner.SCHEDULED: "scheduled",
    planner.WARM_FLOOR: "warm_pool",
    planner.PRESCALE_HOLD: PRESCALE_KIND,
}


class PoolHistory(Protocol):
    """What a pool remembers beyond the planner's state; the loop reads it from the database."""

    def rates_since(self, since_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(times, request rates) of the samples stored after `since_s`, oldest first; NaN: unknown."""
        ...

    def requested_at(self) -> list[float]:
        """When the replicas that may still be starting were requested, oldest first."""
        ...

    def approved_floor(self, now_s: float) -> int:
        """The replicas of an approved pre-scale still inside its window (0 for none)."""
        ...


class ForecastSource(Protocol):
    """Where a decide step's forecasts come from: `forecasts` (the forecasters kept in the state), or a
    replay's recording of them, shared by replays of the same arrivals (`scaling/sim/policies/headroom.py`,
    `SharedForecasts`). Same arguments and answer as `forecasts`."""

    def __call__(self, history: PoolHistory, pool: PoolPlan, now_s: float, rate_now: float, state: DecideState
                 ) -> tuple[ForecastPoint | None, ForecastPoint | None, np.ndarray, DecideState]:
        ...


@dataclass(frozen=True)
class SeasonalCache:
    """The last 30-minute forecast and the end of the 10-minute bin it was made at."""

    made_at_s: float | None = None
    expected_rps: float | None = None
    p90_rps: float | None = None


@dataclass
class BinnedForecast:
    """An `OnlineForecast` fed with a pool's rates in bins on the clock (each bin `(end - bin, end]`),
    one bin as soon as it is complete; `end_s` is the end of the last bin fed."""

    forecaster: OnlineForecast
    end_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"end_s": self.end_s, "forecaster": self.forecaster.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> BinnedForecast | None:
        if not data:
            return None
        try:
            return cls(OnlineForecast.from_dict(data["forecaster"]), float(data["end_s"]))
        except (KeyError, TypeError, ValueError):
            return None  # a state some other version wrote: rebuilt from the history


@dataclass(frozen=True)
class DecideState:
    """What a pool's decide step keeps between ticks. The forecasters are advanced in place."""

    planner: PlannerState = field(default_factory=PlannerState)
    seasonal: SeasonalCache = field(default_factory=SeasonalCache)
    lead: BinnedForecast | None = field(default=None, compare=False)
    long: BinnedForecast | None = field(default=None, compare=False)
    newest_rate_s: float | None = None  # when the newest known request rate was read


@dataclass(frozen=True)
class Step:
    """One decide step's answer: the decision, what it was made from, and the state to keep."""

    decision: Decision
    inputs: PlanInput
    recent: np.ndarray  # 1-minute bins of the recent history ending now (the proposal's chart)
    state: DecideState


# ---------------------------------------------------------------------------- the pool's plan


def latency_signal_for(percentile: float) -> str:
    """The TTFT signal an objective is judged by: p99 for 99 % and stricter, else p95."""
    return "ttft_p99_s" if percentile >= 0.99 else "ttft_p95_s"


def pool_plan(*, capacity_rps_per_replica: float, min_replicas: int, max_replicas: int, slo_latency_s: float,
              slo_percentile: float, unloaded_latency_s: float, cold_start_p95_s: float | None,
              warm_pool_fraction: float = 0.4, target_queue_per_replica: float = 5.0,
              latency_curve: tuple[tuple[float, float], ...] = (),
              capacity_latency_s: float | None = None, latency_window_s: float = 60.0) -> PoolPlan:
    """The planner's view of a pool, built the same way for a live pool and a replayed one.
    `latency_window_s`: the window the latency percentiles are read over (the cluster's rate window)."""
    return PoolPlan(
        capacity_rps_per_replica=capacity_rps_per_replica,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        slo_latency_s=slo_latency_s,
        slo_signal=latency_signal_for(slo_percentile),
        latency_curve=latency_curve,
        capacity_latency_s=capacity_latency_s,
        latency_window_s=latency_window_s,
        unloaded_latency_s=min(unloaded_latency_s, max(slo_latency_s, capacity_latency_s or 0.0)),
        # Unmeasured is the default lead, never 0 s (a measured 0 would be a broken sample, not a fast pool).
        cold_start_p95_s=cold_start_p95_s if cold_start_p95_s else DEFAULT_COLD_START_S,
        decision_delay_s=DECISION_DELAY_S,
        warm_pool_fraction=warm_pool_fraction,
        correction_max=CORRECTION_MAX_WITH_CURVE if latency_curve else CORRECTION_MAX_WITHOUT_CURVE,
        queue=QueueDepthPolicy(target_waiting_per_replica=target_queue_per_replica,
                               min_replicas=min_replicas, max_replicas=max_replicas),
    )


# ---------------------------------------------------------------------------- history and forecasts


def binned_rates(times: np.ndarray, rates: np.ndarray, since_s: float, now_s: float, bin_s: float) -> np.ndarray:
    """Mean rate per bin ending at `now_s` ((now - bin, now] is the last); NaN where no known sample."""
    bins = int((now_s - since_s) // bin_s)
    if bins <= 0:
        return np.zeros(0)
    times, rates = np.asarray(times, dtype=float), np.asarray(rates, dtype=float)
    index = bins - 1 - np.floor((now_s - times) / bin_s + 1e-9).astype(np.int64)
    keep = (times > since_s) & (times <= now_s) & (index >= 0) & (index < bins) & np.isfinite(rates)
    sums = np.bincount(index[keep], weights=rates[keep], minlength=bins)
    counts = np.bincount(index[keep], minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def advance(binned: BinnedForecast | None, history: PoolHistory, now_s: float, rate_now: float, history_s: float,
            spec: tuple[str, float, int, ForecastMemory]) -> tuple[BinnedForecast, float | None]:
    """Feed the forecaster every bin completed since its last one (this tick's reading included), and
    the time of the newest known rate among the samples read. A forecaster that does not exist yet,
    that fell behind by more than `history_s`, or that was made for another method, bin, horizon or
    memory (a pool whose measured cold start changed its lead time) starts afresh from the last
    `history_s` of history. `spec` is (method, bin seconds, horizon in bins, memory)."""
    method, bin_s, horizon, memory = spec
    complete_s = math.floor(now_s / bin_s + 1e-9) * bin_s
    if (binned is None or binned.end_s < complete_s - history_s or binned.end_s > complete_s
            or (binned.forecaster.method, binned.forecaster.step_s, binned.forecaster.horizon,
                binned.forecaster.memory) != spec):
        binned = BinnedForecast(OnlineForecast(method, bin_s, horizon, memory),
                                complete_s - math.floor(history_s / bin_s) * bin_s)
    if binned.end_s >= complete_s:
        return binned, None
    times, rates = history.rates_since(binned.end_s)
    times, rates = np.append(times, now_s), np.append(rates, rate_now)
    for value in binned_rates(times, rates, binned.end_s, complete_s, bin_s):
        binned.forecaster.update(value)
    binned.end_s = complete_s
    known = times[np.isfinite(rates)]
    return binned, float(known.max()) if known.size else None


def _point(binned: BinnedForecast, horizon_s: float) -> ForecastPoint | None:
    made = binned.forecaster
    if made.known < 2:
        return None
    point = ForecastPoint(horizon_s, made.expected, made.p90)
    return point if point.usable else None


def _lead_spec(pool: PoolPlan) -> tuple[str, float, int, ForecastMemory]:
    return LEAD_METHOD, FORECAST_BIN_S, max(int(round(pool.lead_s / FORECAST_BIN_S)), 1), LEAD_MEMORY


def _long_spec(pool: PoolPlan) -> tuple[str, float, int, ForecastMemory]:
    return SEASONAL_METHOD, SEASONAL_BIN_S, max(int(round(pool.prescale_horizon_s / SEASONAL_BIN_S)), 1), DEFAULT_MEMORY


def forecasts(history: PoolHistory, pool: PoolPlan, now_s: float, rate_now: float, state: DecideState
              ) -> tuple[ForecastPoint | None, ForecastPoint | None, np.ndarray, DecideState]:
    """The lead-time forecast (1-minute bins), the 30-minute peak (10-minute bins over days: the larger
    expected value of it and the lead-time forecast, the larger p90), the recent complete 1-minute bins,
    and the advanced state. Each forecaster takes a bin once it is complete and is otherwise not
    touched, so a tick costs the same after a week as after a minute."""
    lead, newest_lead = advance(state.lead, history, now_s, rate_now, RECENT_HISTORY_S, _lead_spec(pool))
    long, newest_long = advance(state.long, history, now_s, rate_now, SEASONAL_HISTORY_S, _long_spec(pool))
    newest = max((t for t in (state.newest_rate_s, newest_lead, newest_long) if t is not None), default=None)
    if math.isfinite(rate_now):
        newest = now_s
    seasonal = state.seasonal
    if seasonal.made_at_s != long.end_s:
        far_now = _point(long, pool.prescale_horizon_s)
        seasonal = SeasonalCache(long.end_s, far_now.expected_rps if far_now else None,
                                 far_now.p90_rps if far_now else None)
    state = DecideState(state.planner, seasonal, lead, long, newest)  # (not `replace`: it runs every tick)
    recent = lead.forecaster.recent(int(RECENT_HISTORY_S / FORECAST_BIN_S))
    if newest is None or now_s - newest > HISTORY_MAX_AGE_S:
        return None, None, recent, state  # history that stopped arriving is no forecast of now
    near = _point(lead, pool.lead_s)
    far = (ForecastPoint(pool.prescale_horizon_s, seasonal.expected_rps, seasonal.p90_rps)
           if seasonal.expected_rps is not None and seasonal.p90_rps is not None else None)
    if near is None:
        return None, far, recent, state
    if far is None:
        return near, near, recent, state
    peak = far if far.expected_rps >= near.expected_rps else near
    return near, ForecastPoint(far.horizon_s, peak.expected_rps, max(near.p90_rps, far.p90_rps)), recent, state


def recent_peak_rps(recent: np.ndarray, window_s: float = PEAK_WINDOW_S) -> float | None:
    """The highest of the newest known 1-minute bins, `window_s` of them, within the last PEAK_WINDOW_S
    (None when none is known): by default the recent peak, with a pool's `lead_peak_window_s` the peak
    seen lately. Minutes without a sample are skipped (a live pool's rate query can miss a minute; a cap
    that vanished with it would let the band explode), so a replay, where every minute is known, reads
    the last `window_s`."""
    window = recent[-int(PEAK_WINDOW_S / FORECAST_BIN_S):]
    known = window[np.isfinite(window)][-max(int(window_s / FORECAST_BIN_S), 1):]
    return float(known.max()) if known.size else None


TREND_LATELY_S = 20.0  # "lately": the rate now and the samples of the last 20 s (one 15-s tick's jump counts half)


def rate_trend_rps(history: PoolHistory, now_s: float, rate_now: float) -> tuple[float, ...]:
    """(the rate a minute before, the rate lately), oldest first, or () when either is unknown: the
    mean of the rate now and the samples of the last TREND_LATELY_S, and the mean of the samples 40-65 s
    back (the same window a minute earlier, five seconds wider for a late tick)."""
    step = planner.TREND_STEP_S
    times, rates = history.rates_since(now_s - step - 5.0)
    lately = np.append(rates[times > now_s - TREND_LATELY_S], rate_now)
    before = rates[(times > now_s - step - 5.0) & (times <= now_s - step + TREND_LATELY_S)]
    lately, before = lately[np.isfinite(lately)], before[np.isfinite(before)]
    return (float(before.mean()), float(lately.mean())) if lately.size and before.size else ()


def arriving_ready_in(requested_at: list[float], arriving: int, now_s: float, cold_start_p95_s: float) -> tuple[float, ...]:
    """Seconds until each starting replica is expected Ready: the newest `arriving` requests (a
    scale-down cancels the newest first, the oldest become ready first); unknown ones as just asked."""
    if arriving <= 0:
        return ()
    known = requested_at[-arriving:]
    starts = [now_s] * (arriving - len(known)) + known
    return tuple(max(0.0, at + cold_start_p95_s - now_s) for at in sorted(starts))


# ---------------------------------------------------------------------------- the step


def decide(now_s: float, signals: PoolSignals, pool: PoolPlan, state: DecideState, history: PoolHistory,
           windows: tuple[ScheduleWindow, ...] = (), forecast_source: ForecastSource | None = None,
           served_rate: Reading | None = None) -> Step:
    """Forecast from the history, assemble the planner's input and plan: the one decide step.
    `forecast_source` replaces `forecasts` (a replay reading forecasts recorded once for many);
    `served_rate` is the pool's own rate where `signals` carries a route's demand (`PlanInput`)."""
    rate = signals.request_rate_rps
    rate_now = float(rate.value) if rate.is_known else math.nan  # type: ignore[arg-type]
    lead, peak, recent, state = (forecast_source or forecasts)(history, pool, now_s, rate_now, state)
    arriving = signals.arriving_replicas
    arriving_count = planner.replica_count(arriving) or 0  # unknown or absurd: none credited
    inputs = PlanInput(
        now_s=now_s, signals=signals,
        arriving_ready_in_s=arriving_ready_in(history.requested_at() if arriving_count else [], arriving_count, now_s,
                                              pool.cold_start_p95_s),
        forecast_lead=lead, forecast_peak=peak, windows=windows,
        approved_floor=history.approved_floor(now_s), recent_peak_rps=recent_peak_rps(recent), served_rate=served_rate,
        lead_peak_rps=recent_peak_rps(recent, pool.lead_peak_window_s), rate_trend_rps=rate_trend_rps(history, now_s, rate_now),
    )
    decision = planner.plan(inputs, pool, state.planner)
    return Step(decision, inputs, recent, DecideState(decision.state, state.seasonal, state.lead, state.long,
                                                      state.newest_rate_s))


def proposed_change(decision: Decision, min_replicas: int, max_replicas: int) -> tuple[str, int] | None:
    """The proposal a decision asks for, (kind, target), or None: a pre-scale first, else the target."""
    current = decision.current_replicas
    if decision.prescale is not None:
        kind, target = PRESCALE_KIND, decision.prescale.target_replicas
    elif decision.target_replicas is not None and current is not None and decision.target_replicas != current:
        kind, target = KIND_BY_BINDING.get(decision.binding, REACTIVE_KIND), decision.target_replicas
    else:
        return None
    target = max(min_replicas, min(max_replicas, target))
    return None if current is None or target == current else (kind, target)


# ---------------------------------------------------------------------------- approvals in replay


@dataclass
class _Pending:
    due_s: float
    kind: str
    target: int
    made_at_s: float
    from_replicas: int
    floor_until_s: float | None = None  # a pre-scale's floor: until its forecast peak (the loop's `floor_until`)


@dataclass
class ApprovalModel:
    """The replay's approvals: what policy approves (`ApprovalPolicy`, `scaling/services.py`) at once,
    everything else `approval_delay_s` after a person was first asked (a newer proposal of the same
    track replaces the older one, the person still answers at that time). Policy approves reactive and
    predictive scale-ups up to the guardrail, `reactive_max_step` or `reactive_max_percent` of the pool
    where that is more (a larger one runs that share at once and leaves the rest to the person), and
    the planner's scale-downs (its targets are stabilized over the window and never under the warm
    floor, the conditions the live policy checks). An approved pre-scale is held as a floor until the
    forecast peak it was made for (at most the pool's pre-scale horizon after it was made), as the
    loop's `floor_until` and `approved_floor` do; a forecast-bound change of the pre-scale kind without
    a pre-scale proposal holds no floor once applied."""

    approval_delay_s: float = 60.0
    reactive_max_step: int = ApprovalPolicy.reactive_max_step
    auto_approve_scale_down: bool = True
    reactive_max_percent: int | None = ApprovalPolicy.reactive_max_percent
    pending: dict[bool, _Pending] = field(default_factory=dict)  # by track: pre-scale or not
    floor: tuple[int, float] | None = None  # (replicas, until)

    def approved_floor(self, now_s: float) -> int:
        return self.floor[0] if self.floor is not None and now_s < self.floor[1] else 0

    def guardrail(self, current: int) -> int:
        """`ApprovalPolicy.guardrail`: the step, or the share of the pool where that is more."""
        return guardrail_step(self.reactive_max_step, self.reactive_max_percent, current)

    def at_once(self, kind: str, current: int, target: int) -> int:
        """The replicas policy approves at once for this change (`current` when it approves nothing)."""
        if kind in GUARDRAIL_KINDS and target > current:
            return min(target, current + self.guardrail(current))
        if self.auto_approve_scale_down and kind != PRESCALE_KIND and target < current:
            return target
        return current

    def apply(self, now_s: float, decision: Decision, desired: int, horizon_s: float,
              min_replicas: int, max_replicas: int) -> int:
        """The replicas the simulated cluster runs after this tick (the loop's act, then approvals)."""
        target = desired
        change = proposed_change(decision, min_replicas, max_replicas)
        if change is not None:
            kind, wanted = change
            track = kind == PRESCALE_KIND
            older = self.pending.get(track)
            # As the loop: a proposal already waiting for this target answers the decision.
            if older is None or older.target != wanted:
                share = desired if track else self.at_once(kind, desired, wanted)
                if share == wanted:
                    self.pending.pop(track, None)
                else:
                    due = older.due_s if older is not None else now_s + self.approval_delay_s
                    floor_until = (now_s + min(decision.prescale.horizon_s, horizon_s)
                                   if decision.prescale is not None else None)
                    self.pending[track] = _Pending(due, kind, wanted, now_s, desired, floor_until)
                target = share  # the guardrail's share runs now; the rest waits for the person
        for track, pending in sorted(self.pending.items()):
            if now_s < pending.due_s:
                continue
            del self.pending[track]
            if pending.kind == PRESCALE_KIND and pending.floor_until_s is not None:
                self.floor = (pending.target, pending.floor_until_s)
            # The premise check: a change is written only while it still goes the approved way.
            if (pending.target - pending.from_replicas) * (pending.target - target) > 0:
                target = pending.target
        return target


def decide_state_from(planner_state: dict[str, Any] | None, seasonal: dict[str, Any] | None) -> DecideState:
    """A persisted state: `PlannerMemory.state` and `.seasonal_forecast` as any earlier version wrote them.

    One that does not load (edited by hand, cut short) starts afresh rather than failing the pool's
    every tick: a fresh planner holds its first tick (it never scales down on it), and the forecasters
    start again from the stored history.
    """
    try:
        return _loaded_state(planner_state, seasonal)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
        logger.warning("the stored planner state does not load (%s: %s); starting afresh", type(error).__name__, error)
        return DecideState()


def _loaded_state(planner_state: dict[str, Any] | None, seasonal: dict[str, Any] | None) -> DecideState:
    state = PlannerState.from_dict(planner_state) if planner_state else PlannerState()
    seasonal = seasonal or {}
    made_at = seasonal.get("made_at")  # ISO time with its zone
    made_at_s = datetime.fromisoformat(made_at).timestamp() if made_at else None
    newest = seasonal.get("newest_rate_s")
    return DecideState(state, SeasonalCache(made_at_s, seasonal.get("expected"), seasonal.get("p90")),
                       lead=BinnedForecast.from_dict(seasonal.get("lead")),
                       long=BinnedForecast.from_dict(seasonal.get("long")),
                       newest_rate_s=float(newest) if newest is not None else None)


def seasonal_dict(cache: SeasonalCache) -> dict[str, Any]:
    """The cached forecast for `PlannerMemory.seasonal_forecast` (the format it always had)."""
    made_at = None if cache.made_at_s is None else datetime.fromtimestamp(cache.made_at_s, timezone.utc).isoformat()
    return {"made_at": made_at, "expected": cache.expected_rps, "p90": cache.p90_rps}


def forecast_dict(state: DecideState) -> dict[str, Any]:
    """`PlannerMemory.seasonal_forecast`: the cached forecast as it always was, plus the forecasters'
    state (so the next tick feeds them one bin instead of reading days of history again)."""
    return seasonal_dict(state.seasonal) | {
        "lead": state.lead.to_dict() if state.lead else None,
        "long": state.long.to_dict() if state.long else None,
        "newest_rate_s": state.newest_rate_s,
    }
