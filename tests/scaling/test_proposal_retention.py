"""Finished proposals are kept PROPOSAL_RETENTION_DAYS when set (0, the default, keeps every one): the tick
deletes older ones with their events and notifications, a batch at a time, oldest first, and never one an
incident's timeline shows, a playbook run made, or one still active."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from controlplane.choices import Channel
from controlplane.models import Pool
from incidents.models import Channel as NotifyChannel, Incident, Notification, Playbook, PlaybookRun, PlaybookRunStep
from scaling import loop
from scaling.choices import ProposalKind, ProposalState
from scaling.models import Proposal, ProposalEvent


def _proposal(pool: Pool, made: datetime, state: str = ProposalState.SUCCEEDED) -> Proposal:
    proposal = Proposal.objects.create(pool=pool, kind=ProposalKind.REACTIVE, state=state, current_replicas=2,
                                       target_replicas=3, idempotency_key=f"k{Proposal.objects.count()}",
                                       requested_channel=Channel.AUTO, expires_at=made + timedelta(minutes=10))
    finished = None if state == ProposalState.PENDING else made + timedelta(minutes=2)
    Proposal.objects.filter(pk=proposal.pk).update(created_at=made, finished_at=finished)
    ProposalEvent.objects.create(proposal=proposal, to_state=state, actor_name="auto:system", channel=Channel.AUTO)
    return proposal


def _ages_days(now: datetime) -> list[int]:
    return sorted(round((now - at).total_seconds() / 86400) for at in Proposal.objects.values_list("created_at", flat=True))


def test_the_tick_deletes_finished_proposals_past_the_retention_with_their_events_and_notifications(
        pool: Pool, settings) -> None:  # noqa: ANN001
    settings.PROPOSAL_RETENTION_DAYS = 30
    now = timezone.now()
    old = _proposal(pool, now - timedelta(days=40))
    channel = NotifyChannel.objects.create(team=pool.team, name="on-call", kind="webhook",
                                           settings={"url": "https://hooks.example.com/x"})
    Notification.objects.create(channel=channel, proposal=old, kind="post", state="delivered", next_attempt_at=now)
    _proposal(pool, now - timedelta(days=29))
    _proposal(pool, now - timedelta(days=45), state=ProposalState.EXECUTING)  # still active: never deleted
    loop.tick(pools=[], now=now)
    assert _ages_days(now) == [29, 45]
    assert not ProposalEvent.objects.filter(proposal_id=old.pk).exists()
    assert not Notification.objects.exists()


def test_it_keeps_what_an_incident_or_a_playbook_run_shows(pool: Pool, settings) -> None:  # noqa: ANN001
    settings.PROPOSAL_RETENTION_DAYS = 30
    now = timezone.now()
    made = now - timedelta(days=50)
    _proposal(pool, made)  # finished 3 minutes before the incident opened: on its timeline
    incident = Incident.objects.create(team=pool.team, cluster=pool.cluster, pool=pool, title="surge", severity="P0",
                                       state="resolved", opened_at=made + timedelta(minutes=5),
                                       resolved_at=made + timedelta(hours=1))
    made_by_a_step = _proposal(pool, now - timedelta(days=60))
    playbook = Playbook.objects.create(team=pool.team, name="surge")
    run = PlaybookRun.objects.create(incident=incident, playbook=playbook, playbook_name="surge",
                                     started_channel=Channel.WEB, started_at=now - timedelta(days=60))
    PlaybookRunStep.objects.create(run=run, position=1, title="pre-scale", kind="prescale", proposal=made_by_a_step)
    _proposal(pool, now - timedelta(days=70))  # long before the incident: goes
    loop.tick(pools=[], now=now)
    assert _ages_days(now) == [50, 60]


def test_zero_keeps_every_proposal_and_a_backlog_drains_oldest_first(pool: Pool, settings) -> None:  # noqa: ANN001
    now = timezone.now()
    for days in (40, 50, 60, 70):
        _proposal(pool, now - timedelta(days=days))
    settings.PROPOSAL_RETENTION_DAYS = 0
    assert loop.prune_proposals(now) == 0 and len(_ages_days(now)) == 4
    settings.PROPOSAL_RETENTION_DAYS = 30
    assert loop.prune_proposals(now, batch=2) == 2 and _ages_days(now) == [40, 50]
