"""Pools whose Deployment a HorizontalPodAutoscaler owns, through the proposal's whole path: a pool still set to
write the Deployment fails its proposal at once with the fix, instead of writing a count the HPA undoes; a pool
set to its HPA raises the floor, recorded once."""
from __future__ import annotations

from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel, ScalingTarget
from controlplane.models import AuditEvent, Pool
from sandbox.kube import resources as res
from sandbox.kube.cluster import SandboxCluster
from sandbox.replica import wait_until
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.drivers.registry import workload_of

NS = "inference"


def _another_teams_hpa(kube: SandboxCluster) -> None:
    kube.store.create(res.HPAS, {"metadata": {"name": "chat-cpu", "namespace": NS}, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-chat-8b"},
        "minReplicas": 1, "maxReplicas": 8}, "status": {}})


def test_a_deployment_an_hpa_owns_fails_the_proposal_with_the_fix(kube_pool: Pool, alice: User, bob: User,
                                                                  kube: SandboxCluster) -> None:
    _another_teams_hpa(kube)
    proposal = services.propose(kube_pool, 3, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1)
    services.approve(proposal.pk, core.Actor(bob, Channel.API))

    failed = services.execute(proposal.pk, KubernetesDriver(kube.url))

    assert failed.state == ProposalState.FAILED and failed.attempts == 1
    assert f"HorizontalPodAutoscaler {NS}/chat-cpu" in failed.last_error
    assert "set the pool's scaling target to HPA" in failed.last_error
    assert KubernetesDriver(kube.url).status(workload_of(kube_pool)).desired == 1


def test_through_its_hpa_a_pool_is_scaled_by_raising_the_floor(kube_pool: Pool, alice: User, bob: User,
                                                                kube: SandboxCluster) -> None:
    _another_teams_hpa(kube)
    Pool.objects.filter(pk=kube_pool.pk).update(scaling_target=ScalingTarget.HPA)
    pool = Pool.objects.select_related("cluster").get(pk=kube_pool.pk)
    proposal = services.propose(pool, 3, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1)
    assert proposal.workload["hpa"] is True
    services.approve(proposal.pk, core.Actor(bob, Channel.API))
    driver = KubernetesDriver(kube.url)

    services.execute(proposal.pk, driver)
    services.execute(proposal.pk, driver)  # a retried task finds nothing to do

    assert kube.store.get(res.HPAS, NS, "chat-cpu")["spec"]["minReplicas"] == 3
    assert wait_until(lambda: driver.status(workload_of(pool)).ready == 3, 10)
    scaled = AuditEvent.objects.filter(action="scale", object_id=str(proposal.pk))
    assert scaled.count() == 1 and scaled.get().after["wrote"] is True
