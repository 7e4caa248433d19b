"""`headroom`: the Headroom planner (`scaling/engine/planner.py`) driving the simulated pool.

Each tick the policy turns the observation into `PoolSignals` (all fresh: the simulator's metrics
never go missing), forecasts the request rate from the rates it has observed so far (causal: it
never looks at the workload ahead; `scaling.engine.forecast`: the lead-time forecast is the
self-tuned damped trend on 60-s bins, remade every tick; the 30-minute one the adaptive blend on
10-minute bins) and runs the planner. A pre-scale proposal is approved automatically
`approval_delay_s` after it is made (default 60 s: a human clicking in Slack) and then held as a
floor until the 30-minute horizon it was made for has passed.

The pool profile: per-replica capacity at the SLO is *measured* like a load test before the pool
takes traffic: Poisson arrivals with the workload's token-length mix (never its timing) on a few
simulated replicas, bisecting on the rate that still meets the TTFT objective. Real traffic is
burstier than Poisson; the planner learns that online: request mode reports the TTFT percentiles
of the last minute, as Prometheus reads them from vLLM's histogram, and the planner corrects the
capacity by the percentile that matches the objective (`slo_signal_for`); fluid mode reports the
same percentiles from its last minute of steps.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from scaling.engine.forecast import forecast
from scaling.engine.planner import Decision, ForecastPoint, PlanInput, PlannerState, PoolPlan, plan, record_scale_event
from scaling.engine.queue_depth import QueueDepthPolicy
from scaling.engine.rate_series import from_values
from scaling.engine.signals import PoolSignals, Reading
from scaling.sim.config import ClientConfig, SimConfig
from scaling.sim.policies.base import Observation
from scaling.sim.profiles import inter_token_seconds
from scaling.sim.workload import Workload

if TYPE_CHECKING:
    from scaling.sim.result import SimResult

CAPACITY_BISECTION_STEPS = 7
LATENCY_CURVE_SHARES = (0.25, 0.5, 0.75, 0.9)  # of the load-tested capacity: where the curve is measured
HISTORY_S = 8 * 86_400.0  # observed rates kept: a week and a day, for daily and weekly seasons
RECENT_HISTORY_S = 3600.0  # the lead-time forecast looks at the last hour in fine bins
SEASONAL_BIN_S = 600.0  # the 30-minute forecast uses 10-minute bins over all the history


def fresh(value: float) -> Reading:
    return Reading(float(value), 0.0)


@dataclass
class HeadroomState:
    planner: PlannerState = field(default_factory=PlannerState)
    rates: list[float] = field(default_factory=list)  # observed arrival rate per tick
    requested_at: list[float] = field(default_factory=list)  # starting replicas, oldest first
    forecast_at_s: float = -math.inf
    seasonal_at_s: float = -math.inf
    seasonal: ForecastPoint | None = None
    forecast_lead: ForecastPoint | None = None
    forecast_peak: ForecastPoint | None = None
    pending: tuple[float, int, float] | None = None  # (approve at, replicas, expires at)
    approved: tuple[int, float] | None = None  # (replicas, until)
    decisions: list[Decision] = field(default_factory=list)
    keep_decisions: bool = False


@dataclass(frozen=True)
class HeadroomPolicy:
    pool: PoolPlan
    approval_delay_s: float = 60.0
    forecast_every_s: float = 15.0  # the lead-time forecast is remade every (15-s) tick: its 60-s bins slide
    forecast_bin_s: float = 60.0  # observed rates are averaged into bins this wide before forecasting
    seasonal_every_s: float = 300.0  # the 30-minute forecast is refreshed every 5 minutes (design.md §6)
    peak_window_s: float = 1800.0  # the recent peak that bounds the forecast's upper band
    # The lead-time forecast: the damped Holt trend whose constants are chosen by its own scored
    # errors (the adaptive blend has no trend term); its p90 is calibrated from its own errors.
    lead_method: str = "trend"
    name: str = "headroom"
    tick_s: float = 15.0
    observes_latency: bool = True  # request mode reports TTFT percentiles to it

    def new_state(self) -> HeadroomState:
        return HeadroomState()

    def decide(self, now: float, observation: Observation, state: HeadroomState) -> int:
        state.rates.append(observation.arrival_rate_rps)
        del state.rates[: max(0, len(state.rates) - int(HISTORY_S / self.tick_s))]
        self._track_arriving(now, observation, state)
        if now - state.forecast_at_s >= self.forecast_every_s - 1e-9:
            state.forecast_lead, state.forecast_peak = self._forecasts(now, state)
            state.forecast_at_s = now
        decision = plan(self._inputs(now, observation, state), self.pool, state.planner)
        state.planner = decision.state
        self._approve(now, decision, state)
        if state.keep_decisions:
            state.decisions.append(decision)
        target = decision.target_replicas if decision.target_replicas is not None else observation.desired_replicas
        # The simulated cluster accepts the target at once: that is when the rate limits count it.
        state.planner = record_scale_event(state.planner, now, target - observation.desired_replicas)
        if target > observation.desired_replicas:
            state.requested_at += [now] * (target - observation.desired_replicas)
        return target

    # -------------------------------------------------------------------------------------
    def _inputs(self, now: float, observation: Observation, state: HeadroomState) -> PlanInput:
        signals = PoolSignals(
            pool="sim",
            queue_depth=fresh(observation.queue_depth),
            running_requests=fresh(observation.running),
            gpu_utilization=fresh(observation.utilisation),
            request_rate_rps=fresh(observation.arrival_rate_rps),
            ready_replicas=fresh(observation.ready_replicas),
            arriving_replicas=fresh(observation.starting_replicas),
            desired_replicas=fresh(observation.desired_replicas),
            ttft_p95_s=fresh(observation.ttft_p95_s),
            ttft_p99_s=fresh(observation.ttft_p99_s),
        )
        cold_start = self.pool.cold_start_p95_s
        ready_in = tuple(max(0.0, at + cold_start - now) for at in state.requested_at)
        approved = state.approved[0] if state.approved is not None and now < state.approved[1] else 0
        return PlanInput(now, signals, ready_in, state.forecast_lead, state.forecast_peak, (), approved,
                         self._recent_peak_rps(state.rates))

    def _recent_peak_rps(self, rates: list[float]) -> float:
        """The highest forecast-bin mean rate over the peak window (same smoothing as the forecast)."""
        recent = np.asarray(rates[-max(1, int(self.peak_window_s / self.tick_s)):])
        per_bin = max(1, int(round(self.forecast_bin_s / self.tick_s)))
        if len(recent) < per_bin:
            return float(recent.max())
        return float(np.convolve(recent, np.ones(per_bin) / per_bin, mode="valid").max())

    def _track_arriving(self, now: float, observation: Observation, state: HeadroomState) -> None:
        # Oldest requests become ready first; a scale-down cancels the newest: keep the newest N.
        starting = observation.starting_replicas
        state.requested_at = state.requested_at[len(state.requested_at) - starting:] if starting else []
        if len(state.requested_at) < starting:
            state.requested_at = [now] * (starting - len(state.requested_at)) + state.requested_at

    def _forecasts(self, now: float, state: HeadroomState) -> tuple[ForecastPoint | None, ForecastPoint | None]:
        """Lead-time forecast from fine recent bins; the 30-minute one from 10-minute bins of days."""
        rates = state.rates
        recent = _binned(rates[-int(RECENT_HISTORY_S / self.tick_s):], self.forecast_bin_s, self.tick_s)
        if len(recent) < 2:
            return None, None
        made = forecast(from_values(recent, self.forecast_bin_s), self.pool.lead_s, self.lead_method)
        lead = ForecastPoint(self.pool.lead_s, made.expected_rps, made.p90_rps)
        if now - state.seasonal_at_s >= self.seasonal_every_s - 1e-9 or state.seasonal is None:
            daily = _binned(rates, SEASONAL_BIN_S, self.tick_s)
            source = from_values(daily, SEASONAL_BIN_S) if len(daily) >= 2 else from_values(recent, self.forecast_bin_s)
            made = forecast(source, self.pool.prescale_horizon_s)
            state.seasonal = ForecastPoint(self.pool.prescale_horizon_s, made.expected_rps, made.p90_rps)
            state.seasonal_at_s = now
        far = state.seasonal
        # The larger of two points, as the live loop does (scaling/loop.py `forecasts`); the engine's
        # `forecast_peak` (the peak within the window) waits for the one decide step both will call.
        peak = far if far.usable and far.expected_rps >= lead.expected_rps else lead
        return lead, ForecastPoint(far.horizon_s, peak.expected_rps, max(lead.p90_rps, far.p90_rps))

    def _approve(self, now: float, decision: Decision, state: HeadroomState) -> None:
        if state.pending is not None and now >= state.pending[0]:
            _, replicas, until = state.pending
            state.approved, state.pending = (replicas, until), None
        if state.approved is not None and now >= state.approved[1]:
            state.approved = None
        proposal = decision.prescale
        if proposal is not None and state.pending is None and (state.approved is None or state.approved[0] < proposal.target_replicas):
            # Held until the pre-scale horizon it was made for has passed (the forecast's peak may
            # come sooner within it, and lasts).
            state.pending = (now + self.approval_delay_s, proposal.target_replicas, now + self.pool.prescale_horizon_s)


def _load_test(config: SimConfig, workload: Workload, replicas: int, duration_s: float) -> Callable[[float], SimResult]:
    """Runs `replicas` warm replicas of the profile under Poisson arrivals at a pool-wide rate.

    Prompt and output lengths are drawn from the workload's token mix (never its timing).
    """
    from scaling.sim.policies.static import StaticPolicy
    from scaling.sim.request_mode import run_request_mode
    from scaling.sim.workload import Trace

    prompt, output = workload.token_sample()
    rng = np.random.default_rng(config.seed)
    load_config = replace(config, client=ClientConfig(), queue_limit=None, min_replicas=replicas, max_replicas=replicas)

    def run(rate: float) -> SimResult:
        count = int(rate * duration_s)
        arrivals = np.sort(rng.uniform(0, duration_s, count))
        picks = rng.integers(0, len(prompt), count)
        trace = Trace("load-test", arrivals, np.asarray(prompt)[picks], np.asarray(output)[picks])
        return run_request_mode(trace, load_config, StaticPolicy(replicas))

    return run


def measured_capacity_rps(config: SimConfig, workload: Workload, replicas: int = 4, duration_s: float = 600.0) -> float:
    """Per-replica request rate at which a small pool still meets the TTFT SLO: a load test.

    Poisson arrivals with the workload's token mix on `replicas` warm replicas (`_load_test`);
    bisection on the rate for the configured SLO objective. This is how a pool profile is
    measured before it takes traffic.
    """
    prompt, _ = workload.token_sample()
    raw = config.profile.prefill_tokens_per_s / max(float(np.mean(prompt)), 1.0) * replicas
    run = _load_test(config, workload, replicas, duration_s)

    def meets(rate: float) -> bool:
        return run(rate).slo_attainment >= config.slo_objective

    low, high = 0.0, raw
    for _ in range(CAPACITY_BISECTION_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if meets(middle) else (low, middle)
    return max(low, raw * 0.01) / replicas


def measured_latency_curve(config: SimConfig, workload: Workload, capacity_rps: float, replicas: int = 4,
                           duration_s: float = 600.0) -> tuple[tuple[float, float], ...]:
    """The profile's latency below capacity: the objective's TTFT percentile at a few shares of it.

    The same load test as the capacity's; the capacity correction compares observed latency with
    this curve. A straight line from the unloaded mean misreads it: on the Azure token mixes the
    p99 at a quarter of the capacity is already 0.35-0.50 s against an unloaded mean of 0.08-0.14 s,
    and a pool whose latency stays flat until its batch fills and then rises steeply would read
    as spare capacity.
    """
    run = _load_test(config, workload, replicas, duration_s)
    percentile = "p99" if slo_signal_for(config.slo_objective) == "ttft_p99_s" else "p95"
    points, highest = [], 0.0
    for share in LATENCY_CURVE_SHARES:
        latency = getattr(run(share * capacity_rps * replicas).ttft_ms, percentile) / 1000.0
        if math.isfinite(latency):
            highest = min(max(highest, latency), config.slo_ttft_s)  # non-decreasing, at most the SLO
            points.append((share, highest))
    return tuple(points)


def _binned(rates: list[float], bin_s: float, tick_s: float) -> np.ndarray:
    """Mean rate per bin of `bin_s`, bins aligned to end at the latest tick."""
    per_bin = max(1, int(round(bin_s / tick_s)))
    bins = len(rates) // per_bin
    return np.asarray(rates[len(rates) - bins * per_bin:], dtype=float).reshape(bins, per_bin).mean(axis=1)


def slo_signal_for(objective: float) -> str:
    """The TTFT percentile an objective is judged by: p99 for 99 % and stricter, else p95."""
    return "ttft_p99_s" if objective >= 0.99 else "ttft_p95_s"


def pool_plan_for(config: SimConfig, workload: Workload, capacity_rps: float | None = None) -> PoolPlan:
    """The planning profile of the simulated pool (see the module docstring).

    Without `capacity_rps` both the capacity and the latency curve are load-tested; with it (a
    shortcut for tests) the curve is the straight line from unloaded latency to the SLO.
    """
    profile = config.profile
    prompt, _ = workload.token_sample()
    unloaded = float(np.mean(prompt)) / profile.prefill_tokens_per_s + inter_token_seconds(profile, 1)
    curve: tuple[tuple[float, float], ...] = ()
    if capacity_rps is None:
        capacity_rps = measured_capacity_rps(config, workload)
        curve = measured_latency_curve(config, workload, capacity_rps)
    return PoolPlan(
        capacity_rps_per_replica=capacity_rps,
        min_replicas=config.min_replicas,
        max_replicas=config.max_replicas,
        slo_latency_s=config.slo_ttft_s,
        slo_signal=slo_signal_for(config.slo_objective),
        latency_curve=curve,
        unloaded_latency_s=min(unloaded, config.slo_ttft_s),
        cold_start_p95_s=config.cold_start.p95_s,
        decision_delay_s=config.tick_s or 15.0,
        queue=QueueDepthPolicy(min_replicas=config.min_replicas, max_replicas=config.max_replicas),
    )


def build_headroom(context: object, approval_delay_s: float = 60.0) -> HeadroomPolicy:
    """The registry's factory: `context` is a `PolicyContext` (only its config and token mix are read)."""
    config: SimConfig = context.config  # type: ignore[attr-defined]
    workload: Workload = context.workload  # type: ignore[attr-defined]
    # The policy bins its observed rates per tick, so it must know the tick the replay will use.
    return HeadroomPolicy(pool_plan_for(config, workload), approval_delay_s=approval_delay_s, tick_s=config.tick_s or 15.0)
