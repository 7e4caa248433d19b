"""Chaos: the Kubernetes API (the sandbox's emulator, through the official client) times out while Headroom
scales. A write whose answer never came may still have landed: the retry re-reads the Deployment and does
not apply it twice. An API that keeps timing out ends in a clear failure after bounded, backed-off retries,
and the failure reaches the team's channel."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.utils import timezone
from kubernetes import client

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import AuditEvent, Pool
from incidents import services as notifications
from incidents.models import Channel
from sandbox.kube.cluster import SandboxCluster
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.models import Proposal

from tests.incidents.conftest import Receiver
from tests.scaling.conftest import NS

HOOK = "/services/T1/B1/hook"
CLIENT_TIMEOUT_S = 0.5


def _deployment(kube: SandboxCluster) -> client.V1Scale:
    api = client.AppsV1Api(client.ApiClient(client.Configuration(host=kube.url)))
    return api.read_namespaced_deployment_scale("vllm-chat-8b", NS)


def _attempt(pk: int, driver: KubernetesDriver, now: datetime) -> Proposal | None:
    """One worker's attempt at `now`: claim the execution (lease or backoff permitting), then write."""
    claimed = services.claim_execution(pk, now=now)
    return None if claimed is None else services.apply_change(claimed, driver, now=now)


def _approved(pool: Pool, alice: User, bob: User, target: int) -> int:
    proposal = services.propose(pool, target, ProposalKind.MANUAL, core.Actor(alice, ActorChannel.API), current=1)
    services.approve(proposal.pk, core.Actor(bob, ActorChannel.API))
    return proposal.pk


def test_a_write_that_landed_but_timed_out_is_not_applied_twice(kube_pool: Pool, alice: User, bob: User,
                                                                 kube: SandboxCluster) -> None:
    driver = KubernetesDriver(kube.url, timeout_s=CLIENT_TIMEOUT_S)
    pk = _approved(kube_pool, alice, bob, target=3)
    kube.api.faults.late_write_answer_s = 3 * CLIENT_TIMEOUT_S
    first = _attempt(pk, driver, timezone.now())
    # The client gave up on the answer: not failed, retried after a backoff; the write itself landed.
    assert first.state == ProposalState.EXECUTING and first.applied_at is None
    assert "next try in" in first.last_error and "timed out" in first.last_error.lower(), first.last_error
    landed = _deployment(kube)
    assert landed.spec.replicas == 3
    kube.api.faults.late_write_answer_s = 0
    retried = _attempt(pk, driver, timezone.now() + timedelta(minutes=5))
    assert retried.applied_at is not None and retried.events.last().data["wrote"] is False  # seen, not re-applied
    assert _deployment(kube).spec.replicas == 3
    assert AuditEvent.objects.filter(action="scale", object_id=str(pk)).count() == 1


def test_an_api_that_keeps_timing_out_fails_clearly_after_bounded_retries_and_says_so(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster, slack_channel: Channel,
        receiver: Receiver) -> None:
    driver = KubernetesDriver(kube.url, timeout_s=CLIENT_TIMEOUT_S)
    pk = _approved(kube_pool, alice, bob, target=4)
    kube.api.faults.latency_s = 3 * CLIENT_TIMEOUT_S  # every request, reads included, answers too late
    now, waits = timezone.now(), []
    for _ in range(django_settings.EXECUTION_MAX_ATTEMPTS):
        proposal = _attempt(pk, driver, now)
        assert proposal is not None, "an execution whose backoff ran out was not picked up"
        if proposal.state == ProposalState.FAILED:
            break
        waits.append((proposal.lease_until - now).total_seconds())
        now = proposal.lease_until + timedelta(seconds=1)
    assert proposal.state == ProposalState.FAILED, proposal.last_error
    assert proposal.attempts == django_settings.EXECUTION_MAX_ATTEMPTS and "gave up after" in proposal.last_error
    assert waits[-1] > 4 * waits[0] and max(waits) <= 120  # backed off, growing, capped
    kube.api.faults.latency_s = 0
    assert _deployment(kube).spec.replicas == 1  # nothing half-applied
    # The failure reaches the channel, once.
    notifications.fan_out(now)
    for notification in notifications.due_notifications(now):
        notifications.deliver(notification, now)
    texts = [json.dumps(request.json()) for request in receiver.at(HOOK)]
    assert sum("fail" in text.lower() and f"#{pk}" in text for text in texts) == 1, texts
