"""The story's director (sandbox/story.py): one line per event, told once, with the state a reader needs."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Cluster, Pool
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.models import Proposal
from sandbox.story import Director

from tests.core.conftest import cluster, ml_team, pool  # noqa: F401

pytestmark = pytest.mark.django_db
PLANNER = core.Actor(None, Channel.AUTO)


@pytest.fixture
def story_pool(pool: Pool, cluster: Cluster) -> Pool:  # noqa: F811
    Cluster.objects.filter(pk=cluster.pk).update(name="sandbox")
    return pool


def test_a_policy_approved_scale_up_is_told_once_decided_not_while_it_is_stored(story_pool: Pool) -> None:
    said: list[str] = []
    director = Director("chat-8b", "chat-1b-fallback", speed=4.0, say=said.append)
    proposal = Proposal.objects.create(pool=story_pool, kind=ProposalKind.REACTIVE, current_replicas=1,
                                       target_replicas=4, state=ProposalState.PENDING, requested_channel=Channel.AUTO,
                                       idempotency_key="r1", expires_at=timezone.now() + timedelta(minutes=10))
    director.step()  # between the proposal and the policy's approval: nothing to tell yet
    assert not [line for line in said if "safety net" in line]
    Proposal.objects.filter(pk=proposal.pk).update(state=ProposalState.EXECUTING, decided_channel=Channel.AUTO,
                                                   decided_at=timezone.now())
    director.step()
    director.step()
    told = [line for line in said if "safety net" in line]
    assert len(told) == 1 and f"reactive scale-up #{proposal.pk} 1 → 4 (approved by policy)" in told[0]
    assert told[0].startswith("[story 00:0")


def test_a_pre_scale_is_told_as_waiting_in_the_inbox_and_a_stuck_scale_up_as_waiting_for_a_person(
        story_pool: Pool) -> None:
    said: list[str] = []
    director = Director("chat-8b", "chat-1b-fallback", speed=4.0, say=said.append)
    prescale = services.propose(story_pool, 6, ProposalKind.PRESCALE, PLANNER, current=1, reasons=[
        {"code": "PreScaleProposed", "detail": "forecast peak 120.00 req/s is 4.4x the current 8.00 req/s within 30 min: "
                                               "warm pool 5 + 50 % buffer"}])
    stuck = Proposal.objects.create(pool=story_pool, kind=ProposalKind.REACTIVE, current_replicas=4, target_replicas=9,
                                    state=ProposalState.PENDING, requested_channel=Channel.AUTO,
                                    idempotency_key="r2", expires_at=timezone.now() + timedelta(minutes=10))
    Proposal.objects.filter(pk=stuck.pk).update(created_at=timezone.now() - timedelta(seconds=30))
    director.step()
    assert any(f"pre-scale proposal #{prescale.pk} (1 → 6) waits in the inbox" in line and "4.4x" in line
               for line in said)
    assert any(f"scale-up #{stuck.pk} 4 → 9 (waits for a person in the inbox)" in line for line in said)


@pytest.mark.parametrize("incident", [True, False], ids=["an incident opened", "none opened"])
def test_when_calm_returns_the_story_says_whether_the_surge_opened_an_incident(
        story_pool: Pool, monkeypatch: pytest.MonkeyPatch, incident: bool) -> None:
    """Whether an alert rule holds through the surge depends on when the first tick sees its onset: the story
    tells either outcome, once, before the report."""
    import time

    from incidents.models import Incident
    from sandbox.story import REPORT_AT_S
    from scaling import report_service
    from scaling.models import WarmPoolReport

    def requested(for_pool: Pool, *args, **kwargs) -> WarmPoolReport:  # noqa: ANN002, ANN003 - the replay is not the point
        return WarmPoolReport.objects.create(pool=for_pool, days=0.25, requested_channel=Channel.AUTO)

    monkeypatch.setattr(report_service, "request_report", requested)
    said: list[str] = []
    director = Director(story_pool.name, "chat-1b-fallback", speed=4.0, say=said.append,
                        started=time.time() - REPORT_AT_S / 4.0 - 1.0)  # calm again
    if incident:
        Incident.objects.create(pool=story_pool, team=story_pool.team, cluster=story_pool.cluster, severity="P0",
                                title="Time to first token p99 above 5 s", opened_at=timezone.now())
    director.step()
    quiet = [line for line in said if "without an incident" in line]
    assert len([line for line in said if "calm again: warm-pool report #" in line]) == 1
    assert len([line for line in said if "opened:" in line]) == (1 if incident else 0)
    assert len(quiet) == (0 if incident else 1)
