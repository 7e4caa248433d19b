"""Route mode: a primary and a fallback pool behind one route, split by the engine's fallback step."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from scaling.engine.fallback import FallbackPolicy
from scaling.engine.planner import PoolPlan
from scaling.sim.config import SimConfig
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.profiles import get_profile
from scaling.sim.replay import main
from scaling.sim.request_mode import run_request_mode
from scaling.sim.route_mode import FallbackRoute, run_route_mode
from scaling.sim.workload import Trace
from tests.sim.helpers import ScriptedPolicy, poisson_trace

PRIMARY = get_profile("llama-3.1-8b-h100")
FALLBACK = get_profile("llama-3.2-1b-l4")
CONFIG = SimConfig.for_profile(PRIMARY, max_replicas=10)
PLAN = PoolPlan(capacity_rps_per_replica=20.0, max_replicas=10, slo_latency_s=1.0, slo_signal="ttft_p99_s",
                cold_start_p95_s=90.0)


def route(replicas: int = 4, priority_share: float = 0.0, spillover: float | None = None, scheduling: str = "fcfs",
          **policy) -> FallbackRoute:
    return FallbackRoute(FALLBACK, replicas, priority_share, FallbackPolicy(**policy), PLAN, 20.0, spillover, scheduling)


def surge_trace() -> Trace:
    """10 req/s, 60 req/s from 300 s to 600 s, 10 req/s again until 1,500 s."""
    parts = [poisson_trace(10.0, 300.0, seed=1), poisson_trace(60.0, 300.0, seed=2), poisson_trace(10.0, 900.0, seed=3)]
    offsets = (0.0, 300.0, 600.0)
    arrivals = np.concatenate([p.arrival_s + o for p, o in zip(parts, offsets)])
    count = len(arrivals)
    return Trace("surge", arrivals, np.full(count, 500), np.full(count, 100))


def bursty_trace() -> Trace:
    """10 req/s for 1,500 s, and from 300 s to 600 s a burst of 150 requests within half a second every 15 s."""
    base = poisson_trace(10.0, 1500.0, seed=4).arrival_s
    rng = np.random.default_rng(5)
    bursts = np.concatenate([start + rng.uniform(0.0, 0.5, 150) for start in np.arange(300.0, 600.0, 15.0)])
    arrivals = np.sort(np.concatenate([base, bursts]))
    count = len(arrivals)
    return Trace("bursty", arrivals, np.full(count, 500), np.full(count, 100))


def test_with_no_overload_it_serves_exactly_as_request_mode():
    trace = poisson_trace(10.0, 600.0)
    alone = run_request_mode(trace, CONFIG, StaticPolicy(2))
    routed = run_route_mode(trace, CONFIG, StaticPolicy(2), route())
    assert routed.fallback_share == 0.0 and routed.fallback_events == []
    assert routed.slo_attainment == alone.slo_attainment
    assert routed.ttft_ms == alone.ttft_ms and routed.e2e_ms == alone.e2e_ms
    assert routed.pools["primary"]["cost_usd"] == alone.cost_usd
    assert routed.cost_usd == pytest.approx(alone.cost_usd + routed.pools["fallback"]["cost_usd"], abs=0.011)


def test_an_overloaded_primary_at_its_maximum_moves_overflow_and_gets_it_back():
    trace = surge_trace()
    capped = replace(CONFIG, max_replicas=2)
    alone = run_request_mode(trace, capped, StaticPolicy(2))
    routed = run_route_mode(trace, capped, StaticPolicy(2), route(replicas=4))
    assert alone.slo_attainment < 0.8
    assert routed.slo_attainment > alone.slo_attainment + 0.15
    assert 0.1 < routed.fallback_share < 0.6
    events = [(at, event) for at, event, _ in routed.fallback_events]
    assert events[0][1] == "entered" and 300.0 <= events[0][0] <= 345.0  # within a few ticks of the surge
    assert events[-1][1] == "restored"
    # Back on the primary within the hysteresis of the surge's end (and a tick for the primary's queue).
    assert 600.0 < events[-1][0] <= 600.0 + FallbackPolicy().return_time_s + 15.0
    assert set(routed.slo_attainment_by_model) == {PRIMARY.model, FALLBACK.model}
    assert routed.cost_usd == pytest.approx(routed.pools["primary"]["cost_usd"] + routed.pools["fallback"]["cost_usd"],
                                            abs=0.011)


def test_spillover_moves_requests_the_primary_would_start_late_only_while_active():
    quiet = poisson_trace(10.0, 600.0)
    alone = run_request_mode(quiet, CONFIG, StaticPolicy(2))
    routed = run_route_mode(quiet, CONFIG, StaticPolicy(2), route(spillover=0.2))
    assert routed.fallback_share == 0.0 and routed.ttft_ms == alone.ttft_ms  # inactive: the share alone decides
    trace = bursty_trace()
    capped = replace(CONFIG, max_replicas=2)
    by_share = run_route_mode(trace, capped, StaticPolicy(2), route(replicas=4))
    spilled = run_route_mode(trace, capped, StaticPolicy(2), route(replicas=4, spillover=0.2))
    assert spilled.fallback_share > by_share.fallback_share
    assert spilled.slo_attainment_by_model[PRIMARY.model] > by_share.slo_attainment_by_model[PRIMARY.model]
    assert spilled.slo_attainment > by_share.slo_attainment
    everyone_priority = run_route_mode(trace, capped, StaticPolicy(2), route(priority_share=1.0, spillover=0.2))
    assert everyone_priority.fallback_share == 0.0  # spill-over never moves the priority class


def test_the_priority_class_never_falls_back():
    trace = surge_trace()
    capped = replace(CONFIG, max_replicas=2)
    everyone_priority = run_route_mode(trace, capped, StaticPolicy(2), route(priority_share=1.0))
    assert everyone_priority.fallback_share == 0.0
    assert set(everyone_priority.slo_attainment_by_model) == {PRIMARY.model}
    some = run_route_mode(trace, capped, StaticPolicy(2), route(priority_share=0.3))
    assert 0.0 < some.fallback_share <= 0.7
    assert set(some.slo_attainment_by_class) == {"priority", "standard"}


def two_bursts_trace() -> Trace:
    """2 req/s for 120 s, and at 30 s and at the very end a burst of 300 requests within half a second:
    about 10 s of prefill each for one replica of the primary."""
    base = poisson_trace(2.0, 120.0, seed=6).arrival_s
    bursts = [start + np.random.default_rng(7).uniform(0.0, 0.5, 300) for start in (30.0, 119.5)]
    arrivals = np.sort(np.concatenate([base, *bursts]))
    return Trace("two bursts", arrivals, np.full(len(arrivals), 500), np.full(len(arrivals), 100))


def test_priority_scheduling_starts_the_priority_class_first():
    """vLLM's `--scheduling-policy priority`: the burst's priority requests wait only for the prefill in
    progress and for each other, not for the standard requests queued before them."""
    trace, one = two_bursts_trace(), replace(CONFIG, max_replicas=1)
    fcfs = run_route_mode(trace, one, StaticPolicy(1), route(priority_share=0.05))
    first = run_route_mode(trace, one, StaticPolicy(1), route(priority_share=0.05, scheduling="priority"))
    assert fcfs.slo_attainment_by_class["priority"] < 0.6
    assert first.slo_attainment_by_class["priority"] == 1.0
    # The standard class pays for it: the same work, in another order.
    assert first.slo_attainment_by_class["standard"] <= fcfs.slo_attainment_by_class["standard"]
    assert first.served == fcfs.served == fcfs.requests  # the last burst's too, after the trace's end
    assert first.pools["primary"]["gpu_hours"] == fcfs.pools["primary"]["gpu_hours"]


def test_priority_scheduling_without_priority_requests_is_first_come_first_served():
    """With no request of the priority class the two policies are the same schedule, to the bit, also when
    replicas stop taking requests while theirs still wait (a stopping replica is billed until its last
    waiting request ends) and when spill-over reads the primary's wait."""
    trace = bursty_trace()
    shrinking = ScriptedPolicy(((0.0, 3), (301.0, 1), (451.0, 3)))  # 301 s: in the first burst's queue
    for spillover in (None, 0.2):
        runs = [run_route_mode(trace, CONFIG, shrinking, route(spillover=spillover, scheduling=scheduling)).as_json()
                for scheduling in ("fcfs", "priority")]
        for run in runs:
            run.pop("wall_s")
        assert runs[0]["fallback_share"] > 0.0 and runs[0]["cold_starts"] > 0
        assert spillover or runs[0]["slo_attainment"] < 0.95  # requests waited: the order mattered
        assert runs[1] == runs[0]


