"""Slack retrying while the first delivery is still in flight, and two outbox workers: once each."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane.models import AuditEvent, Pool
from incidents import services
from incidents.choices import NotificationState
from incidents.models import Channel, Notification, SlackInteraction
from scaling.choices import ProposalState

from tests.concurrency import race
from tests.incidents.conftest import Receiver, click_payload, link, propose, signed_post

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_same_click_delivered_five_times_at_once_approves_and_executes_once(
    pool: Pool, alice: User, bob: User, slack_channel: Channel, receiver: Receiver,
) -> None:
    link(bob, "UBOB")
    proposal = propose(pool, alice)
    payload = click_payload(proposal, slack_channel, "UBOB", receiver.url("/actions/race"))
    answers = race(lambda: signed_post(Client(), payload).status_code, threads=5)
    assert answers == [200] * 5
    assert list(proposal.events.filter(from_state=ProposalState.PENDING).values_list("to_state", flat=True)) == ["approved"]
    assert proposal.events.filter(to_state=ProposalState.EXECUTING).count() == 1
    assert AuditEvent.objects.filter(action="approved", channel="slack").count() == 1
    assert SlackInteraction.objects.count() == 1


def test_two_workers_deliver_a_notification_once(pool: Pool, alice: User, slack_channel: Channel,
                                                 receiver: Receiver) -> None:
    propose(pool, alice)  # committed, so the post went out at once
    assert len(receiver.requests) == 1
    # As if that send had never happened: the notification is pending and due again.
    Notification.objects.update(state=NotificationState.PENDING, attempts=0, next_attempt_at=timezone.now())
    notification_id = Notification.objects.get().pk
    receiver.delay_s = 0.2  # a slow Slack: the other workers arrive while the first is sending
    deliveries = race(lambda: services.deliver(notification_id))
    assert len([delivery for delivery in deliveries if delivery is not None]) == 1
    assert len(receiver.requests) == 2 and Notification.objects.get().attempts == 1


def test_six_workers_fanning_out_traffic_events_announce_each_once(pool: Pool, slack_channel: Channel) -> None:
    from incidents import traffic_notify
    from scaling import breakers
    from scaling.engine.breakers import WindowCounts

    from tests.incidents.test_traffic_notify import Pods

    breakers.evaluate(pool, {f"chat-{n}": WindowCounts(200, 30) for n in range(2)}, timezone.now(), Pods())
    created = race(traffic_notify.fan_out)
    ids = [pk for batch in created for pk in batch]
    # Two endpoints and the pool tripped: three sentences, each written by exactly one worker.
    assert len(ids) == len(set(ids)) == 3 == Notification.objects.count()
    assert len(set(Notification.objects.values_list("text", flat=True))) == 3
