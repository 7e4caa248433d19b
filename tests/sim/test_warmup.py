"""The warm-up: every policy sees it (as history, with the pool it asks for); nothing in it is scored."""
from __future__ import annotations

import dataclasses

import pytest

from scaling.engine import planner
from scaling.sim.config import SimConfig
from scaling.sim.fluid_mode import run_fluid_mode
from scaling.sim.policies.headroom import HeadroomPolicy
from scaling.sim.replay import main
from scaling.sim.request_mode import run_request_mode
from tests.sim.helpers import ScriptedPolicy, poisson_trace

WARMUP_S = 600.0


def _overloaded_then_enough() -> ScriptedPolicy:
    """One replica for the warm-up (far too few for 40 req/s), then enough: misses only in the warm-up."""
    return ScriptedPolicy(((0.0, 1), (120.0, 12)), tick_s=15.0)


@pytest.mark.parametrize("run", [run_request_mode, run_fluid_mode])
def test_nothing_in_the_warm_up_is_scored(run):
    trace = poisson_trace(40.0, 1800.0, prompt=1000)
    warm = run(trace, SimConfig(warmup_s=WARMUP_S), _overloaded_then_enough())
    cold = run(trace, SimConfig(), _overloaded_then_enough())
    after = int((trace.arrival_s >= WARMUP_S).sum())
    assert warm.requests == pytest.approx(after, abs=2) and cold.requests == len(trace)
    assert cold.slo_attainment < 0.95 < 0.99 <= warm.slo_attainment
    # GPU-hours and cold starts from the end of the warm-up: 12 replicas for 20 minutes.
    assert warm.gpu_hours == pytest.approx(12 * 1200 / 3600, rel=0.02) and warm.gpu_hours < cold.gpu_hours
    assert warm.cold_starts == 0 < cold.cold_starts and warm.max_replicas == 12


def test_misses_are_counted_only_after_the_warm_up():
    trace = poisson_trace(40.0, 1800.0, prompt=1000)
    cold = run_request_mode(trace, SimConfig(), _overloaded_then_enough())
    warm = run_request_mode(trace, SimConfig(warmup_s=WARMUP_S), _overloaded_then_enough())
    assert min(cold.misses_by_minute) < WARMUP_S // 60
    assert all(minute >= WARMUP_S // 60 for minute in warm.misses_by_minute or {})


def test_the_warm_up_is_the_headroom_policys_history():
    trace = poisson_trace(20.0, 1200.0)
    policy = HeadroomPolicy(planner.PoolPlan(capacity_rps_per_replica=5.0))
    states = []

    def kept():
        state = HeadroomPolicy.new_state(policy)
        states.append(state)
        return state

    object.__setattr__(policy, "new_state", kept)
    result = run_request_mode(trace, SimConfig(warmup_s=WARMUP_S), policy)
    history = states[0].history
    assert min(history.times) < WARMUP_S and len([t for t in history.times if t < WARMUP_S]) >= 39
    # It met the scored part from a pool sized during the warm-up, not from one replica.
    assert result.samples[int(WARMUP_S // 15)].ready_replicas >= 2


def test_the_cli_warms_up_ten_minutes_by_default_and_names_the_clairvoyant(traces_dir, capsys):
    trace = str(traces_dir / "AzureLLMInferenceTrace_conv.csv")
    assert main(["--trace", trace, "--policy", "static", "--replicas", "2", "--json"]) == 0
    default = capsys.readouterr().out
    assert main(["--trace", trace, "--policy", "static", "--replicas", "2", "--json", "--warmup-s", "0"]) == 0
    whole = capsys.readouterr().out
    assert '"requests": 16499' in default and '"requests": 19366' in whole
    assert main(["--trace", trace, "--policy", "static", "--warmup-s", "99999"]) == 2
    assert "--warmup-s" in capsys.readouterr().err


def test_the_oracle_is_an_alias_of_the_clairvoyant():
    from scaling.sim.policies import ALIASES, POLICIES

    assert ALIASES["oracle"] == "clairvoyant" in POLICIES and "oracle" not in POLICIES
    assert dataclasses.fields(SimConfig)[-1].name == "warmup_s" and SimConfig().warmup_s == 0.0