def test_bad_route_parameters_are_refused():
    with pytest.raises(ValueError, match="--fallback-replicas"):
        FallbackRoute(FALLBACK, 0)
    with pytest.raises(ValueError, match="--priority-share"):
        FallbackRoute(FALLBACK, 2, 1.5)
    with pytest.raises(ValueError, match="--fallback-spillover"):
        FallbackRoute(FALLBACK, 2, 0.0, spillover_wait_share=0.0)
    with pytest.raises(ValueError, match="--scheduling-policy must be one of fcfs, priority"):
        FallbackRoute(FALLBACK, 2, 0.0, scheduling_policy="lifo")


# ---------------------------------------------------------------------------- the CLI

ROUTE_FIELDS = {"fallback_share", "slo_attainment_by_class", "slo_attainment_by_model", "pools", "fallback_events"}


def _args(traces_dir: Path, args: list[str]) -> list[str]:
    return [a.replace("{code}", str(traces_dir / "AzureLLMInferenceTrace_code.csv"))
            .replace("{conv}", str(traces_dir / "AzureLLMInferenceTrace_conv.csv")) for a in args]


@pytest.mark.parametrize("args", [["--trace", "{code}", "--policy", "keda-queue"],
                                  ["--trace", "{conv}", "--policy", "static", "--replicas", "3", "--mode", "fluid"]],
                         ids=["keda-queue request mode", "static fluid mode"])
