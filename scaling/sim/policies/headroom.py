"""`headroom`: the live loop's decide step (`scaling/engine/decide.py`) driving the simulated pool.

A thin adapter: each tick the observation becomes fresh `PoolSignals` (the simulator's metrics
never go missing; the request rate read over the pool's rate window, as Prometheus reads it for the
loop) and the policy calls `decide()`, the same function the live loop calls, with a
`PoolHistory` kept in memory (the observed arrival rates, the replicas it asked for, the approved
pre-scale) instead of the database. What the decision asks for is approved as production approves
it (`ApprovalModel`): reactive and predictive scale-ups within the guardrail at once (a larger
one its guardrail's share), the planner's scale-downs at once, everything else
`approval_delay_s` later (default 60 s: a person clicking in Slack); an approved pre-scale is held
as a floor until the 30-minute horizon it was made for has passed.

The pool profile: per-replica capacity at the SLO is *measured* like a load test before the pool
takes traffic: Poisson arrivals with the workload's token-length mix (never its timing) on a few
simulated replicas, bisecting on the rate that still meets the TTFT objective. Real traffic is
burstier than Poisson; the planner learns that online: request mode reports the TTFT percentiles
of the last minute, as Prometheus reads them from vLLM's histogram, and the planner corrects the
capacity by the percentile that matches the objective (`latency_signal_for`); fluid mode reports
the same percentiles from its last minute of steps.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from controlplane.config import ApprovalPolicy
from scaling.engine import decide
from scaling.engine.decide import ApprovalModel, DecideState, SeasonalCache
from scaling.engine.planner import Decision, ForecastPoint, PlannerState, PoolPlan, record_scale_event
from scaling.engine.signals import PoolSignals, Reading
from scaling.sim.config import ClientConfig, SimConfig
from scaling.sim.policies.base import LATENCY_WINDOW_S, Observation
from scaling.sim.profiles import inter_token_seconds
from scaling.sim.workload import Workload

if TYPE_CHECKING:
    from scaling.sim.result import SimResult

CAPACITY_BISECTION_STEPS = 7
IDLE_SHARE = 0.05  # of the raw prefill capacity: the load test's nearly idle pool
LATENCY_CURVE_SHARES = (0.25, 0.5, 0.75, 0.9)  # of the load-tested capacity: where the curve is measured
REQUESTS_KEPT_S = 3600.0  # replicas asked for longer ago than this are no longer arriving (as the loop's)
# Requests a load test replays at each rate: a pool at 5 req/s per replica sent about this many in the
# 10 minutes the test used to last (4 replicas), and one attainment is then known to a few 0.1 %.
LOAD_TEST_REQUESTS = 12_000


def fresh(value: float) -> Reading:
    return Reading(float(value), 0.0)


def signals_of(observation: Observation, request_rate_rps: float | None = None) -> PoolSignals:
    """What a pool exports at a tick, as the live loop reads it (all fresh in the simulator); the request
    rate is `request_rate_rps` where given (read over a rate window), else the tick's own."""
    return PoolSignals(
        pool="sim",
        queue_depth=fresh(observation.queue_depth),
        running_requests=fresh(observation.running),
        gpu_utilization=fresh(observation.utilisation),
        work_share=fresh(observation.utilisation),  # the replay's busy share is a work share (batch fill, prefill)
        request_rate_rps=fresh(observation.arrival_rate_rps if request_rate_rps is None else request_rate_rps),
        ready_replicas=fresh(observation.ready_replicas),
        arriving_replicas=fresh(observation.starting_replicas),
        desired_replicas=fresh(observation.desired_replicas),
        ttft_p95_s=fresh(observation.ttft_p95_s),
        ttft_p99_s=fresh(observation.ttft_p99_s),
        queue_time_p95_s=fresh(observation.queue_time_p95_s),
        queue_time_p99_s=fresh(observation.queue_time_p99_s),
    )


