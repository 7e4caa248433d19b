"""The sandbox gateway's per-request spill-over to the fallback pool (scaling.engine.spillover's rule)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from kubernetes import client

from sandbox.gateway import FallbackRouting, Gateway
from sandbox.kube.cluster import SandboxCluster
from sandbox.replica import EmulatedReplica

NS = "sandbox"
ROUTE = ("gateway.networking.k8s.io", "v1", NS, "httproutes", "sandbox-route")


@pytest.fixture
def gateway(cluster: SandboxCluster) -> Iterator[Gateway]:
    running = Gateway(cluster, fallback=FallbackRouting(NS, "small", spill_after_s=0.2)).start()
    yield running
    running.stop()


def _set_weights(cluster: SandboxCluster, big: int, small: int) -> None:
    """As Headroom's fallback writes them: the fallback is active while its weight is above 0."""
    custom = client.CustomObjectsApi(client.ApiClient(client.Configuration(host=cluster.url)))
    route = custom.get_namespaced_custom_object(*ROUTE)
    refs = route["spec"]["rules"][0]["backendRefs"]
    refs[0]["weight"], refs[1]["weight"] = big, small
    custom.patch_namespaced_custom_object(*ROUTE, {"spec": route["spec"]})


def _primary(cluster: SandboxCluster) -> EmulatedReplica:
    (replica,) = cluster.replicas(NS, "big")
    return replica


def _queue_on(replica: EmulatedReplica) -> None:
    """Two long requests in the two batch slots and four waiting: a new one would start seconds late."""
    for _ in range(6):
        replica.engine.submit(prompt_tokens=10, max_tokens=2000)
    running, waiting = replica.engine.load()
    assert running + waiting == 6


def _pools(gateway: Gateway, count: int, request_class: str = "standard") -> list[str]:
    picks = [gateway.route(request_class) for _ in range(count)]
    assert all(replica is not None for _, replica in picks)
    return [pool.name for pool, _ in picks]


def test_the_fallback_takes_eligible_requests_a_queued_primary_would_start_late(
        gateway: Gateway, cluster: SandboxCluster) -> None:
    _set_weights(cluster, 99, 1)  # active: the weights alone leave about 99 % on the primary
    _queue_on(_primary(cluster))
    assert Gateway.start_wait_s(cluster.pools[(NS, "big")], _primary(cluster)) > 1.0
    assert _pools(gateway, 20) == ["small"] * 20
    assert gateway.spilled >= 15  # the weights alone send about 1 in 100 there (2 of 20 seen)
    # Over HTTP: the answer says which pool served it, and its model is the fallback's.
    response = requests.post(gateway.url + "/v1/completions", timeout=10,
                             json={"model": "any", "prompt": "hi", "max_tokens": 1})
    assert response.status_code == 200
    assert response.headers["x-sandbox-pool"] == "small"
    assert response.json()["model"] == "small-model"


def test_the_priority_class_stays_on_the_primary_even_by_weight(gateway: Gateway, cluster: SandboxCluster) -> None:
    _set_weights(cluster, 1, 99)
    _queue_on(_primary(cluster))
    assert _pools(gateway, 20, "priority") == ["big"] * 20
    assert gateway.spilled == 0
    _set_weights(cluster, 0, 100)  # all of the eligible traffic on the fallback: priority keeps its primary
    assert _pools(gateway, 5, "priority") == ["big"] * 5


def test_a_standing_by_fallback_takes_the_late_requests_before_any_fallback_is_active(
        gateway: Gateway, cluster: SandboxCluster) -> None:
    """A surge's first seconds come before any tick: the gateway spills at weight 0 as it would at 1."""
    assert _pools(gateway, 10) == ["big"] * 10  # weights 100 / 0 and no queue: nothing spills
    assert gateway.spilled == 0
    _queue_on(_primary(cluster))
    assert _pools(gateway, 20) == ["small"] * 20
    assert gateway.spilled == 20


def test_a_primary_without_a_queue_keeps_its_requests(gateway: Gateway, cluster: SandboxCluster) -> None:
    _set_weights(cluster, 99, 1)
    _pools(gateway, 20)
    assert gateway.spilled == 0  # whatever the weights drew, nothing spilled


def test_without_a_spill_threshold_the_weights_alone_decide(cluster: SandboxCluster) -> None:
    gateway = Gateway(cluster, fallback=FallbackRouting(NS, "small"))
    _set_weights(cluster, 100, 0)
    _queue_on(_primary(cluster))
    assert _pools(gateway, 10) == ["big"] * 10
    _set_weights(cluster, 1000, 1)
    assert _pools(gateway, 10).count("big") >= 5 and gateway.spilled == 0


def test_the_class_header_is_read_over_http(gateway: Gateway, cluster: SandboxCluster) -> None:
    _set_weights(cluster, 0, 100)
    response = requests.post(gateway.url + "/v1/completions", timeout=10, headers={"x-request-class": "Priority"},
                             json={"model": "any", "prompt": "hi", "max_tokens": 1})
    assert response.status_code == 200
    assert response.headers["x-sandbox-pool"] == "big"
    response = requests.post(gateway.url + "/v1/completions", timeout=10,
                             json={"model": "any", "prompt": "hi", "max_tokens": 1})
    assert response.headers["x-sandbox-pool"] == "small"


def test_a_bad_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="spill_after_s must be positive"):
        FallbackRouting(NS, "small", spill_after_s=0.0)