def test_without_fallback_the_replay_is_the_single_pool_run(traces_dir, capsys, args):
    """Without `--fallback` the replay runs one pool exactly as before route mode existed (checked byte for
    byte against 7fe0b89's output when route mode landed): no route fields, and the same run twice."""
    assert main(_args(traces_dir, args) + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not ROUTE_FIELDS & set(report)
    assert main(_args(traces_dir, args) + ["--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    report.pop("wall_s", None), again.pop("wall_s", None)
    assert again == report  # deterministic: the same seed gives the same run


def test_the_replay_json_adds_the_fallback_fields(traces_dir, capsys):
    args = _args(traces_dir, ["--trace", "{code}", "--policy", "keda-queue", "--fallback", "llama-3.2-1b-l4",
                              "--fallback-replicas", "3", "--priority-share", "0.2", "--json"])
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert 0.0 < report["fallback_share"] < 0.8
    assert set(report["slo_attainment_by_class"]) == {"priority", "standard"}
    assert set(report["slo_attainment_by_model"]) == {PRIMARY.model, FALLBACK.model}
    pools = report["pools"]
    assert pools["fallback"]["profile"] == "llama-3.2-1b-l4" and pools["fallback"]["max_replicas"] == 3
    assert report["cost_usd"] == pytest.approx(pools["primary"]["cost_usd"] + pools["fallback"]["cost_usd"], abs=0.011)
    assert report["fallback_events"][0][1] == "entered"


@pytest.mark.parametrize(("args", "message"), [
    (["--fallback-replicas", "2"], "--fallback-replicas needs --fallback PROFILE"),
    (["--priority-share", "0.1"], "--priority-share needs --fallback PROFILE"),
    (["--fallback", "llama-3.2-1b-l4", "--mode", "fluid"], "--fallback needs --mode request"),
    (["--fallback", "llama-3.2-1b-l4", "--fallback-replicas", "0"], "--fallback-replicas must be at least 1"),
    (["--fallback", "llama-3.2-1b-l4", "--priority-share", "1.5"], "--priority-share must be between 0 and 1"),
    (["--fallback", "llama-3.2-1b-l4", "--timeout-s", "30"], "does not model client timeouts"),
    (["--fallback", "gpt-9"], "invalid choice: 'gpt-9'"),
    (["--fallback-spillover", "0.2"], "--fallback-spillover needs --fallback PROFILE"),
    (["--fallback", "llama-3.2-1b-l4", "--fallback-spillover", "0"], "--fallback-spillover must be positive"),
    (["--scheduling-policy", "priority"], "--scheduling-policy needs --fallback PROFILE"),
    (["--fallback", "llama-3.2-1b-l4", "--scheduling-policy", "lifo"], "invalid choice: 'lifo'"),
])
def test_bad_fallback_flags_are_an_error_naming_the_flag(traces_dir, capsys, args, message):
    assert main(_args(traces_dir, ["--trace", "{conv}", "--policy", "static", *args])) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
