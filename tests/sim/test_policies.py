from __future__ import annotations

import pytest

from scaling.sim.config import SimConfig
from scaling.sim.loaders import load_trace
from scaling.sim.policies import POLICIES, PolicyContext, build_policy
from scaling.sim.policies.base import Observation
from scaling.sim.policies.hpa import HpaBehavior, HpaState, stabilise
from scaling.sim.policies.hpa_util import HpaUtilPolicy
from scaling.sim.policies.keda_queue import KedaQueuePolicy
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.runner import simulate


def observe(ready=2, starting=0, desired=None, queue=0.0, utilisation=0.5, now=0.0) -> Observation:
    return Observation(now, ready, starting, ready + starting if desired is None else desired, queue, 0.0, utilisation, 0.0)


@pytest.mark.parametrize(
    ("case", "policy", "observation", "expected"),
    [
        ("static holds its size", StaticPolicy(3), observe(ready=7), 3),
        ("util at target holds", HpaUtilPolicy(1, 20), observe(ready=4, utilisation=0.8), 4),
        ("util within tolerance holds", HpaUtilPolicy(1, 20), observe(ready=4, utilisation=0.87), 4),
        ("util saturated grows by 25 %", HpaUtilPolicy(1, 20), observe(ready=4, utilisation=1.0), 5),
        ("starting pods count at 0 % when scaling up", HpaUtilPolicy(1, 20), observe(ready=4, starting=1, utilisation=1.0), 5),
        ("util respects max replicas", HpaUtilPolicy(1, 3), observe(ready=3, utilisation=1.0), 3),
        ("queue 5 per replica", KedaQueuePolicy(1, 100), observe(ready=4, queue=40.0), 8),
        ("queue growth capped at max(+100 %, +4)", KedaQueuePolicy(1, 100), observe(ready=2, queue=500.0), 6),
        ("queue within tolerance holds", KedaQueuePolicy(1, 100), observe(ready=4, queue=21.0), 4),
        ("empty queue, no history: down to min", KedaQueuePolicy(1, 100), observe(ready=4, queue=0.0), 1),
        ("at zero, a waiting request activates one replica", KedaQueuePolicy(0, 100), observe(ready=0, queue=3.0), 1),
        ("at zero with nothing waiting it stays at zero", KedaQueuePolicy(0, 100), observe(ready=0, queue=0.0), 0),
    ],
)
def test_it_decides_like_the_baselines_it_models(case, policy, observation, expected):
    assert policy.decide(observation.now, observation, policy.new_state()) == expected, case


@pytest.mark.parametrize(
    ("case", "history", "now", "current", "recommended", "expected"),
    [
        ("scale-down waits for the window's highest recommendation", [(0.0, 8)], 200.0, 8, 2, 8),
        ("scale-down after the window passes", [(0.0, 8)], 301.0, 8, 2, 2),
        ("scale-up is immediate", [(0.0, 2)], 15.0, 2, 5, 5),
        ("scale-up doubles at most", [], 0.0, 10, 50, 20),
        ("scale-up by 4 pods from small pools", [], 0.0, 1, 50, 5),
        ("min replicas is a floor", [], 0.0, 3, 0, 1),
    ],
)
def test_it_applies_hpa_default_behaviour(case, history, now, current, recommended, expected):
    state = HpaState()
    state.recommendations.extend(history)
    assert stabilise(now, current, recommended, state, HpaBehavior(), 1, 100) == expected, case


def test_it_polls_the_queue_every_30_s():
    policy, state = KedaQueuePolicy(1, 100), None
    state = policy.new_state()
    assert policy.decide(0.0, observe(ready=1, queue=10.0), state) == 2
    # 15 s later the queue is larger, but KEDA still serves the value it polled at 0 s.
    assert policy.decide(15.0, observe(ready=2, queue=100.0, now=15.0), state) == 2
    assert policy.decide(30.0, observe(ready=2, queue=100.0, now=30.0), state) == 6


def test_it_names_known_policies_when_one_is_unknown():
    with pytest.raises(KeyError, match="keda-queue"):
        build_policy("no-such-policy", PolicyContext(None, SimConfig(), lambda policy: None))  # type: ignore[arg-type]
    assert {"static", "hpa-util", "keda-queue", "clairvoyant"} <= set(POLICIES)


def test_it_registers_new_policies_through_the_same_interface(monkeypatch):
    monkeypatch.setitem(POLICIES, "always-two", lambda context: StaticPolicy(2))
    policy = build_policy("always-two", PolicyContext(None, SimConfig(), lambda policy: None))  # type: ignore[arg-type]
    assert policy.decide(0.0, observe(), policy.new_state()) == 2


@pytest.mark.parametrize("trace_name", ["AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv"])
def test_it_makes_the_oracle_cheaper_than_static_at_peak_and_meet_the_slo(traces_dir, trace_name):
    workload = load_trace(traces_dir / trace_name)
    config = SimConfig()
    static = simulate(workload, config, "static")
    oracle = simulate(workload, config, "oracle")
    assert static.slo_attainment >= config.slo_objective
    assert oracle.slo_attainment >= config.slo_objective
    assert oracle.cost_usd <= static.cost_usd


@pytest.mark.parametrize("policy", ["keda-queue", "headroom"])
def test_it_scales_a_pool_up_from_zero_replicas(traces_dir, policy):
    # min replicas 0: the pool starts at zero; the queue and the arriving requests must bring it up.
    workload = load_trace(traces_dir / "AzureLLMInferenceTrace_conv.csv")
    result = simulate(workload, SimConfig(min_replicas=0), policy)
    assert result.served == result.requests and result.slo_attainment > 0.75
    assert result.cold_starts >= 1
