"""A Deployment a HorizontalPodAutoscaler owns: writing its replicas would start a fight the HPA wins at its
next sync, so the driver refuses and names the autoscaler; with the pool's scaling target set to the HPA,
the driver raises its minReplicas instead, as it raises a KEDA ScaledObject's floor."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from kubernetes import client

from sandbox.fleet import Fleet
from sandbox.kube import rbac
from sandbox.kube import resources as res
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from sandbox.replica import wait_until
from scaling.drivers.cluster import DriverError, PremiseChanged, ScalePremise, Workload
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.sim.profiles import get_profile

NS = "inference"
PLAIN = Workload(NS, "chat")
THROUGH_HPA = Workload(NS, "chat", hpa=True)


@pytest.fixture
def kube() -> Iterator[SandboxCluster]:
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=2)
    with Fleet() as fleet, SandboxCluster(fleet, route_namespace=NS) as running:
        running.add_pool(PoolSpec(name="chat", profile=profile, namespace=NS, replicas=2, cold_start_s=0,
                                  hpa=True, min_replicas=2, max_replicas=6))
        yield running


def _hpa(kube: SandboxCluster, name: str = "chat") -> dict:
    return client.ApiClient().sanitize_for_serialization(
        client.AutoscalingV2Api(rbac.admin_client(kube.url)).read_namespaced_horizontal_pod_autoscaler(name, NS))


def _add_hpa(kube: SandboxCluster, name: str, owner: str = "") -> None:
    """Another team's autoscaler (or KEDA's, when `owner` names its ScaledObject)."""
    metadata: dict = {"name": name, "namespace": NS}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": owner,
                                        "uid": "0000", "controller": True}]
    kube.store.create(res.HPAS, {"metadata": metadata, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"},
        "minReplicas": 1, "maxReplicas": 10}, "status": {}})


def test_a_replica_count_an_hpa_would_undo_is_refused_and_names_the_hpa(kube: SandboxCluster) -> None:
    driver = KubernetesDriver(kube.url)

    with pytest.raises(DriverError) as refused:
        driver.scale(PLAIN, 5)

    assert refused.value.permanent
    assert str(refused.value) == (
        f"Deployment {NS}/chat is scaled by HorizontalPodAutoscaler {NS}/chat (minReplicas 2, maxReplicas 6), which "
        "would undo a replica count written to it: set the pool's scaling target to HPA, and Headroom raises its "
        "minReplicas instead")
    assert driver.status(PLAIN).desired == 2  # nothing written
    assert driver.scale(PLAIN, 2).wrote is False  # a count already in place needs no write, and is no fight


def test_the_hpa_keda_made_points_at_the_scaled_object(kube: SandboxCluster) -> None:
    kube.store.delete(res.HPAS, NS, "chat")
    _add_hpa(kube, "keda-hpa-chat", owner="chat-scaler")

    with pytest.raises(DriverError, match=f"scaled by KEDA ScaledObject {NS}/chat-scaler .*scaling target to KEDA"):
        KubernetesDriver(kube.url).scale(PLAIN, 5)
    with pytest.raises(DriverError, match="is KEDA's, which resets its minReplicas"):
        KubernetesDriver(kube.url).scale(THROUGH_HPA, 5)


def test_through_the_hpa_the_floor_is_raised_and_the_replicas_follow(kube: SandboxCluster) -> None:
    driver = KubernetesDriver(kube.url)

    outcome = driver.scale(THROUGH_HPA, 4, ScalePremise(decided_from=2, target=4))

    assert (outcome.previous, outcome.target, outcome.wrote) == (2, 4, True)
    assert _hpa(kube)["spec"]["minReplicas"] == 4
    assert wait_until(lambda: driver.status(THROUGH_HPA).ready == 4, 10)
    assert driver.scale(THROUGH_HPA, 4).wrote is False  # a resumed execution writes nothing twice
    # Lowering the floor lets the HPA decide (it reads no load here, so the Deployment stays where it is).
    assert driver.scale(THROUGH_HPA, 3).wrote and _hpa(kube)["spec"]["minReplicas"] == 3


def test_through_the_hpa_what_it_cannot_do_is_refused_before_any_write(kube: SandboxCluster) -> None:
    driver = KubernetesDriver(kube.url)
    with pytest.raises(DriverError, match=f"HorizontalPodAutoscaler {NS}/chat allows at most 6 replicas; 7 asked"):
        driver.scale(THROUGH_HPA, 7)
    with pytest.raises(DriverError, match="keeps at least 1 replica; 0 asked"):
        driver.scale(THROUGH_HPA, 0)
    client.AppsV1Api(rbac.admin_client(kube.url)).patch_namespaced_deployment_scale("chat", NS, {"spec": {"replicas": 5}})
    with pytest.raises(PremiseChanged):  # someone scaled it past the target since the decision
        driver.scale(THROUGH_HPA, 4, ScalePremise(decided_from=2, target=4))
    assert _hpa(kube)["spec"]["minReplicas"] == 2

    _add_hpa(kube, "chat-cpu")
    with pytest.raises(DriverError, match=r"2 HorizontalPodAutoscalers scale Deployment inference/chat \(chat, chat-cpu\)"):
        driver.scale(THROUGH_HPA, 4)
    kube.store.delete(res.HPAS, NS, "chat")
    kube.store.delete(res.HPAS, NS, "chat-cpu")
    with pytest.raises(DriverError, match="no HorizontalPodAutoscaler scales Deployment inference/chat") as missing:
        driver.scale(THROUGH_HPA, 4)
    assert missing.value.permanent


def test_the_sandbox_hpa_undoes_a_count_outside_its_range_as_a_real_one_does(kube: SandboxCluster) -> None:
    apps = client.AppsV1Api(rbac.admin_client(kube.url))
    apps.patch_namespaced_deployment_scale("chat", NS, {"spec": {"replicas": 9}})
    assert wait_until(lambda: apps.read_namespaced_deployment_scale("chat", NS).spec.replicas == 6, 5)
