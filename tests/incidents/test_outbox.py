"""The notification outbox: written first, delivered with backoff, never lost, never repeated."""
from __future__ import annotations

import json
from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.models import Cluster, Pool
from incidents import services
from incidents.choices import ChannelKind, NotificationKind, NotificationState
from incidents.models import Channel, Notification
from scaling import services as scaling
from scaling.choices import ProposalState
from scaling.models import Proposal

from tests.incidents.conftest import Receiver, propose
from tests.isolation import closed_port

HOOK = "/services/T1/B1/hook"


def _deliver_all(now=None) -> list[services.Delivery]:  # noqa: ANN001
    services.fan_out(now)
    return [services.deliver(pk, now) for pk in services.due_notifications(now)]


def test_a_pending_proposal_posts_its_evidence_with_buttons(pool: Pool, cluster: Cluster, alice: User,
                                                            slack_channel: Channel, receiver: Receiver) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(gpu_prices={"H100": {"on_demand": 4.0}})
    proposal = propose(pool, alice)
    [delivery] = _deliver_all()
    assert delivery.state == NotificationState.DELIVERED
    [posted] = receiver.at(HOOK)
    message = posted.json()
    text = json.dumps(message, ensure_ascii=False)
    assert message["text"].startswith(f"Pre-scale (forecast) #{proposal.pk} for gpu-us-east/chat-8b: 1 → 4 replicas")
    assert [block["type"] for block in message["blocks"]] == ["header", "section", "context", "actions"]
    for fact in ("1 → *4* replicas", "*12.00 USD/h* on demand", "peak 310 req/s (upper quantile) against 90 req/s",
                 "3.4x the current load", "Waiting for approval · expires <!date^", "standard tier"):
        assert fact in text, fact
    assert Channel.objects.get(pk=slack_channel.pk).last_delivered_at is not None


def test_slack_down_keeps_the_message_and_delivers_it_later(pool: Pool, alice: User, slack_channel: Channel,
                                                            receiver: Receiver) -> None:
    receiver.answers[HOOK] = [(503, b"service unavailable", {}), (200, b"ok", {})]
    propose(pool, alice)
    now = timezone.now()
    [first] = _deliver_all(now)
    notification = Notification.objects.get()
    assert (first.state, notification.attempts) == (NotificationState.PENDING, 1)
    assert "Slack answered 503" in notification.last_error and notification.next_attempt_at >= now + timedelta(seconds=30)
    assert _deliver_all(now + timedelta(seconds=10)) == []  # still backing off
    [later] = _deliver_all(now + timedelta(seconds=31))
    assert later.state == NotificationState.DELIVERED
    assert len(receiver.at(HOOK)) == 2 and Notification.objects.get().attempts == 2
    assert Channel.objects.get(pk=slack_channel.pk).enabled


def test_an_unreachable_receiver_is_retried_with_growing_backoff_then_given_up(settings, pool: Pool, alice: User,
                                                                                slack_channel: Channel) -> None:
    settings.NOTIFY_MAX_ATTEMPTS = 3
    Channel.objects.filter(pk=slack_channel.pk).update(settings={"webhook_url": f"http://127.0.0.1:{closed_port()}/closed"})
    propose(pool, alice)
    now = timezone.now()
    gaps = []
    for _ in range(3):
        [delivery] = _deliver_all(now)
        notification = Notification.objects.get()
        gaps.append(round((notification.next_attempt_at - now).total_seconds()))
        now = notification.next_attempt_at
    assert delivery.state == NotificationState.FAILED and "ConnectionError" in delivery.error
    assert gaps[:2] == [30, 60]
    channel = Channel.objects.get(pk=slack_channel.pk)
    assert channel.enabled and "ConnectionError" in channel.last_error  # a down receiver is not a broken channel


def test_no_service_disables_the_channel_and_the_page_says_why(client, pool: Pool, alice: User, bob: User,  # noqa: ANN001
                                                               slack_channel: Channel, receiver: Receiver) -> None:
    receiver.answers[HOOK] = (404, b"no_service", {})
    propose(pool, alice)
    [delivery] = _deliver_all()
    channel = Channel.objects.get(pk=slack_channel.pk)
    assert delivery.state == NotificationState.FAILED
    assert not channel.enabled and channel.disabled_reason == "Slack answered 404 no_service"
    client.force_login(alice)
    page = client.get("/integrations/channels/").content.decode()
    assert "disabled" in page and "Slack answered 404 no_service" in page and "Switch back on" not in page
    proposal = Proposal.objects.get()
    scaling.reject(proposal.pk, scaling.core.Actor(bob, "web"))
    assert services.fan_out() == [] and Notification.objects.count() == 1  # nothing more for a disabled channel
    client.force_login(bob)
    assert "Switch back on" in client.get("/integrations/channels/").content.decode()
    assert client.post(f"/integrations/channels/{channel.pk}/enable/").status_code == 302
    assert Channel.objects.get(pk=channel.pk).enabled


def test_a_channel_pointing_inside_the_network_is_refused_when_sending(pool: Pool, alice: User, slack_channel: Channel,
                                                                       settings) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    propose(pool, alice)
    [delivery] = _deliver_all()
    channel = Channel.objects.get(pk=slack_channel.pk)
    assert delivery.state == NotificationState.FAILED and not channel.enabled
    assert "127.0.0.1 is a loopback address" in channel.disabled_reason


