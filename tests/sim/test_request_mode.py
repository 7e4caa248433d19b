from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from scaling.sim.config import ClientConfig, ColdStart, SimConfig
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.request_mode import run_request_mode
from scaling.sim.workload import Trace

from .helpers import ScriptedPolicy, poisson_trace

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
