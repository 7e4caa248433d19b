from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from scaling.sim.config import ClientConfig, ColdStart, SimConfig
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.profiles import inter_token_seconds
from scaling.sim.request_mode import run_request_mode
from scaling.sim.workload import Trace

from .helpers import LatencyReadingStatic, ScriptedPolicy, poisson_trace

STEADY = SimConfig(tick_s=1.0)


def test_it_satisfies_littles_law_on_a_steady_run():
    trace = poisson_trace(rate_rps=20, duration_s=1200)
    result = run_request_mode(trace, STEADY, StaticPolicy(2))
    in_system = [s.running + s.queue_depth for s in result.samples if 100 <= s.now <= 1100]
    arrival_rate = len(trace) / trace.span_s
    assert np.mean(in_system) == pytest.approx(arrival_rate * result.e2e_mean_s, rel=0.05)
    assert result.served == len(trace)


def test_it_grows_queue_and_ttft_when_under_provisioned():
    trace = poisson_trace(rate_rps=40, duration_s=600, prompt=1000)  # ~2.7 replicas of prefill work
    short = run_request_mode(trace, STEADY, StaticPolicy(2))
    enough = run_request_mode(trace, STEADY, StaticPolicy(4))
    queue = [s.queue_depth for s in short.samples if s.now <= 600]
    assert np.mean(queue[-100:]) > 5 * max(1.0, np.mean(queue[:100]))
    assert short.ttft_ms.p95 > 10 * enough.ttft_ms.p95
    assert short.slo_attainment < enough.slo_attainment


def test_it_delays_capacity_by_the_cold_start():
    config = SimConfig(cold_start=ColdStart(60.0, 60.0), min_replicas=0, tick_s=15.0)
    trace = Trace("one", np.array([1.0]), np.array([150]), np.array([1]))
    result = run_request_mode(trace, config, ScriptedPolicy(((0.0, 0), (15.0, 1)), tick_s=15.0))
    # Requested at the 15 s tick, ready 60 s later; the request waited for it in the router.
    prefill_s = 150 / config.profile.prefill_tokens_per_s + config.profile.itl_ms_base / 1000
    assert result.ttft_ms.p50 / 1000 == pytest.approx(15.0 + 60.0 - 1.0 + prefill_s, abs=1e-3)
    assert result.cold_starts == 1


def test_it_raises_offered_load_with_retries():
    trace = poisson_trace(rate_rps=30, duration_s=300, prompt=1000)
    overloaded = dataclasses.replace(STEADY, client=ClientConfig(timeout_s=5.0))
    retrying = dataclasses.replace(STEADY, client=ClientConfig(timeout_s=5.0, max_retries=3))
    plain = run_request_mode(trace, overloaded, StaticPolicy(1))
    storm = run_request_mode(trace, retrying, StaticPolicy(1))
    assert plain.timed_out > 0 and plain.retries == 0
    assert storm.retries > plain.timed_out / 2
    sent = lambda result: sum(s.arrival_rate_rps for s in result.samples)  # noqa: E731
    assert sent(storm) > 1.3 * sent(plain)


def test_it_rejects_with_503_when_the_queue_is_full():
    trace = poisson_trace(rate_rps=40, duration_s=120, prompt=1000)
    result = run_request_mode(trace, dataclasses.replace(STEADY, queue_limit=20), StaticPolicy(1))
    assert result.rejected > 0
    assert max(s.queue_depth for s in result.samples) <= 20
    assert result.served + result.rejected + result.timed_out == result.requests


def test_it_routes_to_the_replica_with_fewest_outstanding():
    trace = poisson_trace(rate_rps=20, duration_s=300)
    result = run_request_mode(trace, STEADY, StaticPolicy(4))
    assert result.mean_ready_replicas == pytest.approx(4.0)
    assert result.slo_attainment == 1.0


def test_it_observes_ttft_percentiles_of_the_last_minute_like_a_histogram():
    # One request every 10 s for 2 minutes on one idle replica: every TTFT is one prefill and one
    # token. Then silence: after a minute without first tokens the percentiles are unknown (NaN).
    profile = STEADY.profile
    arrivals = np.append(np.arange(0.5, 120.0, 10.0), 300.0)  # the last one keeps the clock running
    trace = Trace("spaced", arrivals, np.full(len(arrivals), 1000), np.full(len(arrivals), 5))
    result = run_request_mode(trace, STEADY, LatencyReadingStatic(1))
    expected_ttft = 1000 / profile.prefill_tokens_per_s + inter_token_seconds(profile, 1)

    during = [s for s in result.samples if 30 <= s.now <= 120]
    assert during and all(s.ttft_p95_s == pytest.approx(expected_ttft) for s in during)
    assert all(s.ttft_p99_s == pytest.approx(expected_ttft) for s in during)
    after = [s for s in result.samples if 120.5 + 61 <= s.now < 300]
    assert len(after) > 100 and all(np.isnan(s.ttft_p95_s) and np.isnan(s.ttft_p99_s) for s in after)
    # A policy that does not read latency is not charged for tracking it.
    plain = run_request_mode(trace, STEADY, StaticPolicy(1))
    assert all(np.isnan(s.ttft_p95_s) for s in plain.samples)


def test_its_ttft_percentiles_rise_with_the_queue_when_under_provisioned():
    trace = poisson_trace(rate_rps=40, duration_s=600, prompt=1000)  # ~2.7 replicas of prefill work
    short = run_request_mode(trace, STEADY, LatencyReadingStatic(2))
    enough = run_request_mode(trace, STEADY, LatencyReadingStatic(4))

    def late_p99(result):
        return np.median([s.ttft_p99_s for s in result.samples if 300 <= s.now <= 600])

    assert late_p99(short) > STEADY.slo_ttft_s > late_p99(enough)
    assert all(s.ttft_p99_s >= s.ttft_p95_s for s in short.samples if not np.isnan(s.ttft_p95_s))