def test_quiet_rules_mute_new_messages_for_their_tier(pool: Pool, alice: User, slack_channel: Channel,
                                                     receiver: Receiver) -> None:
    Channel.objects.filter(pk=slack_channel.pk).update(
        settings=slack_channel.settings | {"quiet": [{"tiers": ["batch"]}]})
    Pool.objects.filter(pk=pool.pk).update(priority="batch")
    propose(pool, alice)
    assert _deliver_all() == []
    skipped = Notification.objects.get()
    assert skipped.state == NotificationState.SKIPPED and skipped.last_error == "quiet rule: batch tier"
    assert receiver.requests == []


def test_a_quiet_window_crosses_midnight(pool: Pool, slack_channel: Channel) -> None:
    from incidents.specs import QuietRule

    rule = QuietRule.parse({"tiers": ["standard"], "start": "22:00", "end": "07:00"})
    night, day = timezone.now().replace(hour=23, minute=30), timezone.now().replace(hour=12)
    assert rule.mutes("standard", night) and not rule.mutes("standard", day) and not rule.mutes("critical", night)


def test_one_reminder_before_expiry(settings, pool: Pool, alice: User, slack_channel: Channel, receiver: Receiver) -> None:  # noqa: ANN001
    settings.NOTIFY_REMINDER_BEFORE_S = 180
    proposal = propose(pool, alice)
    _deliver_all()
    almost = proposal.expires_at - timedelta(seconds=120)
    assert services.remind_due(proposal.expires_at - timedelta(minutes=5)) == []  # not yet
    first = services.remind_due(almost)
    assert len(first) == 1 and services.remind_due(almost + timedelta(seconds=60)) == []  # once
    assert services.deliver(first[0], almost).state == NotificationState.DELIVERED
    reminder = receiver.at(HOOK)[-1].json()
    assert reminder["text"].startswith("Reminder:") and "Still waiting" in reminder["blocks"][0]["text"]["text"]
    assert any(block["type"] == "actions" for block in reminder["blocks"])
    assert len(receiver.at(HOOK)) == 2


def test_no_reminder_once_decided(pool: Pool, alice: User, bob: User, slack_channel: Channel, receiver: Receiver) -> None:
    proposal = propose(pool, alice)
    _deliver_all()
    scaling.reject(proposal.pk, scaling.core.Actor(bob, "web"))
    assert services.remind_due(proposal.expires_at - timedelta(seconds=60)) == []


def test_a_switched_off_integration_records_its_messages_as_skipped(settings, pool: Pool, alice: User,  # noqa: ANN001
                                                                    slack_channel: Channel, receiver: Receiver) -> None:
    settings.SLACK_ENABLED = False
    propose(pool, alice)
    assert _deliver_all() == []
    assert Notification.objects.get().last_error == "the Slack incoming webhook integration is switched off"
    assert receiver.requests == []


def test_fan_out_takes_each_event_once(pool: Pool, alice: User, bob: User, slack_channel: Channel) -> None:
    proposal = propose(pool, alice)
    assert len(services.fan_out()) == 1
    assert services.fan_out() == []
    scaling.reject(proposal.pk, scaling.core.Actor(bob, "web"))
    services.fan_out()
    kinds = sorted(Notification.objects.values_list("kind", flat=True))
    assert kinds == [NotificationKind.POST, NotificationKind.UPDATE]
    assert Proposal.objects.get().state == ProposalState.REJECTED


def test_slack_updates_wait_for_a_response_url(pool: Pool, alice: User, bob: User, slack_channel: Channel,
                                               receiver: Receiver) -> None:
    proposal = propose(pool, alice)
    _deliver_all()
    scaling.reject(proposal.pk, scaling.core.Actor(bob, "web"))
    [update] = _deliver_all()
    assert update.state == NotificationState.SKIPPED and "no response_url yet" in update.error
    assert len(receiver.requests) == 1


def test_channels_of_other_teams_hear_nothing(pool: Pool, alice: User, search_team, receiver: Receiver,  # noqa: ANN001
                                              allow_loopback: None) -> None:
    Channel.objects.create(team=search_team, name="search", kind=ChannelKind.SLACK,
                           settings={"webhook_url": receiver.url("/search")})
    propose(pool, alice)
    assert _deliver_all() == [] and receiver.requests == []


def test_quiet_rules_never_hold_back_the_edit_of_a_posted_message(pool: Pool, alice: User, slack_channel: Channel) -> None:
    proposal = propose(pool, alice)
    _deliver_all()
    Channel.objects.filter(pk=slack_channel.pk).update(
        settings=slack_channel.settings | {"quiet": [{"tiers": ["standard"]}]})
    channel = Channel.objects.get(pk=slack_channel.pk)
    update = services.enqueue(channel, proposal, NotificationKind.UPDATE, timezone.now())
    reminder = services.enqueue(channel, proposal, NotificationKind.REMINDER, timezone.now())
    assert (update.state, reminder.state) == (NotificationState.PENDING, NotificationState.SKIPPED)
