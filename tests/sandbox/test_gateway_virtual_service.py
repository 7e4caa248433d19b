"""The sandbox gateway honours an Istio VirtualService's weights as it does an HTTPRoute's."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from scaling.drivers.routers import VirtualServiceRouter
from scaling.drivers.routing import RouteRef, WeightPremise
from scaling.sim.profiles import PoolProfile
from sandbox.fleet import Fleet
from sandbox.gateway import Gateway
from sandbox.kube.cluster import PoolSpec, SandboxCluster

NS = "sandbox"


@pytest.fixture
def cluster(fleet: Fleet, small_profile: PoolProfile) -> Iterator[SandboxCluster]:
    with SandboxCluster(fleet, route_kind="virtualservice") as running:
        running.add_pool(PoolSpec(name="big", profile=small_profile, model="big-model", cold_start_s=0, weight=100))
        running.add_pool(PoolSpec(name="small", profile=small_profile, model="small-model", cold_start_s=0, weight=0))
        yield running


def _served_by(gateway: Gateway, count: int) -> set[str]:
    pools = set()
    for _ in range(count):
        response = requests.post(gateway.url + "/v1/completions", timeout=10,
                                 json={"model": "any", "prompt": "hi", "max_tokens": 1})
        assert response.status_code == 200
        pools.add(response.headers["x-sandbox-pool"])
    return pools


def test_it_splits_traffic_by_virtual_service_weights(cluster: SandboxCluster) -> None:
    gateway = Gateway(cluster).start()
    try:
        for pool in ("big", "small"):
            for replica in cluster.replicas(NS, pool):
                assert replica.wait_ready(timeout=5)
        assert _served_by(gateway, 5) == {"big"}
        router = VirtualServiceRouter(cluster.url)
        router.set_weights(RouteRef(NS, "sandbox-route"), {"big": 0, "small": 100},
                           WeightPremise(({"big": 100, "small": 0},)))
        assert _served_by(gateway, 5) == {"small"}
        router.close()
    finally:
        gateway.stop()


def test_it_refuses_an_unknown_route_kind(fleet: Fleet) -> None:
    with pytest.raises(ValueError, match="route_kind must be one of"):
        SandboxCluster(fleet, route_kind="ingress")
