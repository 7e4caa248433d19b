"""A playbook's pre-scale must not withdraw a larger pre-scale that someone already approved (or that
waits, larger, for a person). `scaling.propose` supersedes the pool's older pre-scales that are pending or
approved; the control loop guards against this ("nothing when an active one already asks for it",
`scaling/loop.py` `act()`), the playbook step did not: one click on Run replaced an approved 8-replica
pre-scale by a pending 6-replica one, so the approved capacity was never written."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool
from incidents import playbooks
from incidents.models import Incident
from scaling import services as scaling
from scaling.choices import ProposalKind, ProposalState
from scaling.models import Proposal

from tests.incidents.test_incidents import fire_ttft_p95

pytestmark = pytest.mark.django_db


@pytest.fixture
def incident(pool: Pool) -> Incident:
    fire_ttft_p95(pool)  # the loop last read 4 req/s: warm pool 4, + 50 %: 6 replicas
    return Incident.objects.get()


def _run_prescale(pool: Pool, incident: Incident, user: User) -> playbooks.PlaybookRunStep:
    playbook = playbooks.save(core.Actor(user, ActorChannel.API), pool.team, "surge",
                              steps=[playbooks.StepSpec("Pre-scale", "prescale", {"buffer": 0.5})])
    run = playbooks.start_run(incident, playbook, core.Actor(user, ActorChannel.WEB))
    return playbooks.run_step(run.pk, 1, core.Actor(user, ActorChannel.WEB))


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "pending"])
def test_running_a_prescale_step_keeps_a_larger_prescale_in_flight(pool: Pool, alice: User, bob: User,
                                                                   incident: Incident, approved: bool) -> None:
    larger = scaling.propose(pool, 8, ProposalKind.PRESCALE, core.Actor(alice, ActorChannel.API), current=1)
    if approved:
        scaling.approve(larger.pk, core.Actor(bob, ActorChannel.SLACK))
    step = _run_prescale(pool, incident, alice)
    larger.refresh_from_db()
    assert larger.state == (ProposalState.APPROVED if approved else ProposalState.PENDING)
    # The step follows the pre-scale that already covers it instead of making a smaller one.
    assert step.proposal_id == larger.pk and Proposal.objects.count() == 1
    assert step.state == ("running" if approved else "waiting_approval")


def test_a_smaller_prescale_in_flight_is_still_replaced(pool: Pool, alice: User, incident: Incident) -> None:
    smaller = scaling.propose(pool, 2, ProposalKind.PRESCALE, core.Actor(alice, ActorChannel.API), current=1)
    step = _run_prescale(pool, incident, alice)
    smaller.refresh_from_db()
    assert smaller.state == ProposalState.SUPERSEDED
    assert step.proposal.target_replicas == 6 and step.state == "waiting_approval"


def test_a_step_whose_proposal_an_edit_superseded_says_why(pool: Pool, alice: User, incident: Incident) -> None:
    step = _run_prescale(pool, incident, alice)
    assert step.proposal.target_replicas == 6
    edited = Pool.objects.get(pk=pool.pk)
    edited.max_replicas = 4  # an admin lowers the ceiling: the pending 6 no longer fits
    edited.save()
    playbooks.refresh(step.run)
    step.refresh_from_db()
    assert step.state == "failed"
    assert step.reason.startswith(f"proposal #{step.proposal_id} superseded: the pool's replicas are now bounded to")