@dataclass
class MemoryHistory:
    """The replay's `PoolHistory`: what the loop reads from the database, kept in memory."""

    approvals: ApprovalModel = field(default_factory=ApprovalModel)
    times: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    requested: list[float] = field(default_factory=list)

    def rates_since(self, since_s: float) -> tuple[np.ndarray, np.ndarray]:
        start = bisect_right(self.times, since_s)
        return np.asarray(self.times[start:], dtype=float), np.asarray(self.rates[start:], dtype=float)

    def requested_at(self) -> list[float]:
        return self.requested

    def approved_floor(self, now_s: float) -> int:
        return self.approvals.approved_floor(now_s)

    def record(self, now_s: float, rate_rps: float, added_replicas: int) -> None:
        """This tick's sample and the replicas the cluster accepted (the loop's persist step)."""
        self.times.append(now_s)
        self.rates.append(rate_rps)
        if len(self.times) > 2 * decide.SEASONAL_HISTORY_S / 15.0:  # trim now and then, not every tick
            start = bisect_right(self.times, now_s - decide.SEASONAL_HISTORY_S)
            del self.times[:start], self.rates[:start]
        self.requested += [now_s] * max(0, added_replicas)
        if len(self.requested) > 1000:
            self.requested = [at for at in self.requested if at > now_s - REQUESTS_KEPT_S]


class ForecastsDiverged(Exception):
    """A replay asked for forecasts of arrivals (or lead times) other than the recorded ones."""


Forecasts = tuple[ForecastPoint | None, ForecastPoint | None, np.ndarray, DecideState]


@dataclass
class SharedForecasts:
    """The decide step's forecasts at every tick of a replay, recorded by a first replay and read by the
    others (`decide.decide`'s `forecast_source`).

    The forecasts read only the arrival rates the pool observed, and every size of a warm-pool report
    replays the same arrivals (fluid mode observes them to the bit whatever the pool's state), so they
    are computed once per report instead of once per size. A reading replay whose rate at a tick, or
    whose lead time, is not the recorded one raises `ForecastsDiverged` (the caller replays it with its
    own forecasts), so what it decides is always what it would have decided alone."""

    recording: bool = True
    ticks: dict[float, tuple[float, ForecastPoint | None, ForecastPoint | None, np.ndarray, SeasonalCache, float | None]] = field(default_factory=dict)
    horizons_s: tuple[float, float] | None = None  # (lead time, pre-scale horizon) they were made for

    def __call__(self, history: decide.PoolHistory, pool: PoolPlan, now_s: float, rate_now: float,
                 state: DecideState) -> Forecasts:
        if self.recording:
            return self._record(history, pool, now_s, rate_now, state)
        return self.read(pool, now_s, rate_now, state)

    def reader(self) -> ForecastReader:
        """Reads this recording while it is made: for a policy deciding after the recording one at each tick."""
        return ForecastReader(self)

    def read(self, pool: PoolPlan, now_s: float, rate_now: float, state: DecideState) -> Forecasts:
        entry = self.ticks.get(now_s)
        if (entry is None or (pool.lead_s, pool.prescale_horizon_s) != self.horizons_s
                or not (entry[0] == rate_now or (math.isnan(entry[0]) and math.isnan(rate_now)))):
            raise ForecastsDiverged(f"no recorded forecast for a rate of {rate_now!r} at {now_s:g} s")
        _, lead, peak, recent, seasonal, newest = entry
        return lead, peak, recent, DecideState(state.planner, seasonal, None, None, newest)

    def _record(self, history: decide.PoolHistory, pool: PoolPlan, now_s: float, rate_now: float,
                state: DecideState) -> Forecasts:
        horizons = (pool.lead_s, pool.prescale_horizon_s)
        if self.horizons_s is None:
            self.horizons_s = horizons
        lead, peak, recent, state = decide.forecasts(history, pool, now_s, rate_now, state)
        if now_s in self.ticks or horizons != self.horizons_s:
            raise ForecastsDiverged(f"a second recording at {now_s:g} s")  # one replay records
        kept = recent
        if self.ticks:
            previous = self.ticks[next(reversed(self.ticks))][3]
            if np.array_equal(previous, recent):  # a new minute every 4 ticks: keep one array for the same ones
                kept = previous
        self.ticks[now_s] = (rate_now, lead, peak, kept, state.seasonal, state.newest_rate_s)
        return lead, peak, recent, state


