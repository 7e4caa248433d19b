"""A proposal for a pool whose ScaledObject an operator paused fails at once, saying why, instead of sitting
in executing until the readiness timeout and blaming the replicas."""
from __future__ import annotations

from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel, ScalingTarget
from controlplane.models import Pool
from sandbox.kube import resources as res
from sandbox.kube.cluster import SandboxCluster
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver

NS = "inference"


def test_a_paused_scaled_object_fails_the_proposal_with_the_annotation(kube_pool: Pool, alice: User, bob: User,
                                                                       kube: SandboxCluster) -> None:
    kube.store.create(res.SCALEDOBJECTS, {
        "metadata": {"name": "vllm-chat-8b", "namespace": NS,
                     "annotations": {"autoscaling.keda.sh/paused-replicas": "1"}},
        "spec": {"scaleTargetRef": {"name": "vllm-chat-8b"}, "minReplicaCount": 1, "maxReplicaCount": 8},
        "status": {}})
    Pool.objects.filter(pk=kube_pool.pk).update(scaling_target=ScalingTarget.KEDA, scaled_object="vllm-chat-8b")
    kube_pool.refresh_from_db()
    proposal = services.propose(kube_pool, 3, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1)
    services.approve(proposal.pk, core.Actor(bob, Channel.API))
    failed = services.execute(proposal.pk, KubernetesDriver(kube.url))
    assert failed.state == ProposalState.FAILED and failed.attempts == 1
    assert failed.last_error == (f"ScaledObject {NS}/vllm-chat-8b is paused (autoscaling.keda.sh/paused-replicas=1): "
                                 "Headroom's floor would do nothing; remove the annotation to let it scale")
