"""Helpers of the scenarios where the world moves between a decision and its action (test_world_*.py)."""
from __future__ import annotations

import dataclasses

from django.contrib.auth.models import User
from kubernetes import client

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from sandbox.kube import rbac
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from scaling import services
from scaling.choices import ProposalKind
from scaling.models import Proposal
from scaling.sim.profiles import get_profile

NS = "inference"


def profile():
    return dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=2)


def add_deployment(kube: SandboxCluster, name: str, **spec: object) -> None:
    defaults = dict(namespace=NS, replicas=1, cold_start_s=0.5, max_replicas=8)
    defaults.update(spec)
    kube.add_pool(PoolSpec(name=name, profile=profile(), **defaults))


def apps(kube: SandboxCluster) -> client.AppsV1Api:
    return client.AppsV1Api(rbac.admin_client(kube.url))


def replicas(kube: SandboxCluster, name: str = "vllm-chat-8b", namespace: str = NS) -> int:
    return apps(kube).read_namespaced_deployment_scale(name, namespace).spec.replicas


def set_replicas(kube: SandboxCluster, n: int, name: str = "vllm-chat-8b", namespace: str = NS) -> None:
    """Someone else (a person with kubectl, another tool) scales the Deployment."""
    apps(kube).patch_namespaced_deployment_scale(name, namespace, {"spec": {"replicas": n}})


def approved(pool: Pool, target: int, alice: User, bob: User, *, kind: str = ProposalKind.MANUAL,
             current: int = 1, **kwargs) -> Proposal:
    proposal = services.propose(pool, target, kind, core.Actor(alice, Channel.API), current=current, **kwargs)
    services.approve(proposal.pk, core.Actor(bob, Channel.API))
    proposal.refresh_from_db()
    return proposal


def audits(proposal: Proposal, action: str) -> int:
    return AuditEvent.objects.filter(object_id=str(proposal.pk), action=action).count()


def stop_controller(kube: SandboxCluster) -> None:
    """Freeze the sandbox's controllers (the HPA controller syncs every 15 s in a real cluster: this is the
    moment between another team's edit and that sync). The API server keeps answering."""
    kube._stop.set()
    if kube._thread is not None:
        kube._thread.join(timeout=5)
