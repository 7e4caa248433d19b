"""Two workers and a double click, on real PostgreSQL connections: one approval, one execution."""
from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from sandbox.kube.cluster import SandboxCluster
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.models import Proposal

from tests.concurrency import race

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_double_click_approves_once(pool: Pool, alice: User, bob: User) -> None:
    proposal = services.propose(pool, 4, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1)
    results = race(lambda: services.approve(proposal.pk, core.Actor(bob, Channel.WEB)))
    approvals = [result for result in results if isinstance(result, Proposal)]
    conflicts = [result for result in results if isinstance(result, services.ProposalConflict)]
    assert len(approvals) == 1 and len(conflicts) == len(results) - 1
    assert Proposal.objects.get(pk=proposal.pk).events.filter(to_state="approved").count() == 1


def test_concurrent_proposals_leave_one_pending(pool: Pool, alice: User) -> None:
    counter = iter(range(2, 8))
    lock = threading.Lock()

    def propose() -> Proposal:
        with lock:
            target = next(counter)
        return services.propose(pool, target, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)

    results = race(propose)
    assert all(isinstance(result, Proposal) for result in results), results
    assert Proposal.objects.filter(pool=pool, state=ProposalState.PENDING).count() == 1
    assert Proposal.objects.filter(pool=pool, state=ProposalState.SUPERSEDED).count() == 5


def test_workers_racing_to_execute_write_once(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    proposal = services.propose(kube_pool, 3, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1)
    Proposal.objects.filter(pk=proposal.pk).update(state=ProposalState.APPROVED)  # approved, execution queued
    results = race(lambda: services.execute(proposal.pk, KubernetesDriver(kube.url)))
    executed = [result for result in results if isinstance(result, Proposal)]
    assert len(executed) == 1 and results.count(None) == len(results) - 1, results
    assert AuditEvent.objects.filter(action="scale", object_id=str(proposal.pk)).count() == 1
    assert Proposal.objects.get(pk=proposal.pk).attempts == 1
