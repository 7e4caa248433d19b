"""Fluid mode's observations: the TTFT percentiles a latency-reading policy sees each tick."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaling.sim.config import ClientConfig, SimConfig
from scaling.sim.fluid_mode import resume_fluid_mode, run_fluid_mode, run_fluid_with_shadows
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.workload import RateTrace

from .helpers import LatencyReadingStatic, ScriptedPolicy

CONFIG = SimConfig(tick_s=15.0)


def steady(rate_rps: float, minutes: int = 20) -> RateTrace:
    return RateTrace("steady", np.arange(minutes) * 60.0, 60.0, np.full(minutes, rate_rps))


def late_p99(result) -> float:  # noqa: ANN001
    return float(np.median([s.ttft_p99_s for s in result.samples if 300 <= s.now <= 1200]))


def test_its_ttft_percentiles_rise_past_the_slo_when_under_provisioned():
    # The same load on 2 replicas (short) and on 12 (plenty): the p99 tells them apart across the SLO.
    trace = steady(60.0)
    short = run_fluid_mode(trace, CONFIG, LatencyReadingStatic(2))
    plenty = run_fluid_mode(trace, CONFIG, LatencyReadingStatic(12))

    assert late_p99(short) > CONFIG.slo_ttft_s > late_p99(plenty) > 0
    assert all(s.ttft_p99_s >= s.ttft_p95_s for s in plenty.samples if np.isfinite(s.ttft_p95_s))


def test_it_reports_no_latency_without_traffic_or_to_a_policy_that_does_not_read_it():
    idle = run_fluid_mode(RateTrace("idle", np.array([0.0, 60.0, 120.0]), 60.0, np.array([5.0, 0.0, 0.0])), CONFIG,
                          LatencyReadingStatic(2))
    # The first minute has traffic; a minute after it stopped, nothing is known (NaN, never 0).
    assert np.isfinite(idle.samples[1].ttft_p95_s)
    quiet = [s for s in idle.samples if s.now >= 125]
    assert quiet and all(np.isnan(s.ttft_p95_s) for s in quiet)
    plain = run_fluid_mode(steady(60.0), CONFIG, StaticPolicy(12))
    assert all(np.isnan(s.ttft_p99_s) for s in plain.samples)


def test_a_ticks_latency_percentiles_are_the_bucketed_ones():
    """Few points (a tick's window) sum only the buckets they fill: the same 0.1 % buckets come back as
    from a cumulative sum over every bucket, ties decided by the same float additions."""
    from scaling.sim import result

    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(1, 500))
        values = rng.lognormal(-1, 1.2, n)
        if rng.random() < 0.2:  # a point far out: thousands of empty buckets between
            values[int(rng.integers(0, n))] = 1e30
        # Fluid mode weighs each step's points alike: equal weights, where a float's rounding decides ties.
        weights = np.repeat(rng.random(n // 8 + 1), 8)[:n] * (rng.random(n) > 0.2)
        weights[0] += 0.1
        sorted_answer = result.weighted_quantiles(values, (0.5, 0.95, 0.99), weights)
        bucketed = np.cumsum(np.bincount(np.floor(np.log(np.maximum(values, 1e-6) / 1e-6)
                                                  / np.log1p(result.QUANTILE_RESOLUTION)).astype(np.int64), weights))
        positions = np.searchsorted(bucketed, np.array((0.5, 0.95, 0.99)) * bucketed[-1])
        step = np.log1p(result.QUANTILE_RESOLUTION)
        assert sorted_answer == [float(1e-6 * np.exp((p + 0.5) * step)) for p in positions]


def test_every_pool_size_observes_the_same_arrival_rates_to_the_bit() -> None:
    """A tick's observed rate is the arrivals added one step at a time, whether or not the pool's state let
    fluid mode skip steps: the warm-pool report's sizes share forecasts made from these rates."""
    rng = np.random.default_rng(3)
    trace = RateTrace("steps", np.arange(0, 7200, 600.0), 600.0, np.round(rng.uniform(5, 60, 12), 3) + 0.1)
    observed = {replicas: [s.arrival_rate_rps for s in run_fluid_mode(trace, CONFIG, StaticPolicy(replicas)).samples]
                for replicas in (6, 9, 14, 30)}
    assert len(observed[6]) == 480
    assert all(rates == observed[6] for rates in observed.values())


@dataclass(frozen=True)
class ScriptedReading(ScriptedPolicy):
    """A scripted pool size that also reads the TTFT percentiles (their window is part of what a fork copies)."""

    observes_latency: bool = True


def _outcome(result) -> dict:  # noqa: ANN001
    fields = dict(vars(result))
    fields.pop("wall_s")
    return fields


def test_a_shadow_replays_as_it_would_alone_whether_it_forks_or_not() -> None:
    """A shadow deciding alike throughout has the run's result; one that first differs at a tick is forked
    there and resumed; one that differs at the start is replayed from it. Each is what it would replay alone,
    to the bit: samples, misses by minute, timeouts, retries and the cold starts drawn."""
    rng = np.random.default_rng(5)
    trace = RateTrace("bursts", np.arange(40) * 60.0, 60.0, rng.uniform(10, 90, 40))
    config = SimConfig(tick_s=15.0, client=ClientConfig(timeout_s=6.0, max_retries=2), queue_limit=400)
    run = ScriptedReading(((0, 3), (1200, 7)))
    shadows = [ScriptedReading(((0, 3), (1200, 7))), ScriptedReading(((0, 4),)),
               ScriptedReading(((0, 3), (600, 2), (1200, 7))), ScriptedReading(((0, 3), (1500, 9)))]
    result, forks = run_fluid_with_shadows(trace, config, run, shadows, misses_by_minute=True)
    assert forks[0] is None and forks[1] is not None and forks[1].state is None
    assert [fork.state["t"] for fork in forks[2:]] == [600, 1200]  # type: ignore[union-attr, index]
    assert result.timed_out > 0 and result.retries > 0  # the forks copy clients that gave up and retry
    for shadow, fork in zip(shadows, forks):
        alone = run_fluid_mode(trace, config, shadow, misses_by_minute=True)
        replayed = result if fork is None else resume_fluid_mode(trace, config, fork, misses_by_minute=True)
        assert _outcome(replayed) == _outcome(alone)
    assert _outcome(result) == _outcome(run_fluid_mode(trace, config, run, misses_by_minute=True))
