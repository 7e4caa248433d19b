"""Scenario 2: a pool's scaling target edited while a proposal of it is approved, and while it is executing.
control-loop.md: "each proposal records the pool's cluster, namespace, Deployment and ScaledObject when it is made
(`Proposal.workload`); an admin who repointed the pool since ends it stale"; "After its write the sweep reads the
workload until the target is Ready"; "The measured cold start is the time from this proposal's write to the Ready
transition of the pods it added"."""
from __future__ import annotations

import time
from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.choices import ScalingTarget
from controlplane.models import Pool
from sandbox.kube import resources as res
from sandbox.kube.cluster import SandboxCluster
from sandbox.replica import wait_until
from scaling import services
from scaling.choices import ProposalState
from scaling.drivers.cluster import DriverError
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.models import ColdStart, Proposal

from tests.scaling.world import NS, add_deployment, approved, audits, replicas
from tests.core.conftest import token_client


def _ready(kube: SandboxCluster, name: str) -> int:
    return len(kube.ready_replicas(NS, name))


def test_scaling_target_switched_to_hpa_while_approved(kube_pool: Pool, alice: User, bob: User,
                                                       kube: SandboxCluster) -> None:
    proposal = approved(kube_pool, 3, alice, bob)
    kube.store.create(res.HPAS, {"metadata": {"name": "chat-hpa", "namespace": NS}, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-chat-8b"},
        "minReplicas": 1, "maxReplicas": 8}, "status": {}})
    assert token_client(bob).patch(f"/api/v1/pools/{kube_pool.pk}/", {"scaling_target": "hpa"},
                                   format="json").status_code == 200
    assert services.execute(proposal.pk, KubernetesDriver(kube.url)) is None
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.STALE and "HorizontalPodAutoscaler" in proposal.last_error
    assert replicas(kube) == 1 and kube.store.get(res.HPAS, NS, "chat-hpa")["spec"]["minReplicas"] == 1
    assert audits(proposal, "stale") == 1


def test_scaled_object_renamed_while_approved(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    for name in ("so-a", "so-b"):
        kube.store.create(res.SCALEDOBJECTS, {"metadata": {"name": name, "namespace": NS}, "spec": {
            "scaleTargetRef": {"name": "vllm-chat-8b"}, "minReplicaCount": 1, "maxReplicaCount": 8}, "status": {}})
    Pool.objects.filter(pk=kube_pool.pk).update(scaling_target=ScalingTarget.KEDA, scaled_object="so-a")
    pool = Pool.objects.select_related("cluster", "team").get(pk=kube_pool.pk)
    proposal = approved(pool, 3, alice, bob)
    assert token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {"scaled_object": "so-b"},
                                   format="json").status_code == 200
    assert services.execute(proposal.pk, KubernetesDriver(kube.url)) is None
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.STALE and "so-b" in proposal.last_error
    assert kube.store.get(res.SCALEDOBJECTS, NS, "so-b")["spec"]["minReplicaCount"] == 1


class _FlakyOnce:
    """A driver whose first write fails with a 503 (retried after a backoff), then the real one."""

    def __init__(self, real: KubernetesDriver) -> None:
        self.real = real

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.real, name)

    def scale(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        raise DriverError("scale deployment: HTTP 503: unavailable", permanent=False, status=503)


def test_repointed_during_a_retry_backoff(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    add_deployment(kube, "vllm-other")
    proposal = approved(kube_pool, 3, alice, bob)
    waiting = services.execute(proposal.pk, _FlakyOnce(KubernetesDriver(kube.url)))
    assert waiting.state == ProposalState.EXECUTING and waiting.applied_at is None
    assert token_client(bob).patch(f"/api/v1/pools/{kube_pool.pk}/", {"deployment": "vllm-other"},
                                   format="json").status_code == 200
    Proposal.objects.filter(pk=proposal.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    services.advance()
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.STALE, (proposal.state, proposal.last_error)
    assert (replicas(kube), replicas(kube, "vllm-other")) == (1, 1)


def test_tracking_reads_the_object_the_change_was_written_to(kube_pool: Pool, alice: User, bob: User,
                                                             kube: SandboxCluster) -> None:
    """Written 1 → 3 to a slow-loading Deployment; while its pods load, an admin repoints the pool at another
    Deployment that already runs 3 Ready replicas (a blue/green cut-over). The sweep should keep following the
    Deployment it wrote (or end the change saying the pool moved), not declare success from the other one and
    record a cold start nobody measured."""
    add_deployment(kube, "vllm-slow", cold_start_s=3600)   # its pods load for an hour
    add_deployment(kube, "vllm-green", replicas=3, cold_start_s=0)
    assert wait_until(lambda: _ready(kube, "vllm-green") == 3, 10)
    Pool.objects.filter(pk=kube_pool.pk).update(deployment="vllm-slow")
    pool = Pool.objects.select_related("cluster", "team").get(pk=kube_pool.pk)
    proposal = approved(pool, 3, alice, bob)
    driver = KubernetesDriver(kube.url)
    written = services.execute(proposal.pk, driver)
    assert written.state == ProposalState.EXECUTING and written.applied_at is not None
    assert replicas(kube, "vllm-slow") == 3 and _ready(kube, "vllm-slow") == 0
    assert token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {"deployment": "vllm-green"},
                                   format="json").status_code == 200
    time.sleep(1.5)  # the next sweep comes a moment later (15 s in production)
    services.advance()
    proposal.refresh_from_db()
    assert _ready(kube, "vllm-slow") == 0
    assert proposal.state != ProposalState.SUCCEEDED, (
        f"succeeded with '{proposal.events.order_by('pk').last().comment}' while vllm-slow, where it wrote, has "
        f"0 of 3 Ready; cold starts recorded: {list(ColdStart.objects.values_list('seconds', flat=True))}")
    assert not ColdStart.objects.filter(proposal=proposal).exists()
