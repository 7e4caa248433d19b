"""Property tests of the planner (`plan`) and the decide step (`decide`): any readings, known or not.

Whatever the signals, forecasts, schedule and remembered state: no exception; the target is None (nothing
known) or within [min, max] replicas (a hold may keep a count above max: unknown load never scales down);
with the load unknown or stale the target is never below the current count; the state survives a restart.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaling.engine import planner as p
from scaling.engine.decide import DecideState, decide, decide_state_from, forecast_dict, pool_plan
from scaling.engine.planner import ForecastPoint, PlanInput, PlannerState, PoolPlan, ScheduleWindow, plan
from scaling.engine.signals import STALE_AFTER_S, PoolSignals, Reading

# Bounded and reproducible: the fast tier stays fast, a failure is the same failure on every run.
FAST = settings(max_examples=100, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
NOW = 100_000.0

weird = st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e300])
numbers = st.one_of(st.floats(0.0, 500.0, allow_nan=False), weird)
ages = st.one_of(st.none(), st.sampled_from([-5.0, 0.0, 5.0, 59.0, 89.0, 91.0, 600.0]), st.floats(0.0, 200.0))


@st.composite
def readings(draw, values=numbers) -> Reading:
    """A sample that may be missing, NaN, infinite, negative, stale or of unknown age."""
    if draw(st.booleans()):
        return Reading()
    return Reading(draw(values), draw(ages))


counts = st.one_of(st.integers(0, 120).map(float), weird)
known_count = st.builds(lambda v: Reading(float(v), 5.0), st.integers(0, 120))


@st.composite
def pool_signals(draw) -> PoolSignals:
    ready = draw(st.one_of(known_count, readings(counts)))
    return PoolSignals(
        pool="chat",
        queue_depth=draw(readings()),
        request_rate_rps=draw(readings()),
        kv_cache_usage=draw(readings(st.floats(0.0, 1.0))),
        ttft_p95_s=draw(readings(st.one_of(st.floats(0.0, 10.0), weird))),
        ttft_p99_s=draw(readings(st.one_of(st.floats(0.0, 10.0), weird))),
        queue_time_p95_s=draw(readings(st.one_of(st.floats(0.0, 10.0), weird))),
        ready_replicas=ready,
        arriving_replicas=draw(readings(counts)),
        desired_replicas=draw(st.one_of(known_count, readings(counts))),
        waiting_per_ready_replica=tuple(draw(st.lists(readings(), max_size=8))),
    )


@st.composite
def pool_plans(draw) -> PoolPlan:
    low = draw(st.integers(0, 8))
    high = draw(st.integers(max(low, 1), 80))
    return PoolPlan(
        capacity_rps_per_replica=draw(st.floats(0.05, 500.0)),
        min_replicas=low, max_replicas=high,
        warm_pool_fraction=draw(st.floats(0.0, 1.0)),
        request_rate_margin=draw(st.sampled_from([0.0, 1.0, 1.3])),
        queue_term_rate_multiple=draw(st.sampled_from([0.0, 3.0])),
        scale_up_percent=draw(st.sampled_from([100.0, 900.0])),
        latency_curve=draw(st.sampled_from([(), ((0.5, 0.3), (0.9, 0.8))])),
        correction_max=draw(st.sampled_from([1.0, 1.5])),
    )


forecast_points = st.one_of(st.none(), st.builds(ForecastPoint, st.sampled_from([120.0, 1800.0, 7200.0]),
                                                 numbers, numbers))
windows = st.lists(st.builds(lambda start, length, factor, rps: ScheduleWindow(NOW + start, NOW + start + length, factor, rps),
                             st.floats(-3600.0, 3600.0), st.floats(0.0, 7200.0), st.floats(0.0, 3.0),
                             st.one_of(st.none(), numbers)), max_size=3)


@st.composite
def plan_inputs(draw, signals=pool_signals()) -> PlanInput:
    return PlanInput(
        now_s=NOW, signals=draw(signals),
        arriving_ready_in_s=tuple(draw(st.lists(st.floats(0.0, 300.0), max_size=6))),
        forecast_lead=draw(forecast_points), forecast_peak=draw(forecast_points), windows=tuple(draw(windows)),
        approved_floor=draw(st.sampled_from([0, 0, 3, 50])),
        recent_peak_rps=draw(st.one_of(st.none(), numbers)),
        lead_peak_rps=draw(st.one_of(st.none(), numbers)),
    )


@st.composite
def planner_states(draw) -> PlannerState:
    """What a planner may remember: from a fresh start to histories of another configuration."""
    if draw(st.booleans()):
        return PlannerState()
    times = st.floats(NOW - 1000.0, NOW)
    return PlannerState(
        last_known_at_s=draw(st.one_of(st.none(), times)),
        last_good_target=draw(st.one_of(st.none(), st.integers(0, 120))),
        recommendations=tuple(sorted(draw(st.lists(st.tuples(times, st.integers(0, 120)), max_size=5)))),
        scale_events=tuple(sorted(draw(st.lists(st.tuples(times, st.integers(-20, 20).filter(bool)), max_size=4)))),
        capacity_correction=draw(st.floats(0.5, 1.5)),
        last_prescale_at_s=draw(st.one_of(st.none(), times)),
        last_prescale_target=draw(st.one_of(st.none(), st.integers(1, 120))),
    )


def assert_within_bounds(decision: p.Decision, pool: PoolPlan) -> None:
    target, current = decision.target_replicas, decision.current_replicas
    if target is None:
        assert current is None  # "do nothing" only when not even the current count is known
        return
    assert isinstance(target, int)
    if decision.hold and current is not None and current > pool.max_replicas:
        assert target == current  # unknown load keeps even an over-max count: it never scales down
    else:
        assert pool.min_replicas <= target <= pool.max_replicas


def assert_round_trips(state: PlannerState) -> None:
    text = json.dumps(state.to_dict(), allow_nan=False)  # what the loop stores: plain JSON
    assert PlannerState.from_dict(json.loads(text)) == state


@FAST
@given(inputs=plan_inputs(), pool=pool_plans(), state=planner_states())
def test_the_target_is_within_min_and_max_and_the_state_round_trips(inputs, pool, state):
    decision = plan(inputs, pool, state)
    assert_within_bounds(decision, pool)
    if decision.hold and decision.current_replicas is not None:
        assert decision.target_replicas >= decision.current_replicas
    assert decision.reasons and len(set(decision.reasons)) == len(decision.reasons)
    assert_round_trips(decision.state)


unknown_load = st.one_of(st.just(Reading()), st.builds(Reading, st.sampled_from([math.nan, math.inf, -math.inf]), ages),
                         st.builds(Reading, st.floats(0.0, 500.0),
                                   st.one_of(st.none(), st.just(-1.0), st.floats(STALE_AFTER_S + 0.1, 1e5))))


@st.composite
def signals_with_unknown_load(draw) -> PoolSignals:
    """The current count is known; the load (queue, rate, per-replica queues) is missing, NaN or stale."""
    signals = draw(pool_signals())
    return PoolSignals(
        pool="chat", queue_depth=draw(unknown_load), request_rate_rps=draw(unknown_load),
        kv_cache_usage=signals.kv_cache_usage, ttft_p95_s=signals.ttft_p95_s, ready_replicas=signals.ready_replicas,
        arriving_replicas=signals.arriving_replicas, desired_replicas=draw(known_count),
        waiting_per_ready_replica=tuple(draw(st.lists(unknown_load, max_size=6))),
    )


@FAST
@given(inputs=plan_inputs(signals_with_unknown_load()), pool=pool_plans(), state=planner_states())
def test_unknown_signals_never_lower_the_target(inputs, pool, state):
    current = int(inputs.signals.desired_replicas.value)
    decision = plan(inputs, pool, state)
    assert decision.hold and p.SIGNALS_UNKNOWN in decision.reasons
    assert decision.target_replicas >= current
    assert decision.prescale is None  # nothing is proposed on load nobody read
    assert_within_bounds(decision, pool)


@FAST
@given(inputs=plan_inputs(), pool=pool_plans(), state=planner_states(), silence_s=st.floats(STALE_AFTER_S + 0.1, 3600.0))
def test_signals_that_went_stale_never_lower_the_target(inputs, pool, state, silence_s):
    # Prometheus stopped answering: the same samples, looked at later, with the current count still read.
    signals = inputs.signals.aged(silence_s)
    current = 4
    signals = PoolSignals(**{**signals.__dict__, "desired_replicas": Reading(float(current), 5.0)})
    decision = plan(PlanInput(NOW + silence_s, signals, inputs.arriving_ready_in_s, inputs.forecast_lead,
                              inputs.forecast_peak, inputs.windows, inputs.approved_floor, inputs.recent_peak_rps,
                              inputs.served_rate, inputs.lead_peak_rps),
                    pool, state)
    assert decision.hold
    assert decision.target_replicas >= current
    assert_within_bounds(decision, pool)


@FAST
@given(inputs=plan_inputs(), pool=pool_plans(), state=planner_states())
def test_a_restart_from_the_saved_state_decides_the_same(inputs, pool, state):
    saved = PlannerState.from_dict(json.loads(json.dumps(state.to_dict())))
    before, after = plan(inputs, pool, state), plan(inputs, pool, saved)
    assert (after.target_replicas, after.reasons, after.hold, after.prescale, after.state) == (
        before.target_replicas, before.reasons, before.hold, before.prescale, before.state)


class _History:
    """An in-memory `PoolHistory`: the rates already stored, the scale-up requests, an approved floor."""

    def __init__(self, times: np.ndarray, rates: np.ndarray, requested: list[float], floor: int) -> None:
        self.times, self.rates, self.requested, self.floor = times, rates, requested, floor

    def rates_since(self, since_s: float) -> tuple[np.ndarray, np.ndarray]:
        keep = self.times > since_s
        return self.times[keep], self.rates[keep]

    def requested_at(self) -> list[float]:
        return self.requested

    def approved_floor(self, now_s: float) -> int:
        return self.floor


history_rates = st.lists(st.one_of(st.floats(0.0, 300.0), st.just(math.nan)), max_size=40)


@settings(FAST, max_examples=30)
@given(pool=pool_plans(), rates=history_rates, ticks=st.lists(pool_signals(), min_size=1, max_size=4),
       floor=st.sampled_from([0, 5]), cold_start=st.one_of(st.none(), st.floats(1.0, 300.0)))
def test_the_decide_step_keeps_the_bounds_and_survives_a_restart(pool, rates, ticks, floor, cold_start):
    pool = pool_plan(capacity_rps_per_replica=pool.capacity_rps_per_replica, min_replicas=pool.min_replicas,
                     max_replicas=pool.max_replicas, slo_latency_s=1.0, slo_percentile=0.95, unloaded_latency_s=0.2,
                     cold_start_p95_s=cold_start)
    times = NOW - 60.0 * np.arange(len(rates), 0, -1)
    history = _History(times, np.asarray(rates, dtype=float), [NOW - 30.0], floor)
    live, restored = DecideState(), None
    for index, signals in enumerate(ticks):
        now = NOW + 15.0 * index
        if restored is not None:  # a worker that restarted from the stored state (run first: the live
            again = decide(now, signals, pool, restored, history).decision  # forecasters advance in place)
        step = decide(now, signals, pool, live, history)
        decision = step.decision
        assert_within_bounds(decision, pool)
        if decision.hold and decision.current_replicas is not None:
            assert decision.target_replicas >= decision.current_replicas
        if restored is not None:
            assert (again.target_replicas, again.reasons, again.hold) == (decision.target_replicas, decision.reasons,
                                                                           decision.hold)
        # What the loop stores, as JSON, read back as after a restart.
        planner_json = json.loads(json.dumps(step.state.planner.to_dict(), allow_nan=False))
        forecast_json = json.loads(json.dumps(forecast_dict(step.state)))
        restored = decide_state_from(planner_json, forecast_json)
        assert restored.planner == step.state.planner
        live = step.state


# ---------------------------------------------------------------------------- what the properties found
# Each of these crashed or left the bounds before the fix beside it in planner.py / decide.py.

# At full use of the capacity, so the figures below are the rule's own arithmetic.
POOL = PoolPlan(capacity_rps_per_replica=10.0, min_replicas=2, max_replicas=40, capacity_utilisation=1.0)


def _signals(ready: float | None = 4, desired: float | None = 4, queue: float | None = 0.0, rate: float | None = 30.0,
             arriving: float | None = 0) -> PoolSignals:
    def reading(value: float | None) -> Reading:
        return Reading(float(value), 5.0) if value is not None else Reading()

    return PoolSignals(pool="chat", queue_depth=reading(queue), request_rate_rps=reading(rate),
                       ready_replicas=reading(ready), desired_replicas=reading(desired),
                       arriving_replicas=reading(arriving))


def test_a_fallback_with_the_count_unknown_is_raised_to_min_replicas():
    # The Kubernetes read failed; a window expecting no traffic asked for 0 replicas, below the minimum of 2.
    window = ScheduleWindow(NOW - 60, NOW + 600, prescale_factor=0.4, expected_rps=0.0)
    decision = plan(PlanInput(NOW, _signals(desired=None), windows=(window,)), POOL, PlannerState())
    assert decision.current_replicas is None
    assert decision.target_replicas == 2
    assert decision.binding == p.SIGNALS_FALLBACK


def test_a_window_whose_own_rate_is_not_a_number_uses_the_expected_peak():
    window = ScheduleWindow(NOW - 60, NOW + 600, prescale_factor=0.5, expected_rps=math.nan)
    decision = plan(PlanInput(NOW, _signals(), forecast_lead=ForecastPoint(120.0, 60.0, 70.0), windows=(window,)),
                    POOL, PlannerState())
    assert decision.term(p.SCHEDULED).replicas == 9  # 60 rps x 1.5 at 10 rps per replica


def test_a_pool_scaled_to_zero_with_a_forecast_peak_gets_a_prescale_not_a_crash():
    # min replicas 0, nothing ready and nothing arriving: the idle pool is compared with one replica's capacity.
    pool = replace(POOL, min_replicas=0)
    inputs = PlanInput(NOW, _signals(ready=0, desired=0, queue=0.0, rate=0.0),
                       forecast_peak=ForecastPoint(1800.0, 40.0, 50.0))
    decision = plan(inputs, pool, PlannerState())
    assert decision.prescale is not None
    assert decision.prescale.ratio == 4.0  # 40 rps against one replica's 10
    assert decision.prescale.target_replicas == 6  # 4 replicas for the peak + 50 %


def test_an_absurd_replica_count_is_unknown_not_a_crash():
    decision = plan(PlanInput(NOW, _signals(ready=1e300)), POOL, PlannerState())
    assert decision.ready_replicas is None
    assert decision.hold and decision.target_replicas >= 4
    step = decide(NOW, _signals(arriving=1e300), pool_plan(
        capacity_rps_per_replica=10.0, min_replicas=2, max_replicas=40, slo_latency_s=1.0, slo_percentile=0.95,
        unloaded_latency_s=0.2, cold_start_p95_s=90.0), DecideState(), _History(np.zeros(0), np.zeros(0), [], 0))
    assert step.inputs.arriving_ready_in_s == ()  # none credited
