"""Slack and webhook receivers that answer, but not "ok": a refusal inside a 200, a rate limit with its
Retry-After. Nothing refused counts as delivered, a broken address stops its channel with the receiver's
reason on the channels page, and a receiver that said "wait" is not asked again before it said."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane.models import Pool
from incidents import outbound, services
from incidents.choices import ChannelKind, NotificationState
from incidents.models import Channel, Notification

from tests.incidents.conftest import Receiver, propose

HOOK = "/services/T1/B1/hook"


def send_all() -> list:
    services.fan_out()
    return [services.deliver(pk) for pk in services.due_notifications()]


@pytest.mark.parametrize("error", ["channel_not_found", "invalid_auth"])
def test_a_refusal_inside_a_200_is_no_delivery_and_stops_the_channel(pool: Pool, alice: User, receiver: Receiver,
                                                                      slack_channel: Channel, error: str) -> None:
    receiver.answers[HOOK] = (200, f'{{"ok": false, "error": "{error}"}}'.encode(), {"Content-Type": "application/json"})
    propose(pool, alice)
    [delivery] = send_all()
    assert delivery.state == NotificationState.FAILED and error in delivery.error
    slack_channel.refresh_from_db()
    assert not slack_channel.enabled and error in slack_channel.disabled_reason and slack_channel.last_delivered_at is None
    client = Client()
    client.force_login(alice)
    assert f"Slack answered 200 but refused the message: {error}" in client.get("/integrations/channels/").content.decode()


def test_a_rate_limit_inside_a_200_is_retried_after_the_wait_asked(pool: Pool, alice: User, receiver: Receiver,
                                                                    slack_channel: Channel) -> None:
    receiver.answers[HOOK] = (200, b'{"ok": false, "error": "ratelimited"}', {"Retry-After": "120"})
    propose(pool, alice)
    before = timezone.now()
    [delivery] = send_all()
    notification = Notification.objects.get(pk=delivery.notification_id)
    assert notification.state == NotificationState.PENDING and "ratelimited" in notification.last_error
    assert notification.next_attempt_at >= before + timedelta(seconds=120)
    slack_channel.refresh_from_db()
    assert slack_channel.enabled  # slowed down, not broken


def test_a_429_holds_the_channels_backlog_until_its_retry_after(pool: Pool, alice: User, receiver: Receiver,
                                                                 slack_channel: Channel) -> None:
    receiver.answers[HOOK] = (429, b"rate_limited", {"Retry-After": "600"})
    for target in (3, 4, 5):
        propose(pool, alice, target=target)
    before = timezone.now()
    send_all()
    assert len(receiver.at(HOOK)) == 1  # one knock on the limit, not one per message waiting
    pending = Notification.objects.filter(channel=slack_channel, state=NotificationState.PENDING)
    assert pending.count() >= 3 and all(n.next_attempt_at >= before + timedelta(seconds=600) for n in pending)
    assert "the receiver asked to wait 600 s" in Notification.objects.get(attempts=1).last_error
    assert services.due_notifications(before + timedelta(seconds=599)) == []
    receiver.answers[HOOK] = (200, b"ok", {})  # the limit lifts: the backlog goes out, once each
    later = before + timedelta(seconds=601)
    for pk in services.due_notifications(later):
        services.deliver(pk, later)
    assert not pending.all().exists() and Notification.objects.filter(state=NotificationState.DELIVERED).count() == 3
    assert len(receiver.at(HOOK)) == 1 + 3  # the three posts (the edits wait for a response_url)


def test_a_webhooks_retry_after_as_a_date_is_honoured(pool: Pool, alice: User, receiver: Receiver,
                                                       allow_loopback: None) -> None:
    Channel.objects.create(team=pool.team, name="pager", kind=ChannelKind.WEBHOOK,
                           settings={"url": receiver.url("/pager"), "secret": "whsec-0123456789abcdef"})
    when = timezone.now() + timedelta(minutes=20)
    receiver.answers["/pager"] = (503, b"busy", {"Retry-After": when.strftime("%a, %d %b %Y %H:%M:%S GMT")})
    propose(pool, alice)
    [delivery] = send_all()
    notification = Notification.objects.get(pk=delivery.notification_id)
    assert notification.state == NotificationState.PENDING
    assert notification.next_attempt_at >= when - timedelta(seconds=2)


@pytest.mark.parametrize(("header", "seconds"), [("120", 120.0), (None, None), ("soon", None), ("", None),
                                                 ("Thu, 01 Jan 1970 00:00:10 GMT", 0.0)])
def test_it_reads_retry_after(header: str | None, seconds: float | None) -> None:
    assert outbound.retry_after(header, now=100.0) == seconds
