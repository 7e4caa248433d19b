"""vLLM's `--scheduling-policy priority` in the emulator: the engine, the request field, the Deployment's
argument and the gateway's priority for the priority class."""
from __future__ import annotations


import pytest
import requests

from scaling.sim.profiles import PoolProfile
from sandbox.clock import ManualClock
from sandbox.engine import Engine
from sandbox.fleet import Fleet
from sandbox.gateway import CLASS_HEADER, Gateway
from sandbox.kube import resources as res
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from sandbox.vllm_metrics import VllmMetrics

from tests.sandbox.conftest import MODEL


@pytest.mark.parametrize(("policy", "urgent_starts"), [("fcfs", "last"), ("priority", "first")])
def test_the_engine_admits_a_lower_priority_value_first_only_under_priority_scheduling(
        small_profile: PoolProfile, policy: str, urgent_starts: str) -> None:
    clock = ManualClock()
    engine = Engine(small_profile, VllmMetrics(MODEL, 32768, small_profile.kv_cache_tokens), clock, policy)
    running = [engine.submit(10, 15) for _ in range(2)]  # the two batch slots
    engine.advance_to(0.001)
    assert all(r.admitted == 0.0 for r in running)
    clock.advance(0.001)
    waiting = [engine.submit(10, 15) for _ in range(3)]
    urgent = engine.submit(10, 15, priority=-1 if policy == "priority" else 0)
    engine.advance_to(10.0)
    starts = sorted(r.admitted for r in [*waiting, urgent])
    assert urgent.admitted == (starts[0] if urgent_starts == "first" else starts[-1])
    assert urgent.admitted > 0.0 and all(r.finished is not None for r in [*running, *waiting, urgent])
    # Each class in arrival order.
    assert [r.admitted for r in waiting] == sorted(r.admitted for r in waiting)


def test_an_unknown_scheduling_policy_is_refused(small_profile: PoolProfile) -> None:
    with pytest.raises(ValueError, match="--scheduling-policy must be one of fcfs, priority"):
        Engine(small_profile, VllmMetrics(MODEL, 32768, small_profile.kv_cache_tokens), ManualClock(), "lifo")


@pytest.mark.parametrize(("priority", "message"), [
    (5, "Got priority 5 but Priority scheduling is not enabled."),
    ("high", "priority must be an integer"),
    (True, "priority must be an integer"),
])
def test_a_request_priority_vllm_would_refuse_is_a_400_naming_it(fleet: Fleet, small_profile: PoolProfile,
                                                                  priority: object, message: str) -> None:
    replica = fleet.add_replica(MODEL, profile=small_profile)  # first come, first served
    assert replica.wait_ready(timeout=5)
    response = requests.post(replica.base_url + "/v1/completions", timeout=5,
                             json={"model": MODEL, "prompt": "x", "max_tokens": 1, "priority": priority})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == message and error["param"] == "priority"
    ok = requests.post(replica.base_url + "/v1/completions", timeout=5,
                       json={"model": MODEL, "prompt": "x", "max_tokens": 1, "priority": 0})
    assert ok.status_code == 200


def test_a_pool_deployed_with_priority_scheduling_gets_the_priority_class_first_from_the_gateway(
        fleet: Fleet, small_profile: PoolProfile, monkeypatch: pytest.MonkeyPatch) -> None:
    with SandboxCluster(fleet) as cluster:
        cluster.add_pool(PoolSpec(name="big", profile=small_profile, model="big-model", cold_start_s=0,
                                  weight=100, scheduling_policy="priority"))
        (replica,) = cluster.replicas("sandbox", "big")
        assert replica.wait_ready(timeout=5)
        args = cluster.store.find(res.DEPLOYMENTS, "sandbox", "big")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[-2:] == ["--scheduling-policy", "priority"]
        assert replica.scheduling_policy == replica.engine.scheduling_policy == "priority"
        sent: list[int] = []
        submit = replica.engine.submit
        monkeypatch.setattr(replica.engine, "submit",
                            lambda prompt, tokens, priority=0: sent.append(priority) or submit(prompt, tokens, priority))
        gateway = Gateway(cluster).start()
        try:
            for request_class in ("priority", "standard", None):
                headers = {CLASS_HEADER: request_class} if request_class else {}
                response = requests.post(gateway.url + "/v1/completions", timeout=5, headers=headers,
                                         json={"model": "big-model", "prompt": "x", "max_tokens": 1})
                assert response.status_code == 200
            # A request that states its own priority keeps it.
            response = requests.post(gateway.url + "/v1/completions", timeout=5, headers={CLASS_HEADER: "priority"},
                                     json={"model": "big-model", "prompt": "x", "max_tokens": 1, "priority": 3})
            assert response.status_code == 200
        finally:
            gateway.stop()
    assert sent == [-1, 0, 0, 3]


def test_a_deployment_without_the_argument_runs_first_come_first_served(cluster: SandboxCluster) -> None:
    (replica,) = cluster.replicas("sandbox", "big")
    assert replica.scheduling_policy == "fcfs"
    args = cluster.store.find(res.DEPLOYMENTS, "sandbox", "big")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--scheduling-policy" not in args


def test_the_gateway_leaves_the_priority_out_on_a_first_come_first_served_pool(cluster: SandboxCluster) -> None:
    gateway = Gateway(cluster).start()
    try:
        response = requests.post(gateway.url + "/v1/completions", timeout=5, headers={CLASS_HEADER: "priority"},
                                 json={"model": "big-model", "prompt": "x", "max_tokens": 1})
    finally:
        gateway.stop()
    assert response.status_code == 200  # vLLM would refuse a priority on it