@dataclass(frozen=True)
class ForecastReader:
    """A `forecast_source` that only reads a `SharedForecasts` (recording or not)."""

    recording: SharedForecasts

    def __call__(self, history: decide.PoolHistory, pool: PoolPlan, now_s: float, rate_now: float,
                 state: DecideState) -> Forecasts:
        return self.recording.read(pool, now_s, rate_now, state)


@dataclass
class RateWindow:
    """The rate as a live pool's Prometheus reads it, `rate(...[window])`: the requests of the ticks in the
    last `window_s` over their span. The simulator counts each tick's requests; the loop never sees one
    tick alone (a 15-s rate of bursty traffic swings several-fold where the 1-minute rate does not)."""

    window_s: float
    ticks: deque[tuple[float, float]] = field(default_factory=deque)  # (tick time, rate over that tick)

    def read(self, now_s: float, tick_rate_rps: float) -> float:
        if math.isnan(tick_rate_rps):
            return tick_rate_rps
        self.ticks.append((now_s, tick_rate_rps))
        while self.ticks[0][0] <= now_s - self.window_s:
            self.ticks.popleft()
        return sum(rate for _, rate in self.ticks) / len(self.ticks)


@dataclass
class HeadroomState:
    decide: DecideState = field(default_factory=DecideState)
    history: MemoryHistory = field(default_factory=MemoryHistory)
    decisions: list[Decision] = field(default_factory=list)
    keep_decisions: bool = False
    arrivals: RateWindow = field(default_factory=lambda: RateWindow(LATENCY_WINDOW_S))
    served: RateWindow = field(default_factory=lambda: RateWindow(LATENCY_WINDOW_S))

    @property
    def planner(self) -> PlannerState:
        """The planner's part of the state."""
        return self.decide.planner


@dataclass(frozen=True)
class HeadroomPolicy:
    pool: PoolPlan
    approval_delay_s: float = 60.0  # a person's answer to a proposal policy does not approve
    # The approval guardrail: reactive scale-ups approved by policy, this many or this share of the pool
    reactive_max_step: int = ApprovalPolicy.reactive_max_step
    reactive_max_percent: int | None = ApprovalPolicy.reactive_max_percent
    name: str = "headroom"
    tick_s: float = 15.0
    observes_latency: bool = True  # request mode reports TTFT percentiles to it
    # Forecasts recorded once for every replay of the same arrivals (a warm-pool report's sizes); None:
    # the decide step's own forecasters.
    forecasts: SharedForecasts | ForecastReader | None = field(default=None, compare=False, repr=False)
    # The window the pool's request rate is read over: a live pool's `prometheus_rate_window` (1m by default);
    # the tick (15 s) reads each tick's own count, as replays did before session 16.
    rate_window_s: float = LATENCY_WINDOW_S

    def new_state(self) -> HeadroomState:
        return HeadroomState(history=MemoryHistory(ApprovalModel(
            self.approval_delay_s, self.reactive_max_step, reactive_max_percent=self.reactive_max_percent)),
            arrivals=RateWindow(self.rate_window_s), served=RateWindow(self.rate_window_s))

    def decide(self, now: float, observation: Observation, state: HeadroomState) -> int:
        rate = state.arrivals.read(now, observation.arrival_rate_rps)
        served_rate = state.served.read(now, observation.served_rate_rps)
        signals = signals_of(observation, rate)
        served = None if math.isnan(served_rate) else fresh(served_rate)
        step = decide.decide(now, signals, self.pool, state.decide, state.history, forecast_source=self.forecasts,
                             served_rate=served)
        decision = step.decision
        if state.keep_decisions:
            state.decisions.append(decision)
        current = observation.desired_replicas
        target = state.history.approvals.apply(now, decision, current, self.pool.prescale_horizon_s,
                                               self.pool.min_replicas, self.pool.max_replicas)
        # The simulated cluster accepts an approved change at once: that is when the rate limits count it.
        planner_state = record_scale_event(step.state.planner, now, target - current)
        state.decide = step.state if planner_state is step.state.planner else replace(step.state, planner=planner_state)
        state.history.record(now, rate, target - current)
        return target


