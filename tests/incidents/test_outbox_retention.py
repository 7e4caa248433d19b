"""Left running for a year: the outbox's markers (one per proposal event) go once their events are past the
outbox's horizon, and the events they marked are never announced again."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.models import Pool
from incidents import tasks
from incidents.models import Channel, DispatchedEvent, Notification
from incidents.services import OUTBOX_HORIZON
from scaling.models import ProposalEvent

from tests.incidents.conftest import Receiver, propose


def test_the_sweep_deletes_markers_past_the_horizon_and_announces_nothing_again(
        pool: Pool, alice: User, slack_channel: Channel, receiver: Receiver) -> None:
    old = propose(pool, alice)
    tasks.sweep_outbox()
    long_ago = timezone.now() - OUTBOX_HORIZON - timedelta(hours=1)
    ProposalEvent.objects.filter(proposal=old).update(at=long_ago)
    DispatchedEvent.objects.filter(event__proposal=old).update(at=long_ago)
    recent = propose(pool, alice, target=6)  # supersedes the old one: both get events now
    tasks.sweep_outbox()
    sent = Notification.objects.count()
    tasks.sweep_outbox()
    assert not DispatchedEvent.objects.filter(event__at__lt=timezone.now() - OUTBOX_HORIZON).exists()
    assert DispatchedEvent.objects.filter(event__proposal=recent).exists()
    assert ProposalEvent.objects.filter(proposal=old, at=long_ago).exists()  # the timeline keeps its events
    assert Notification.objects.count() == sent  # nothing announced twice
