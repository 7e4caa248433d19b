"""One decide step: everything between a pool's stored history and the planner (design.md §6).

The live loop (`scaling/loop.py`) and the replay's `headroom` policy (`scaling/sim/policies/
headroom.py`) both call `decide()` with the same inputs: the pool's `PoolPlan`, this tick's
`PoolSignals`, the persisted `DecideState` and a `PoolHistory`. The history is the only thing the
two hold differently (the loop reads it from the database, the replay keeps it in memory), so it
is one small interface. The step bins the stored request rates, remakes the lead-time forecast
every tick, refreshes the 30-minute forecast on its own cadence (cached in the state), takes the
recent peak, credits arriving replicas at their expected ready time and runs the planner.

`ApprovalModel` is the replay's stand-in for the people and the policy that approve proposals:
what `scaling/services.py` approves by policy (reactive scale-ups within the guardrail) is applied
at once, everything else after a configurable approval delay.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

import numpy as np

from scaling.engine import planner
from scaling.engine.forecast import forecast
from scaling.engine.planner import Decision, ForecastPoint, PlanInput, PlannerState, PoolPlan, ScheduleWindow
from scaling.engine.queue_depth import QueueDepthPolicy
from scaling.engine.rate_series import from_values
from scaling.engine.signals import PoolSignals

FORECAST_BIN_S = 60.0  # stored rates are averaged into 1-minute bins for the lead-time forecast
RECENT_HISTORY_S = 3600.0  # the lead-time forecast reads the last hour of those bins
SEASONAL_BIN_S = 600.0  # the 30-minute forecast reads 10-minute bins over up to 8 days
SEASONAL_HISTORY_S = 8 * 86_400.0  # a week and a day: daily and weekly seasons
SEASONAL_EVERY_S = 300.0  # and is remade every 5 minutes
PEAK_WINDOW_S = 1800.0  # the recent peak: the highest 1-minute bin of the last 30 minutes
HISTORY_MAX_AGE_S = 300.0  # history whose newest known rate is older than this is no forecast of now
LEAD_METHOD = "trend"  # self-tuned damped trend (docs/engine.md, "The lead-time forecast's method")
SEASONAL_METHOD = "adaptive"
DECISION_DELAY_S = 30.0  # a tick, an approval within the guardrails and the API call
DEFAULT_COLD_START_S = 90.0  # a pool's cold start until one is measured (design.md §2: 45-90 s)
# A load-tested latency curve lets latency raise the capacity past the stated one; a straight line
# to the SLO may only lower it (a flat curve would read as spare capacity).
CORRECTION_MAX_WITH_CURVE = 1.5
CORRECTION_MAX_WITHOUT_CURVE = 1.0

# Which planner term becomes which kind of proposal (values of `scaling.choices.ProposalKind`).
PRESCALE_KIND, REACTIVE_KIND = "prescale", "reactive"
KIND_BY_BINDING = {
    planner.PREDICTIVE: PRESCALE_KIND,
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


@dataclass(frozen=True)
class SeasonalCache:
    """The last 30-minute forecast and when it was made (refreshed every SEASONAL_EVERY_S)."""

    made_at_s: float | None = None
    expected_rps: float | None = None
    p90_rps: float | None = None

    def due(self, now_s: float) -> bool:
        return self.made_at_s is None or now_s - self.made_at_s >= SEASONAL_EVERY_S - 1e-9


@dataclass(frozen=True)
class DecideState:
    planner: PlannerState = field(default_factory=PlannerState)
    seasonal: SeasonalCache = field(default_factory=SeasonalCache)


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
              capacity_latency_s: float | None = None) -> PoolPlan:
    """The planner's view of a pool, built the same way for a live pool and a replayed one."""
    return PoolPlan(
        capacity_rps_per_replica=capacity_rps_per_replica,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        slo_latency_s=slo_latency_s,
        slo_signal=latency_signal_for(slo_percentile),
        latency_curve=latency_curve,
        capacity_latency_s=capacity_latency_s,
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


def forecast_point(values: np.ndarray, step_s: float, horizon_s: float, method: str) -> ForecastPoint | None:
    """A forecast from binned rates ending now; None with too little history, or when it stopped
    arriving (its newest known bin older than HISTORY_MAX_AGE_S): that is no forecast of now."""
    finite = np.flatnonzero(np.isfinite(values))
    if finite.size < 2 or (len(values) - 1 - finite[-1]) * step_s > HISTORY_MAX_AGE_S:
        return None
    made = forecast(from_values(values[finite[0]:], step_s), horizon_s, method)
    point = ForecastPoint(horizon_s, made.expected_rps, made.p90_rps)
    return point if point.usable else None


def _with_now(history: PoolHistory, since_s: float, now_s: float, rate_now: float) -> tuple[np.ndarray, np.ndarray]:
    times, rates = history.rates_since(since_s)
    return np.append(times, now_s), np.append(rates, rate_now)


def forecasts(history: PoolHistory, pool: PoolPlan, now_s: float, rate_now: float, seasonal: SeasonalCache
              ) -> tuple[ForecastPoint | None, ForecastPoint | None, np.ndarray, SeasonalCache]:
    """The lead-time forecast (1-minute bins, every tick), the 30-minute peak (10-minute bins over
    days, refreshed every 5 minutes: the larger expected value of it and the lead-time forecast,
    the larger p90), the recent bins, and the refreshed cache."""
    times, rates = _with_now(history, now_s - RECENT_HISTORY_S, now_s, rate_now)
    recent = binned_rates(times, rates, now_s - RECENT_HISTORY_S, now_s, FORECAST_BIN_S)
    lead = forecast_point(recent, FORECAST_BIN_S, pool.lead_s, LEAD_METHOD)
    if seasonal.due(now_s):
        long_times, long_rates = _with_now(history, now_s - SEASONAL_HISTORY_S, now_s, rate_now)
        coarse = binned_rates(long_times, long_rates, now_s - SEASONAL_HISTORY_S, now_s, SEASONAL_BIN_S)
        far = (forecast_point(coarse, SEASONAL_BIN_S, pool.prescale_horizon_s, SEASONAL_METHOD)
               or forecast_point(recent, FORECAST_BIN_S, pool.prescale_horizon_s, SEASONAL_METHOD))
        seasonal = SeasonalCache(now_s, far.expected_rps if far else None, far.p90_rps if far else None)
    far = (ForecastPoint(pool.prescale_horizon_s, seasonal.expected_rps, seasonal.p90_rps)
           if seasonal.expected_rps is not None and seasonal.p90_rps is not None else None)
    if lead is None:
        return None, far, recent, seasonal
    if far is None:
        return lead, lead, recent, seasonal
    peak = far if far.expected_rps >= lead.expected_rps else lead
    return lead, ForecastPoint(far.horizon_s, peak.expected_rps, max(lead.p90_rps, far.p90_rps)), recent, seasonal


def recent_peak_rps(recent: np.ndarray) -> float | None:
    """The highest 1-minute bin of the last PEAK_WINDOW_S (None when none is known)."""
    window = recent[-int(PEAK_WINDOW_S / FORECAST_BIN_S):]
    finite = window[np.isfinite(window)]
    return float(finite.max()) if finite.size else None


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
           windows: tuple[ScheduleWindow, ...] = ()) -> Step:
    """Forecast from the history, assemble the planner's input and plan: the one decide step."""
    rate = signals.request_rate_rps
    rate_now = float(rate.value) if rate.is_known else math.nan  # type: ignore[arg-type]
    lead, peak, recent, seasonal = forecasts(history, pool, now_s, rate_now, state.seasonal)
    arriving = signals.arriving_replicas
    arriving_count = max(0, int(round(arriving.value))) if arriving.is_known else 0  # type: ignore[arg-type]
    inputs = PlanInput(
        now_s=now_s, signals=signals,
        arriving_ready_in_s=arriving_ready_in(history.requested_at() if arriving_count else [], arriving_count, now_s,
                                              pool.cold_start_p95_s),
        forecast_lead=lead, forecast_peak=peak, windows=windows,
        approved_floor=history.approved_floor(now_s), recent_peak_rps=recent_peak_rps(recent),
    )
    decision = planner.plan(inputs, pool, state.planner)
    return Step(decision, inputs, recent, DecideState(decision.state, seasonal))


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
    """The replay's approvals: what policy approves (`ApprovalPolicy`, `scaling/services.py`:
    reactive scale-ups of at most `reactive_max_step`) at once, everything else `approval_delay_s`
    after a person was first asked (a newer proposal of the same track replaces the older one, the
    person still answers at that time). An approved pre-scale is held as a floor until the forecast
    peak it was made for (at most the pool's pre-scale horizon after it was made), as the loop's
    `floor_until` and `approved_floor` do; a forecast-bound change of the pre-scale kind without a
    pre-scale proposal holds no floor once applied (the loop's floor_until is empty there and the
    floor ends with its execution, which the simulated cluster does at once)."""

    approval_delay_s: float = 60.0
    reactive_max_step: int = 4
    # A proposed policy, not production's today: a scale-up bound by the short-horizon forecast (the
    # planner's lead-time term, not the >= 3x pre-scale rule) approved within the same guardrail.
    auto_approve_predictive: bool = False
    pending: dict[bool, _Pending] = field(default_factory=dict)  # by track: pre-scale or not
    floor: tuple[int, float] | None = None  # (replicas, until)

    def approved_floor(self, now_s: float) -> int:
        return self.floor[0] if self.floor is not None and now_s < self.floor[1] else 0

    def auto_approved(self, kind: str, current: int, target: int) -> bool:
        return kind == REACTIVE_KIND and 0 < target - current <= self.reactive_max_step

    def apply(self, now_s: float, decision: Decision, desired: int, horizon_s: float,
              min_replicas: int, max_replicas: int) -> int:
        """The replicas the simulated cluster runs after this tick (the loop's act, then approvals)."""
        target = desired
        change = proposed_change(decision, min_replicas, max_replicas)
        if change is not None:
            kind, wanted = change
            if (self.auto_approve_predictive and decision.prescale is None and decision.binding == planner.PREDICTIVE
                    and 0 < wanted - desired <= self.reactive_max_step):
                kind = REACTIVE_KIND
            track = kind == PRESCALE_KIND
            older = self.pending.get(track)
            if not track and self.auto_approved(kind, desired, wanted):
                self.pending.pop(track, None)
                target = wanted
            elif older is None or older.target != wanted:
                due = older.due_s if older is not None else now_s + self.approval_delay_s
                floor_until = (now_s + min(decision.prescale.horizon_s, horizon_s)
                               if decision.prescale is not None else None)
                self.pending[track] = _Pending(due, kind, wanted, now_s, desired, floor_until)
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
    """A persisted state: `PlannerMemory.state` and `.seasonal_forecast` as any earlier version wrote them."""
    state = PlannerState.from_dict(planner_state) if planner_state else PlannerState()
    seasonal = seasonal or {}
    made_at = seasonal.get("made_at")  # ISO time with its zone
    made_at_s = datetime.fromisoformat(made_at).timestamp() if made_at else None
    return DecideState(state, SeasonalCache(made_at_s, seasonal.get("expected"), seasonal.get("p90")))


def seasonal_dict(cache: SeasonalCache) -> dict[str, Any]:
    """The cached forecast for `PlannerMemory.seasonal_forecast` (the format it always had)."""
    made_at = None if cache.made_at_s is None else datetime.fromtimestamp(cache.made_at_s, timezone.utc).isoformat()
    return {"made_at": made_at, "expected": cache.expected_rps, "p90": cache.p90_rps}
