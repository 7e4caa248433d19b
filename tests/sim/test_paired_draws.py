"""bench/paired_draws.py: paired differences over the replay's draws, the pool held at a surge, bad input."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from bench.headroom_suite import add_guardrail_argument
from bench.paired_draws import HeldAtSurge, paired_difference, ready_at
from bench.unseen_traffic import trace_cases
from controlplane.config import ApprovalPolicy
from scaling.sim.config import ColdStart, SimConfig
from scaling.sim.profiles import DEFAULT_PROFILE, get_profile
from scaling.sim.request_mode import run_request_mode
from tests.sim.helpers import ScriptedPolicy, assert_refused, poisson_trace


def test_a_baseline_ahead_on_every_draw_is_below_and_one_ahead_by_chance_is_level():
    ours = [0.93, 0.94, 0.935, 0.932, 0.938]
    behind = paired_difference(ours, [a + 0.01 for a in ours], objective=0.99)
    assert behind["mean"] == pytest.approx(-0.01) and behind["high"] < 0 and behind["at_least_share"] == 0
    assert behind["verdict"] == "below"
    # The same spread of draws, the baseline ahead on some and behind on others: no verdict either way.
    mixed = paired_difference(ours, [0.94, 0.93, 0.945, 0.922, 0.938], objective=0.99)
    assert mixed["low"] < 0 < mixed["high"] and mixed["verdict"] == "level"
    assert paired_difference([0.95, 0.96], [0.90, 0.91], objective=0.99)["verdict"] == "above"
    # A difference too small to show at four places is still read: every draw behind by 0.00001.
    tiny = paired_difference([0.98999] * 10, [0.99] * 10, objective=0.99)
    assert tiny["high"] == 0.0 and tiny["verdict"] == "below"


def test_nothing_past_the_objective_counts():
    # 0.9995 against 0.991: both meet 0.99, so neither is ahead (the suite's "below" reads the same).
    level = paired_difference([0.991, 0.992], [0.9995, 0.9999], objective=0.99)
    assert level == {"mean": 0.0, "low": 0.0, "high": 0.0, "at_least_share": 1.0, "verdict": "level"}
    # A mean that meets the objective is not below, though half the draws fell a little short of it.
    met = paired_difference([0.985] * 5 + [0.9999] * 5, [0.999] * 10, objective=0.99)
    assert met["high"] < 0 and met["verdict"] == "level"


def test_unpaired_draws_are_refused():
    with pytest.raises(ValueError, match="same draws"):
        paired_difference([0.9, 0.9], [0.9], objective=0.99)


def test_the_pool_a_surge_found_is_held_only_around_it():
    inner = ScriptedPolicy(((0.0, 2), (100.0, 1)))
    held = HeldAtSurge(inner, replicas=5, start_s=50.0, end_s=80.0)
    assert [held.decide(t, None, None) for t in (0.0, 49.0, 50.0, 79.0, 80.0, 120.0)] == [2, 2, 5, 5, 2, 1]
    assert held.tick_s == inner.tick_s and not held.observes_latency
    assert held.name == "scripted (held at 5)"


def test_a_draw_changes_the_cold_starts_and_the_same_draw_replays_the_same():
    trace = poisson_trace(rate_rps=6.0, duration_s=600.0)
    config = SimConfig.for_profile(get_profile(DEFAULT_PROFILE), min_replicas=1, max_replicas=8,
                                   cold_start=ColdStart(60.0, 90.0))
    policy = ScriptedPolicy(((0.0, 1), (120.0, 6)), tick_s=15.0)  # five replicas started at 120 s
    first, again = (run_request_mode(trace, dataclasses.replace(config, seed=3), policy) for _ in range(2))
    assert first.samples == again.samples and first.slo_attainment == again.slo_attainment

    def ready_by_tick(result) -> list[int]:
        return [ready_at(result, t) for t in range(180, 240, 15)]

    draws = {tuple(ready_by_tick(run_request_mode(trace, dataclasses.replace(config, seed=s), policy))) for s in range(6)}
    assert len(draws) > 1  # the five replicas come up at different times in different draws
    with pytest.raises(ValueError, match="no tick"):
        ready_at(first, -1.0)


def test_bad_input_gets_a_message_before_any_replay():
    assert_refused("bench/paired_draws.py", ((["--draws", "1"], "at least 2"), (["--cases", "nope"], "unknown case 'nope'"),
                                             (["--pool-at-surge", "static"], "--pool-at-surge"),
                                             (["--pool", "nope=1"], "--pool 'nope=1'")))


def test_the_replays_approve_as_a_pools_default_policy_and_off_is_the_step_alone():
    parser = argparse.ArgumentParser()
    add_guardrail_argument(parser)
    assert parser.parse_args([]).reactive_max_percent == ApprovalPolicy().reactive_max_percent == 100
    assert parser.parse_args(["--reactive-max-percent", "off"]).reactive_max_percent is None
    assert parser.parse_args(["--reactive-max-percent", "50"]).reactive_max_percent == 50


def test_a_trace_of_unseen_traffic_gives_its_own_cases_with_their_surges_ramps():
    trace = poisson_trace(rate_rps=2.0, duration_s=1800.0)
    cases = trace_cases(trace, "t", scales=[4.0], surges=[(10.0, 5.0)], seed=0)
    assert [(name, ramp) for name, _, ramp in cases] == [("t", None), ("t x4", None), ("t surge 10:5", 300.0)]
    assert cases[0][1] is trace and len(cases[1][1].arrival_s) > 3 * len(trace.arrival_s)
    assert_refused("bench/paired_draws.py", ((["--trace", "/nonexistent/trace.jsonl"], "no such file"),
                                             (["--trace", "x", "--surge", "10"], "FACTOR:MINUTES"),
                                             (["--surge", "10:5"], "reshape a --trace"),
                                             (["--trace", "x", "--cases", "code"], "the cases are the trace's")))
