"""`--policy headroom` in replay: the planner pre-scales ahead of a surge it has seen before."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from scaling.engine import decide, planner
from scaling.sim.config import SimConfig
from scaling.sim.fluid_mode import run_fluid_mode
from scaling.sim.policies import POLICIES, PolicyContext, build_policy
from scaling.sim.policies.headroom import HeadroomPolicy, MemoryHistory, pool_plan_for
from scaling.sim.policies.keda_queue import KedaQueuePolicy
from scaling.sim.workload import RateTrace

WINDOW_S = 600.0
START = 63  # the replay starts at 10:30 on day one
SURGE = range(72, 78)  # 12:00-13:00 every day, a 10x surge
SECOND_SURGE_AT_S = (144 + SURGE.start - START) * WINDOW_S
FAST = dict(tick_s=60.0)  # a coarser tick keeps a 26-hour replay short


def daily_surge(until_s: float | None = None) -> RateTrace:
    """10:30 on day one to 13:00 on day two in 10-minute windows at 4 req/s, and 10x at 12:00.

    The surge arrives at once, faster than a replica starts. On day one it lasts 10 minutes (the
    pool learns it); on day two, an hour: only a pool scaled ahead of it meets the SLO.
    """
    first, second = np.full(144, 4.0), np.full(144, 4.0)
    first[SURGE.start] = 40.0
    second[list(SURGE)] = 40.0
    rates = np.concatenate([first, second])[START:144 + SURGE.stop]
    if until_s is not None:
        rates = rates[: int(until_s // WINDOW_S)]
    return RateTrace("daily-surge", np.arange(len(rates)) * WINDOW_S, WINDOW_S, rates)


@pytest.fixture(scope="module")
def replays():
    """One replay of each policy on the same surge (fluid mode, 10-s steps)."""
    workload = daily_surge()
    config = dataclasses.replace(SimConfig(), fluid_step_s=10.0)
    headroom = HeadroomPolicy(pool_plan_for(config, workload), **FAST)
    states = []
    new_state = headroom.new_state

    def keep_decisions():
        state = new_state()
        state.keep_decisions = True
        states.append(state)
        return state

    object.__setattr__(headroom, "new_state", keep_decisions)
    ran = run_fluid_mode(workload, config, headroom)
    keda = run_fluid_mode(workload, config, KedaQueuePolicy(config.min_replicas, config.max_replicas, tick_s=60.0))
    # The same replay cut an hour before the second surge: the difference is the second surge's.
    cut = daily_surge(until_s=SECOND_SURGE_AT_S - 3600)
    before = run_fluid_mode(cut, config, HeadroomPolicy(headroom.pool, **FAST))
    # The same planner with the pre-scale rule switched off.
    reactive_only = HeadroomPolicy(dataclasses.replace(headroom.pool, prescale_ratio=math.inf), **FAST)
    without = (run_fluid_mode(workload, config, reactive_only), run_fluid_mode(cut, config, reactive_only))
    return config, ran, states[0], keda, before, without


def attainment_after(whole, before) -> float:
    met = whole.slo_attainment * whole.requests - before.slo_attainment * before.requests
    return met / (whole.requests - before.requests)


def test_it_is_registered_for_replay():
    assert "headroom" in POLICIES
    context = PolicyContext(daily_surge(), SimConfig(), lambda policy: None)  # type: ignore[arg-type, return-value]
    policy = build_policy("headroom", context)
    assert isinstance(policy, HeadroomPolicy) and policy.approval_delay_s == 60.0
    assert 0 < policy.pool.capacity_rps_per_replica < math.inf


def test_it_pre_scales_before_a_known_surge_and_meets_the_slo(replays):
    config, result, state, _, before, without = replays

    proposals = [d for d in state.decisions if d.prescale is not None]
    ahead = [d for d in proposals if SECOND_SURGE_AT_S - 1800 <= d.state.last_prescale_at_s < SECOND_SURGE_AT_S]
    assert ahead, "no pre-scale proposal in the 30 minutes before the second surge"
    first = ahead[0]
    assert first.prescale.ratio >= 3.0 and planner.PRESCALE in first.reasons
    # Approved after the 60-s delay and held: the pool grew before the surge arrived.
    made_at = first.state.last_prescale_at_s
    held = [d for d in state.decisions if d.term(planner.PRESCALE_HOLD) is not None
            and made_at + 60 <= d.state.last_known_at_s < SECOND_SURGE_AT_S]
    assert held and max(d.target_replicas for d in held) >= first.prescale.target_replicas
    # The first, unannounced surge costs some requests; the announced one meets the SLO, and
    # would not have without the pre-scale.
    assert attainment_after(result, before) >= config.slo_objective > attainment_after(*without)


def test_it_beats_the_reactive_baseline_on_the_same_surge(replays):
    config, headroom, _, keda, _, _ = replays
    assert headroom.slo_attainment > keda.slo_attainment
    assert keda.slo_attainment < config.slo_objective


@pytest.mark.parametrize(
    ("case", "per_minute", "direction"),
    [
        ("a ramp: the lead forecast extrapolates past the last minute", [float(m) for m in range(2, 32)], 1),
        ("steady: the last minute's rate", [10.0] * 30, 0),
        ("a decay: below the last minute", [float(m) for m in range(40, 10, -1)], -1),
    ],
)
def test_its_lead_forecast_follows_the_trend_of_the_observed_rates(case, per_minute, direction):
    assert decide.LEAD_METHOD == "trend", "a trend, remade every tick"
    pool = planner.PoolPlan(capacity_rps_per_replica=5.0)
    history = MemoryHistory()
    rates = [rate for rate in per_minute for _ in range(4)]  # 15-s ticks
    for tick, rate in enumerate(rates[:-1]):
        history.record((tick + 1) * 15.0, rate, 0)
    lead, _, _, _ = decide.forecasts(history, pool, len(rates) * 15.0, rates[-1], decide.DecideState())
    change = lead.expected_rps - per_minute[-1]
    assert (change > 1e-6) - (change < -1e-6) == direction, case
    assert lead.p90_rps >= lead.expected_rps


def test_it_reads_the_request_rate_over_the_live_pools_rate_window():
    """The live loop reads Prometheus's rate(...[1m]), never one 15-s tick's count: on/off traffic (0 and
    40 req/s in turn) is 20 req/s to it once a minute is known. A replay that read each tick's count saw
    bursts as growth and surges a tick early. The served rate (a route's fallback) is read alike."""
    from scaling.sim.policies.base import Observation

    def observe(tick: int) -> Observation:
        rate = 40.0 * (tick % 2)
        return Observation(now=tick * 15.0, ready_replicas=4, starting_replicas=0, desired_replicas=4,
                           queue_depth=0.0, running=4.0, utilisation=0.5, arrival_rate_rps=rate,
                           served_rate_rps=rate / 2)

    pool = planner.PoolPlan(capacity_rps_per_replica=10.0, max_replicas=100)
    windowed, per_tick = HeadroomPolicy(pool), HeadroomPolicy(pool, rate_window_s=15.0)
    states = {policy: policy.new_state() for policy in (windowed, per_tick)}
    for state in states.values():
        state.keep_decisions = True
    for tick in range(1, 13):
        for policy, state in states.items():
            policy.decide(tick * 15.0, observe(tick), state)
    assert states[windowed].history.rates[:3] == [40.0, 20.0, 80.0 / 3]  # less than a minute known: its mean
    assert states[windowed].history.rates[3:] == [20.0] * 9
    assert states[per_tick].history.rates == [40.0 * (tick % 2) for tick in range(1, 13)]
    assert {d.term(planner.REACTIVE_RATE).numbers["request_rate_rps"] for d in states[windowed].decisions[3:]} == {20.0}
    served = states[windowed].served.ticks
    assert len(served) == 4 and sum(rate for _, rate in served) / len(served) == 10.0  # a minute of served rates
