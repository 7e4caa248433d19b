"""The Kubernetes API emulator, driven by the official `kubernetes` client over real HTTP."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
import requests
from kubernetes import client, dynamic, watch
from urllib3.exceptions import MaxRetryError, ReadTimeoutError

from scaling.sim.profiles import PoolProfile
from sandbox.clock import ManualClock
from sandbox.fleet import Fleet
from sandbox.kube.cluster import RECONCILE_INTERVAL_S, PoolSpec, SandboxCluster
from sandbox.kube.rbac import admin_client
from sandbox.replica import wait_until

NS = "sandbox"
ROUTE = ("gateway.networking.k8s.io", "v1", NS, "httproutes", "sandbox-route")
JSON_PATCH = "application/json-patch+json"  # CustomObjectsApi sends merge patch unless told


@pytest.fixture
def clock() -> ManualClock:
    """The replicas' model time: cold starts and restart delays end only when a test moves it on."""
    return ManualClock()


@pytest.fixture
def cluster(clock: ManualClock, small_profile: PoolProfile) -> Iterator[SandboxCluster]:
    with Fleet(clock=clock) as fleet, SandboxCluster(fleet, restart_delay_s=0.3) as running:
        running.add_pool(PoolSpec(name="chat", profile=small_profile, replicas=1, cold_start_s=1.0))
        running.add_pool(PoolSpec(name="chat-small", profile=small_profile, replicas=0, cold_start_s=0.8,
                                  weight=0, keda=True, max_replicas=4))
        clock.advance(1.0)  # chat's first replica has loaded
        yield running


@pytest.fixture
def api(cluster: SandboxCluster) -> client.ApiClient:
    return admin_client(cluster.url)  # the API's own behaviour, not Headroom's role (tests/drivers/test_rbac.py)


def _pods(api: client.ApiClient, name: str) -> list[client.V1Pod]:
    selector = f"app.kubernetes.io/instance={name}"
    return client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=selector).items


def _ready_pods(api: client.ApiClient, name: str) -> list[str]:
    return [pod.metadata.name for pod in _pods(api, name)
            if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)]


def test_it_scales_a_deployment_and_pods_turn_ready_after_the_cold_start(api: client.ApiClient,
                                                                         clock: ManualClock) -> None:
    apps = client.AppsV1Api(api)
    names = [d.metadata.name for d in apps.list_namespaced_deployment(NS).items]
    assert names == ["chat", "chat-small"]

    scale = apps.patch_namespaced_deployment_scale("chat", NS, {"spec": {"replicas": 3}})
    assert scale.spec.replicas == 3
    assert wait_until(lambda: len(_pods(api, "chat")) == 3, 5)
    assert wait_until(lambda: len(_ready_pods(api, "chat")) == 1, 5)
    clock.advance(0.9)
    time.sleep(3 * RECONCILE_INTERVAL_S)  # the controller has looked again: still loading
    assert len(_ready_pods(api, "chat")) == 1  # the new two load their model for a whole second
    clock.advance(0.1)
    assert wait_until(lambda: len(_ready_pods(api, "chat")) == 3, 5)
    status = apps.read_namespaced_deployment("chat", NS).status
    assert (status.replicas, status.ready_replicas) == (3, 3)

    read = apps.read_namespaced_deployment_scale("chat", NS)
    read.spec.replicas = 1
    apps.replace_namespaced_deployment_scale("chat", NS, read)
    assert wait_until(lambda: len(_pods(api, "chat")) == 1, 2)