def _load_test(config: SimConfig, workload: Workload, replicas: int,
               requests: int = LOAD_TEST_REQUESTS) -> Callable[[float], SimResult]:
    """Runs `replicas` warm replicas of the profile under Poisson arrivals at a pool-wide rate.

    Prompt and output lengths are drawn from the workload's token mix (never its timing). Every rate
    replays the same `requests` requests in the same order, only spaced differently (the same unit-rate
    gaps divided by the rate): the bisection compares rates, not samples. Drawn anew for each rate, a
    few hundred long-prompt requests (a pool serving 0.1 req/s per replica) made the measured capacity
    vary 6x from one seed to the next (docs/benchmarks.md, "Judged on traffic the suite never saw").
    """
    from scaling.sim.policies.static import StaticPolicy
    from scaling.sim.request_mode import run_request_mode
    from scaling.sim.workload import Trace

    prompt, output = workload.token_sample()
    rng = np.random.default_rng(config.seed)
    picks = rng.integers(0, len(prompt), requests)
    prompts, outputs = np.asarray(prompt)[picks], np.asarray(output)[picks]
    unit_arrivals = np.cumsum(rng.exponential(1.0, requests))  # a Poisson process at 1 req/s
    # A load test scores every request it sends: the replay's warm-up is not part of it (with it, a
    # 10-minute test scored nothing and every rate "met" the objective).
    load_config = replace(config, client=ClientConfig(), queue_limit=None, min_replicas=replicas, max_replicas=replicas,
                          warmup_s=0.0)

    def run(rate: float) -> SimResult:
        trace = Trace("load-test", unit_arrivals / rate, prompts, outputs)
        return run_request_mode(trace, load_config, StaticPolicy(replicas))

    return run


def load_test_target(objective: float, idle_attainment: float) -> float:
    """The attainment the load test holds the pool to: the objective, less the misses no load causes.

    Where a nearly idle pool already misses (prompts whose prefill alone is over the SLO), load may
    add the objective's allowance on top of those; otherwise no rate would pass and the capacity
    would fall to its floor, asking for every replica the pool may have.
    """
    return objective if idle_attainment >= objective else objective - (1.0 - idle_attainment)


