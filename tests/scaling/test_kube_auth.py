"""The Kubernetes driver authenticates with what the cluster's credentials_ref points at, and the
credentials themselves are never stored, shown or audited."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.test import Client

from controlplane.models import AuditEvent, Cluster, Pool
from sandbox.kube.cluster import SandboxCluster
from scaling import loop
from scaling.drivers.cluster import DriverError
from scaling.drivers.registry import cluster_driver, credentials, workload_of

from tests.core.conftest import token_client

TOKEN = "sandbox-bearer-8f2c"  # noqa: S105 - a test credential for the emulator


@pytest.fixture
def locked_kube(kube: SandboxCluster, settings, tmp_path: Path) -> SandboxCluster:  # noqa: ANN001
    kube.api.required_token = TOKEN
    settings.KUBE_CREDENTIALS_DIR = str(tmp_path)
    settings.PROMETHEUS_ENABLED = False
    (tmp_path / "gpu-token").write_text(TOKEN + "\n")
    (tmp_path / "gpu-kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: sandbox\n"
        f"clusters: [{{name: sandbox, cluster: {{server: '{kube.url}'}}}}]\n"
        f"users: [{{name: headroom, user: {{token: {TOKEN}}}}}]\n"
        "contexts: [{name: sandbox, context: {cluster: sandbox, user: headroom}}]\n")
    return kube


def _with_ref(pool: Pool, ref: str) -> Pool:
    Cluster.objects.filter(pk=pool.cluster_id).update(credentials_ref=ref)
    return Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules").get(pk=pool.pk)


@pytest.mark.parametrize("ref", ["token:gpu-token", "kubeconfig:gpu-kubeconfig"])
def test_it_reads_and_scales_with_the_referenced_credentials(kube_pool: Pool, locked_kube: SandboxCluster,
                                                            ref: str) -> None:
    pool = _with_ref(kube_pool, ref)
    report = loop.tick([pool])
    assert report.errors == {} and report.pools[0].read["desired_replicas"] == 1
    assert cluster_driver(pool.cluster).scale(workload_of(pool), 2).wrote


def test_without_credentials_a_locked_api_answers_401_and_the_pool_holds(kube_pool: Pool,
                                                                         locked_kube: SandboxCluster) -> None:
    report = loop.tick([_with_ref(kube_pool, "")])
    assert "HTTP 401" in report.errors[f"{kube_pool}: kubernetes"]
    assert report.pools[0].decided["current_replicas"] is None


def test_a_missing_credentials_file_is_a_clear_permanent_error(kube_pool: Pool, locked_kube: SandboxCluster) -> None:
    with pytest.raises(DriverError, match="cannot read the token of cluster gpu-us-east") as excinfo:
        credentials(_with_ref(kube_pool, "token:no-such-file").cluster)
    assert excinfo.value.permanent


def test_the_token_never_appears_in_the_api_or_the_audit_log(kube_pool: Pool, locked_kube: SandboxCluster,
                                                             bob: User) -> None:
    client_ = token_client(bob)
    changed = client_.patch(f"/api/v1/clusters/{kube_pool.cluster_id}/", {"credentials_ref": "token:gpu-token"},
                            format="json")
    assert changed.status_code == 200 and changed.data["credentials_ref"] == "token:gpu-token"
    shown = client_.get(f"/api/v1/clusters/{kube_pool.cluster_id}/").content.decode()
    audited = " ".join(str(event.after) + str(event.before) for event in AuditEvent.objects.all())
    assert TOKEN not in shown and TOKEN not in audited


@pytest.mark.parametrize("ref", ["secret/headroom/x", "token:../etc/passwd", "token:", "kubeconfig:a b"])
def test_a_credentials_ref_that_is_not_a_reference_is_a_400_naming_the_field(kube_pool: Pool, bob: User,
                                                                           ref: str) -> None:
    response = token_client(bob).patch(f"/api/v1/clusters/{kube_pool.cluster_id}/", {"credentials_ref": ref},
                                       format="json")
    assert response.status_code == 400 and "credentials_ref" in response.data
    assert Cluster.objects.get(pk=kube_pool.cluster_id).credentials_ref == ""


@pytest.mark.parametrize("ref", ["token:gpu-token", "kubeconfig:gpu-kubeconfig", "in-cluster"])
def test_another_team_cannot_name_a_clusters_credentials(kube_pool: Pool, locked_kube: SandboxCluster,
                                                         charlie: User, ref: str) -> None:
    # charlie, admin of another team, names ml's credential for a cluster of his own at ml's API: its
    # rights would scale ml's Deployments. A credential belongs to one cluster (and Headroom's own, in-cluster,
    # is named by a superuser only: either refusal will do).
    said = ("another cluster already uses", *(("only a superuser may name in-cluster",) if ref == "in-cluster" else ()))
    Cluster.objects.filter(pk=kube_pool.cluster_id).update(credentials_ref=ref)
    answer = token_client(charlie).post("/api/v1/clusters/", {
        "name": "borrowed", "team": "search", "kube_api_url": locked_kube.url, "credentials_ref": ref},
        format="json")
    assert answer.status_code == 400 and any(words in str(answer.data["credentials_ref"]).lower() for words in said)
    assert not Cluster.objects.filter(name="borrowed").exists()
    # The form says the same, and the database holds the rule against a write that skips both.
    client = Client()
    client.force_login(charlie)
    page = client.post("/cluster/new/", {"name": "borrowed", "team": charlie.memberships.get().team_id,
                                          "kube_api_url": locked_kube.url, "credentials_ref": ref,
                                          "prometheus_rate_window": "1m", "time_zone": "UTC", "off_hours": "[]",
                                          "gpu_prices": "{}"})
    assert page.status_code == 200 and any(words in page.content.decode().lower() for words in said)
    with pytest.raises(IntegrityError), transaction.atomic():
        Cluster.objects.create(name="borrowed", team_id=charlie.memberships.get().team_id,
                               kube_api_url=locked_kube.url, credentials_ref=ref)


def test_a_cluster_keeps_its_own_credentials_through_an_edit(kube_pool: Pool, locked_kube: SandboxCluster,
                                                             bob: User) -> None:
    Cluster.objects.filter(pk=kube_pool.cluster_id).update(credentials_ref="token:gpu-token")
    answer = token_client(bob).patch(f"/api/v1/clusters/{kube_pool.cluster_id}/", {"region": "us-east-1"},
                                     format="json")
    assert answer.status_code == 200 and answer.data["credentials_ref"] == "token:gpu-token"


def test_only_a_superuser_names_headrooms_own_service_account(kube_pool: Pool, charlie: User, bob: User) -> None:
    """`in-cluster` carries the scale rights deploy/ gives Headroom across its home cluster: a team admin naming
    it for a cluster of their own (no other cluster has it yet, so the one-claim rule does not stop them) would
    act with the platform's rights."""
    body = {"name": "mine", "team": "search", "kube_api_url": kube_pool.cluster.kube_api_url,
            "credentials_ref": "in-cluster"}
    refused = token_client(charlie).post("/api/v1/clusters/", body, format="json")
    assert refused.status_code == 400 and "Only a superuser may name in-cluster" in refused.data["credentials_ref"][0]
    client = Client()
    client.force_login(charlie)
    page = client.post("/cluster/new/", {**body, "team": charlie.memberships.get().team_id,
                                          "prometheus_rate_window": "1m", "time_zone": "UTC", "off_hours": "[]",
                                          "gpu_prices": "{}"})
    assert page.status_code == 200 and "Only a superuser may name in-cluster" in page.content.decode()
    assert not Cluster.objects.filter(name="mine").exists()
    root = User.objects.create_superuser("root", password="pw-root")
    made = token_client(root).post("/api/v1/clusters/", body, format="json")
    assert made.status_code == 201, made.data
    # A cluster a superuser gave it keeps it through its team admin's other edits.
    Cluster.objects.filter(pk=kube_pool.cluster_id).update(credentials_ref="", name="home")
    Cluster.objects.filter(name="mine").delete()
    Cluster.objects.filter(pk=kube_pool.cluster_id).update(credentials_ref="in-cluster")
    answer = token_client(bob).patch(f"/api/v1/clusters/{kube_pool.cluster_id}/", {"region": "us-east-1"},
                                     format="json")
    assert answer.status_code == 200 and answer.data["credentials_ref"] == "in-cluster"
