"""A paused ScaledObject (KEDA's `autoscaling.keda.sh/paused-replicas` or `paused` annotation) follows no
minReplicaCount: the driver refuses to raise the floor rather than report a write that does nothing, and the
sandbox's KEDA honours the pause as real KEDA does."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from kubernetes import client

from sandbox.fleet import Fleet
from sandbox.kube import rbac
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from sandbox.replica import wait_until
from scaling.drivers.cluster import DriverError, Workload
from scaling.drivers.kubernetes import KEDA, KubernetesDriver
from scaling.sim.profiles import get_profile

NS = "inference"
BATCH = Workload(NS, "batch", scaled_object="batch")


@pytest.fixture
def kube() -> Iterator[SandboxCluster]:
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=2)
    with Fleet() as fleet, SandboxCluster(fleet, route_namespace=NS) as running:
        running.add_pool(PoolSpec(name="batch", profile=profile, namespace=NS, replicas=1, cold_start_s=0,
                                  keda=True, min_replicas=1, max_replicas=8))
        yield running


def _patch_scaled_object(kube: SandboxCluster, body: dict) -> None:
    """An operator's edit, made with the admin's rights (Headroom's role may only patch the spec it owns)."""
    group, version, plural = KEDA
    client.CustomObjectsApi(rbac.admin_client(kube.url)).patch_namespaced_custom_object(
        group, version, NS, plural, "batch", body)


def _min_replica_count(kube: SandboxCluster) -> int:
    group, version, plural = KEDA
    scaled = client.CustomObjectsApi(rbac.admin_client(kube.url)).get_namespaced_custom_object(
        group, version, NS, plural, "batch")
    return scaled["spec"]["minReplicaCount"]


def _replicas(kube: SandboxCluster) -> int:
    return KubernetesDriver(kube.url).status(BATCH).desired


@pytest.mark.parametrize("annotations, shown", [
    ({"autoscaling.keda.sh/paused-replicas": "1"}, "autoscaling.keda.sh/paused-replicas=1"),
    ({"autoscaling.keda.sh/paused": "true"}, "autoscaling.keda.sh/paused=true"),
])
def test_it_refuses_to_raise_the_floor_of_a_paused_scaled_object(kube: SandboxCluster, annotations: dict,
                                                                  shown: str) -> None:
    _patch_scaled_object(kube, {"metadata": {"annotations": annotations}})
    with pytest.raises(DriverError) as refused:
        KubernetesDriver(kube.url).scale(BATCH, 3)
    assert refused.value.permanent
    assert str(refused.value) == (f"ScaledObject {NS}/batch is paused ({shown}): Headroom's floor would do "
                                  "nothing; remove the annotation to let it scale")
    assert _min_replica_count(kube) == 1  # nothing written


def test_it_scales_again_once_the_pause_is_removed(kube: SandboxCluster) -> None:
    _patch_scaled_object(kube, {"metadata": {"annotations": {"autoscaling.keda.sh/paused": "false"}}})
    assert KubernetesDriver(kube.url).scale(BATCH, 3).wrote  # "false" pauses nothing
    assert wait_until(lambda: _replicas(kube) == 3, 5)


def test_the_sandbox_pins_a_paused_replicas_deployment(kube: SandboxCluster) -> None:
    _patch_scaled_object(kube, {"metadata": {"annotations": {"autoscaling.keda.sh/paused-replicas": "2"}}})
    assert wait_until(lambda: _replicas(kube) == 2, 5)
    _patch_scaled_object(kube, {"spec": {"minReplicaCount": 4}})
    assert not wait_until(lambda: _replicas(kube) != 2, 0.5)
    _patch_scaled_object(kube, {"metadata": {"annotations": {"autoscaling.keda.sh/paused-replicas": None}}})
    assert wait_until(lambda: _replicas(kube) == 4, 5)


def test_the_sandbox_stops_following_min_replica_count_while_paused(kube: SandboxCluster) -> None:
    _patch_scaled_object(kube, {"metadata": {"annotations": {"autoscaling.keda.sh/paused": "true"}},
                                "spec": {"minReplicaCount": 3}})
    assert not wait_until(lambda: _replicas(kube) != 1, 0.5)