def measured_capacity_rps(config: SimConfig, workload: Workload, replicas: int = 4) -> float:
    """Per-replica request rate at which a small pool still meets the TTFT SLO: a load test.

    Poisson arrivals with the workload's token mix on `replicas` warm replicas (`_load_test`);
    bisection on the rate for the configured SLO objective (`load_test_target`: less the misses a
    nearly idle pool already has). This is how a pool profile is measured before it takes traffic.
    """
    prompt, _ = workload.token_sample()
    raw = config.profile.prefill_tokens_per_s / max(float(np.mean(prompt)), 1.0) * replicas
    run = _load_test(config, workload, replicas)
    target = load_test_target(config.slo_objective, run(raw * IDLE_SHARE).slo_attainment)

    def meets(rate: float) -> bool:
        return run(rate).slo_attainment >= target

    low, high = 0.0, raw
    for _ in range(CAPACITY_BISECTION_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if meets(middle) else (low, middle)
    return max(low, raw * 0.01) / replicas


def measured_latency_curve(config: SimConfig, workload: Workload, capacity_rps: float,
                           replicas: int = 4) -> tuple[tuple[tuple[float, float], ...], float | None]:
    """The profile's latency below capacity: the objective's TTFT percentile at a few shares of it,
    and the latency at capacity where it is not the SLO (None where it is).

    The same load test as the capacity's; the capacity correction compares observed latency with
    this curve. A straight line from the unloaded mean misreads it: on the Azure token mixes the
    p99 at a quarter of the capacity is already 0.35-0.50 s against an unloaded mean of 0.08-0.14 s,
    and a pool whose latency stays flat until its batch fills and then rises steeply would read
    as spare capacity. Where a nearly idle pool already misses the objective (long prompts), the
    curve ends at the latency measured at capacity, above the SLO: the part no load causes is in
    the profile, so the correction learns only from the latency load adds.
    """
    run = _load_test(config, workload, replicas)
    percentile = "p99" if slo_signal_for(config.slo_objective) == "ttft_p99_s" else "p95"

    def latency(rate: float) -> float:
        return getattr(run(rate).ttft_ms, percentile) / 1000.0

    prompt, _ = workload.token_sample()
    raw = config.profile.prefill_tokens_per_s / max(float(np.mean(prompt)), 1.0) * replicas
    end: float | None = None
    if run(raw * IDLE_SHARE).slo_attainment < config.slo_objective:
        at_capacity = latency(capacity_rps * replicas)
        end = max(config.slo_ttft_s, at_capacity) if math.isfinite(at_capacity) else None
    ceiling = end if end is not None else config.slo_ttft_s
    points, highest = [], 0.0
    for share in LATENCY_CURVE_SHARES:
        value = latency(share * capacity_rps * replicas)
        if math.isfinite(value):
            highest = min(max(highest, value), ceiling)  # non-decreasing, at most the latency at capacity
            points.append((share, highest))
    return tuple(points), end


def slo_signal_for(objective: float) -> str:
    """The TTFT percentile an objective is judged by (`decide.latency_signal_for`)."""
    return decide.latency_signal_for(objective)


def pool_plan_for(config: SimConfig, workload: Workload, capacity_rps: float | None = None) -> PoolPlan:
    """The planning profile of the simulated pool (see the module docstring).

    Without `capacity_rps` both the capacity and the latency curve are load-tested; with it (a
    shortcut for tests) the curve is the straight line from unloaded latency to the SLO.
    """
    profile = config.profile
    prompt, _ = workload.token_sample()
    unloaded = float(np.mean(prompt)) / profile.prefill_tokens_per_s + inter_token_seconds(profile, 1)
    curve: tuple[tuple[float, float], ...] = ()
    at_capacity: float | None = None
    if capacity_rps is None:
        capacity_rps = measured_capacity_rps(config, workload)
        curve, at_capacity = measured_latency_curve(config, workload, capacity_rps)
    return decide.pool_plan(
        capacity_rps_per_replica=capacity_rps,
        min_replicas=config.min_replicas,
        max_replicas=config.max_replicas,
        slo_latency_s=config.slo_ttft_s,
        slo_percentile=config.slo_objective,
        unloaded_latency_s=unloaded,
        cold_start_p95_s=config.cold_start.p95_s,
        latency_curve=curve,
        capacity_latency_s=at_capacity,
        latency_window_s=LATENCY_WINDOW_S,
    )


def build_headroom(context: object, approval_delay_s: float = 60.0) -> HeadroomPolicy:
    """The registry's factory: `context` is a `PolicyContext` (only its config and token mix are read)."""
    config: SimConfig = context.config  # type: ignore[attr-defined]
    workload: Workload = context.workload  # type: ignore[attr-defined]
    # The policy bins its observed rates per tick, so it must know the tick the replay will use.
    return HeadroomPolicy(pool_plan_for(config, workload), approval_delay_s=approval_delay_s, tick_s=config.tick_s or 15.0)
