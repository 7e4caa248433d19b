"""A pool's pods are the ones its Deployment's selector picks, matchExpressions included: a selector read
from matchLabels alone came out empty for an expressions-only Deployment and listed every pod in the
namespace, so another pool's pods became this pool's endpoints and cold starts."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from kubernetes import client

from sandbox.fleet import Fleet
from sandbox.kube import resources as res
from sandbox.kube import rbac
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from sandbox.kube.selectors import label_matcher
from sandbox.replica import wait_until
from scaling.drivers.cluster import DriverError, Workload
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.sim.profiles import get_profile

NS = "inference"
CHAT = Workload(NS, "chat")
INSTANCE = "app.kubernetes.io/instance"


@pytest.fixture
def kube() -> Iterator[SandboxCluster]:
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=2)
    with Fleet() as fleet, SandboxCluster(fleet, route_namespace=NS) as running:
        running.add_pool(PoolSpec(name="chat", profile=profile, namespace=NS, replicas=1, cold_start_s=0))
        running.add_pool(PoolSpec(name="other", profile=profile, namespace=NS, replicas=2, cold_start_s=0))
        yield running


def _select_with(kube: SandboxCluster, selector: dict[str, Any]) -> None:
    def change(deployment: dict[str, Any]) -> dict[str, Any]:
        deployment["spec"]["selector"] = selector
        return deployment

    kube.store.update(res.DEPLOYMENTS, NS, "chat", change)


def _chat_pods(kube: SandboxCluster) -> set[str]:
    return {replica.name for replica in kube.replicas(NS, "chat")}


@pytest.mark.parametrize("selector", [
    {"matchExpressions": [{"key": INSTANCE, "operator": "In", "values": ["chat"]}]},
    {"matchExpressions": [{"key": INSTANCE, "operator": "NotIn", "values": ["other"]},
                          {"key": "app.kubernetes.io/name", "operator": "Exists"},
                          {"key": "legacy", "operator": "DoesNotExist"}]},
    {"matchLabels": {"app.kubernetes.io/name": "vllm"},
     "matchExpressions": [{"key": INSTANCE, "operator": "In", "values": ["chat", "chat-canary"]}]},
])
def test_endpoints_and_cold_starts_see_only_the_pods_the_selector_picks(kube: SandboxCluster,
                                                                         selector: dict[str, Any]) -> None:
    since = datetime.now(timezone.utc) - timedelta(seconds=5)
    _select_with(kube, selector)
    driver = KubernetesDriver(kube.url)
    assert wait_until(lambda: set(driver.endpoints(CHAT)) == _chat_pods(kube) and len(_chat_pods(kube)) == 1, 5)
    # Two pods added since `since`: only other's two exist, which are not chat's.
    assert wait_until(lambda: len(kube.ready_replicas(NS, "other")) == 2, 5)
    assert driver.added_pods_ready_at(CHAT, since, 2) is None


def test_an_empty_selector_is_refused_rather_than_listing_every_pod(kube: SandboxCluster) -> None:
    _select_with(kube, {})
    driver = KubernetesDriver(kube.url)
    for read in (lambda: driver.endpoints(CHAT),
                 lambda: driver.added_pods_ready_at(CHAT, datetime.now(timezone.utc), 1)):
        with pytest.raises(DriverError, match=f"Deployment {NS}/chat has an empty pod selector") as refused:
            read()
        assert refused.value.permanent


def test_the_scale_subresource_serializes_the_whole_selector(kube: SandboxCluster) -> None:
    _select_with(kube, {"matchLabels": {"tier": "gpu"},
                        "matchExpressions": [{"key": INSTANCE, "operator": "In", "values": ["chat", "b"]},
                                             {"key": "legacy", "operator": "DoesNotExist"},
                                             {"key": "zone", "operator": "NotIn", "values": ["x"]}]})
    scale = client.AppsV1Api(rbac.admin_client(kube.url)).read_namespaced_deployment_scale("chat", NS)
    assert scale.status.selector == f"{INSTANCE} in (b,chat),!legacy,tier=gpu,zone notin (x)"


@pytest.mark.parametrize("selector, labels, matches", [
    ("app in (a,b)", {"app": "a"}, True),
    ("app in(a)", {"app": "a"}, True),
    ("app notin (a)", {"app": "a"}, False),
    ("app notin (a)", {}, True),
    ("app", {"app": "x"}, True),
    ("!app", {"app": "x"}, False),
    ("!app,tier=gpu", {"tier": "gpu"}, True),
])
def test_the_sandbox_reads_set_based_selectors(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert label_matcher(selector)(labels) is matches


def test_the_sandbox_refuses_a_selector_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="unable to parse requirement"):
        label_matcher("app in (a")