def test_it_answers_409_to_a_write_with_a_stale_resource_version(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    mine = apps.read_namespaced_deployment("chat", NS)
    apps.patch_namespaced_deployment("chat", NS, {"metadata": {"labels": {"touched-by": "someone-else"}}})
    mine.spec.replicas = 2
    with pytest.raises(client.ApiException) as lost:
        apps.replace_namespaced_deployment("chat", NS, mine)
    assert lost.value.status == 409
    status = json.loads(lost.value.body)
    assert (status["kind"], status["reason"], status["details"]["name"]) == ("Status", "Conflict", "chat")

    stale_scale = {"metadata": {"resourceVersion": mine.metadata.resource_version}, "spec": {"replicas": 2}}
    with pytest.raises(client.ApiException) as lost_again:
        apps.patch_namespaced_deployment_scale("chat", NS, stale_scale)
    assert lost_again.value.status == 409


def test_it_patches_httproute_weights_with_merge_and_json_patch(api: client.ApiClient, cluster: SandboxCluster) -> None:
    custom = client.CustomObjectsApi(api)
    route = custom.get_namespaced_custom_object(*ROUTE)
    backends = route["spec"]["rules"][0]["backendRefs"]
    assert [(b["name"], b["weight"]) for b in backends] == [("chat", 1), ("chat-small", 0)]

    rules = route["spec"]["rules"]
    rules[0]["backendRefs"][0]["weight"], rules[0]["backendRefs"][1]["weight"] = 80, 20
    custom.patch_namespaced_custom_object(*ROUTE, {"spec": {"rules": rules}})
    assert [(p.name, w) for p, w in cluster.route_weights()] == [("chat", 80), ("chat-small", 20)]

    custom.patch_namespaced_custom_object(*ROUTE, [
        {"op": "test", "path": "/spec/rules/0/backendRefs/0/weight", "value": 80},
        {"op": "replace", "path": "/spec/rules/0/backendRefs/0/weight", "value": 95},
        {"op": "replace", "path": "/spec/rules/0/backendRefs/1/weight", "value": 5}], _content_type=JSON_PATCH)
    assert [w for _, w in cluster.route_weights()] == [95, 5]

    with pytest.raises(client.ApiException) as invalid:
        custom.patch_namespaced_custom_object(*ROUTE, [
            {"op": "replace", "path": "/spec/rules/0/backendRefs/0/weight", "value": -1}], _content_type=JSON_PATCH)
    assert invalid.value.status == 422

    with pytest.raises(client.ApiException) as strategic:  # a CRD takes no strategic merge patch
        custom.patch_namespaced_custom_object(*ROUTE, {"metadata": {"labels": {"a": "b"}}},
                                              _content_type="application/strategic-merge-patch+json")
    assert strategic.value.status == 415


def test_it_lets_keda_min_replicas_raise_the_deployment(api: client.ApiClient, clock: ManualClock) -> None:
    custom = client.CustomObjectsApi(api)
    scaled = ("keda.sh", "v1alpha1", NS, "scaledobjects", "chat-small")
    assert [s["metadata"]["name"] for s in custom.list_namespaced_custom_object(*scaled[:4])["items"]] == ["chat-small"]
    custom.patch_namespaced_custom_object(*scaled, {"spec": {"minReplicaCount": 2}})
    apps = client.AppsV1Api(api)
    assert wait_until(lambda: apps.read_namespaced_deployment("chat-small", NS).spec.replicas == 2, 5)
    assert wait_until(lambda: len(_pods(api, "chat-small")) == 2, 5)
    clock.advance(0.8)
    assert wait_until(lambda: len(_ready_pods(api, "chat-small")) == 2, 5)


def test_it_serves_discovery_to_the_dynamic_client(api: client.ApiClient) -> None:
    discovered = dynamic.DynamicClient(api)
    routes = discovered.resources.get(api_version="gateway.networking.k8s.io/v1", kind="HTTPRoute")
    assert [item.metadata.name for item in routes.get(namespace=NS).items] == ["sandbox-route"]
    scale = discovered.resources.get(api_version="apps/v1", kind="Deployment")
    assert scale.subresources["scale"].kind == "Scale"
    assert client.VersionApi(api).get_code().major == "1"


def test_it_injects_api_faults(api: client.ApiClient, cluster: SandboxCluster) -> None:
    apps = client.AppsV1Api(api)
    cluster.api.faults.conflict_storm = 2
    for _ in range(2):
        with pytest.raises(client.ApiException) as storm:
            apps.patch_namespaced_deployment_scale("chat", NS, {"spec": {"replicas": 2}})
        assert storm.value.status == 409
    apps.patch_namespaced_deployment_scale("chat", NS, {"spec": {"replicas": 2}})

    requests.put(cluster.url + "/sandbox/faults", json={"fail_next": 1}, timeout=2)
    with pytest.raises(client.ApiException) as broken:
        apps.read_namespaced_deployment("chat", NS)
    assert broken.value.status == 500
    assert apps.read_namespaced_deployment("chat", NS).spec.replicas == 2

    cluster.api.faults.latency_s = 0.5
    with pytest.raises(MaxRetryError) as slow:  # the client's retries of a read that timed out each time
        apps.read_namespaced_deployment("chat", NS, _request_timeout=0.2)
    assert isinstance(slow.value.reason, ReadTimeoutError), slow.value.reason
    cluster.api.faults.latency_s = 0.0


def test_it_restarts_a_replica_that_died(api: client.ApiClient, cluster: SandboxCluster, clock: ManualClock) -> None:
    assert wait_until(lambda: len(_ready_pods(api, "chat")) == 1, 5)
    pod = _ready_pods(api, "chat")[0]
    answer = requests.put(f"{cluster.url}/sandbox/pods/{NS}/{pod}/faults", json={"kill": True}, timeout=2).json()
    assert answer["state"] == "dead"
    assert wait_until(lambda: _ready_pods(api, "chat") == [], 5)
    [replica] = cluster.replicas(NS, "chat")
    clock.advance(0.2)
    time.sleep(3 * RECONCILE_INTERVAL_S)
    assert replica.restarts == 0  # the restart delay, 0.3 s, has not passed
    clock.advance(0.1)
    assert wait_until(lambda: replica.restarts == 1, 5)
    clock.advance(1.0)  # the cold start, again
    assert wait_until(lambda: _ready_pods(api, "chat") == [pod], 5)  # restarted in place
    statuses = client.CoreV1Api(api).read_namespaced_pod(pod, NS).status.container_statuses
    assert statuses[0].restart_count == 1


def test_it_works_with_kubectl(cluster: SandboxCluster, clock: ManualClock, api: client.ApiClient, tmp_path) -> None:  # noqa: ANN001, E501
    assert shutil.which("kubectl"), "kubectl is missing: run `make system-deps` (apt-get install -y kubernetes-client)"
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: sandbox\n"
        f"clusters: [{{name: sandbox, cluster: {{server: '{cluster.url}'}}}}]\n"
        "contexts: [{name: sandbox, context: {cluster: sandbox, user: nobody, namespace: sandbox}}]\n"
        "users: [{name: nobody, user: {}}]\n")

    def kubectl(*args: str) -> str:
        done = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp_path / 'cache'}",
                               *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert kubectl("get", "deployments", "-o", "name").split() == ["deployment.apps/chat", "deployment.apps/chat-small"]
    assert kubectl("get", "deployments").split("\n")[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    kubectl("scale", "deployment/chat", "--replicas=2")
    assert json.loads(kubectl("get", "deployment", "chat", "-o", "json"))["spec"]["replicas"] == 2
    assert wait_until(lambda: len(_pods(api, "chat")) == 2, 5)
    clock.advance(1.0)
    assert "sandbox-route" in kubectl("get", "httproutes", "-o", "name")
    assert "successfully rolled out" in kubectl("rollout", "status", "deployment/chat", "--timeout=10s")


def test_it_streams_watch_events_as_pods_turn_ready(api: client.ApiClient, clock: ManualClock) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    listed = core.list_namespaced_pod(NS, label_selector="app.kubernetes.io/instance=chat-small")
    assert listed.items == []
    apps.patch_namespaced_deployment_scale("chat-small", NS, {"spec": {"replicas": 1}})
    seen: list[tuple[str, str]] = []
    for event in watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=5,
                                      label_selector="app.kubernetes.io/instance=chat-small",
                                      resource_version=listed.metadata.resource_version):
        ready = next(c.status for c in event["object"].status.conditions if c.type == "Ready")
        seen.append((event["type"], ready))
        if ready == "True":
            break
        clock.advance(0.8)  # the pod exists: let its cold start end
    assert seen[0] == ("ADDED", "False")
    assert seen[-1] == ("MODIFIED", "True")
