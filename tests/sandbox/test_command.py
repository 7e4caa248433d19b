"""`manage.py sandbox`: one command starts everything, prints its addresses, stops on SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from kubernetes import client

from controlplane.models import Cluster, Pool
from sandbox.registration import register
from sandbox.replica import wait_until
from sandbox.runtime import Sandbox, SandboxConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sandbox_process() -> Iterator[subprocess.Popen[str]]:
    command = [sys.executable, "manage.py", "sandbox", "--pools", "2", "--scenario", "idle", "--json",
               "--cold-start", "1", "--scrape-interval", "0.5"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "DEBUG": "1"})
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_it_starts_everything_and_stops_on_sigterm(sandbox_process: subprocess.Popen[str]) -> None:
    assert sandbox_process.stdout is not None and sandbox_process.stderr is not None
    first_line = sandbox_process.stdout.readline()
    assert first_line, sandbox_process.stderr.read()
    described = json.loads(first_line)
    assert set(described) == {"kube_api", "prometheus", "pools"}
    assert [set(pool) for pool in described["pools"]] == [
        {"name", "namespace", "deployment", "model", "route", "replicas"}] * 2

    apps = client.AppsV1Api(client.ApiClient(client.Configuration(host=described["kube_api"])))
    pool = described["pools"][0]
    assert [d.metadata.name for d in apps.list_namespaced_deployment(pool["namespace"]).items] == \
        sorted(p["deployment"] for p in described["pools"])
    apps.patch_namespaced_deployment_scale(pool["deployment"], pool["namespace"], {"spec": {"replicas": 2}})

    replica_url = pool["replicas"][0]
    assert wait_until(lambda: _answers(replica_url + "/health"), 5)
    metrics = requests.get(replica_url + "/metrics", timeout=2).text
    assert f'vllm:num_requests_waiting{{engine="0",model_name="{pool["model"]}"}} 0.0' in metrics

    prometheus = described["prometheus"]
    assert prometheus is not None
    query = "sum by (model_name) (vllm:num_requests_waiting)"

    def models_seen() -> set[str]:
        answer = requests.get(prometheus + "/api/v1/query", params={"query": query}, timeout=5).json()
        return {series["metric"]["model_name"] for series in answer["data"]["result"]}

    assert wait_until(lambda: models_seen() == {p["model"] for p in described["pools"]}, 15)

    sandbox_process.send_signal(signal.SIGTERM)
    assert sandbox_process.wait(timeout=15) == 0
    assert not _answers(replica_url + "/health")
    assert not _answers(described["kube_api"] + "/version")
    assert not _answers(prometheus + "/-/ready")


def test_it_explains_bad_options_without_a_traceback() -> None:
    done = subprocess.run([sys.executable, "manage.py", "sandbox", "--pools", "0"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "DEBUG": "1"}, timeout=60)
    assert done.returncode != 0
    assert "--pools must be at least 1" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.django_db
def test_it_registers_the_cluster_and_pools_idempotently() -> None:
    config = SandboxConfig(pools=2, scenario="idle", cold_start_s=0, prometheus=False)
    with Sandbox(config) as sandbox:
        register(sandbox)
        register(sandbox)
        cluster = Cluster.objects.get(name="sandbox")
        assert cluster.kube_api_url == sandbox.cluster.url
        assert set(cluster.prices) == {spec.profile.gpu_type for spec in sandbox.specs}
        pools = list(Pool.objects.filter(cluster=cluster).order_by("name"))
        assert [p.deployment for p in pools] == sorted(spec.name for spec in sandbox.specs)
        assert {p.route_name for p in pools} == {"sandbox-route"}
        assert {p.model_name for p in pools} == {spec.served_model for spec in sandbox.specs}


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.django_db
def test_a_new_run_retires_a_sandbox_left_mid_incident() -> None:
    """`make demo` stopped with Ctrl-C during the surge leaves an open incident and an active fallback on the
    sandbox: the next start must still retire it (its pods and route are gone), ending both with a reason on
    record, instead of refusing to start because the pool is "in trouble"."""
    from django.utils import timezone

    from controlplane.models import AuditEvent
    from incidents.models import Incident
    from sandbox.registration import retire_previous
    from scaling.choices import FallbackPhase, ShiftPhase
    from scaling.models import FallbackActivation, TrafficShift

    config = SandboxConfig(pools=1, scenario="idle", cold_start_s=0, prometheus=False, fallback_replicas=1)
    with Sandbox(config) as sandbox:
        register(sandbox)
    cluster = Cluster.objects.get(name="sandbox")
    primary, spare = (Pool.objects.filter(cluster=cluster, fallback_pool__isnull=False).get(),
                      Pool.objects.filter(cluster=cluster, fallback_pool__isnull=True).get())
    Incident.objects.create(pool=primary, team=primary.team, cluster=cluster, severity="P0", title="p99 above 5 s",
                            opened_at=timezone.now())
    Incident.objects.create(pool=None, team=primary.team, cluster=cluster, severity="P1",
                            title="control loop stopped", opened_at=timezone.now())
    FallbackActivation.objects.create(
        pool=primary, fallback_pool=spare, route_namespace=primary.namespace, route_name=primary.route_name,
        primary_backend=primary.route_backend, fallback_backend=spare.route_backend, phase=FallbackPhase.ACTIVE,
        trigger="auto", share=0.9, target_percent=90, route_percent=90, created_channel="auto")
    weights = {primary.route_backend: 80, spare.route_backend: 20}
    TrafficShift.objects.create(
        cluster=cluster, from_pool=primary, to_pool=spare, route_namespace=primary.namespace,
        route_name=primary.route_name, from_backend=primary.route_backend, to_backend=spare.route_backend,
        steps=[20], hold_s=60, max_p95_s=1.0, max_error_rate=0.01, failure_threshold=3, no_data_deadline_s=120,
        start_weights={primary.route_backend: 100, spare.route_backend: 0}, planned_weights=[weights],
        current_weights=weights, phase=ShiftPhase.HOLDING, step=0, idempotency_key="left-mid-shift",
        created_channel="api")

    said = retire_previous()

    assert "removed the previous sandbox" in said, said
    assert not Cluster.objects.filter(name="sandbox").exists()
    ended = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"resolved", "fallback-failed", "shift-failed"} <= ended, ended
