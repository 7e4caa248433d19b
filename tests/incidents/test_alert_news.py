"""An alert's messages as its receivers hear them: never "firing" last for an alert that is over, and never
from a drill. Each case ended on a stale "firing" (or paged the team) before `services._resolved_before_sent`,
the resolve only to channels that heard the firing, and drills kept out of the alert rules."""
from __future__ import annotations

import dataclasses
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool
from incidents import alerts, drills, playbooks, rules, services
from incidents.choices import ChannelKind, NotificationKind, NotificationState, PlaybookStepKind
from incidents.models import Alert, Channel, Notification

from tests.incidents.test_alerts import T0, tick


@pytest.fixture
def no_resolve_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cases about a message racing its alert's resolve within a retry's 30 s: the outage rule resolves at its
    first clear reading (its 2-minute resolve hold would outlast the race)."""
    monkeypatch.setattr(rules, "OUTAGE", dataclasses.replace(rules.OUTAGE, keep_firing_for_s=0.0))


def _evaluate_and_send(pool: Pool, at, **signals) -> None:  # noqa: ANN001
    tick(pool, at, **signals)
    for pk in alerts.evaluate_alerts([pool], at).notifications:  # what the on-commit deliver task does
        services.deliver(pk, at)


def _pager(ml_team, receiver) -> Channel:  # noqa: ANN001
    return Channel.objects.create(team=ml_team, name="pager", kind=ChannelKind.WEBHOOK,
                                  settings={"url": receiver.url("/hook"), "secret": "s" * 32})


def _accepted(receiver, refused: int = 0) -> list[str]:  # noqa: ANN001
    """The events the receiver took: all but its first `refused` answers (a 503 is a message it did not take)."""
    return [r.headers["X-Headroom-Event"] for r in receiver.at("/hook")][refused:]


def test_a_firing_message_still_waiting_when_the_alert_resolves_is_not_sent_after_it(
        pool: Pool, ml_team, receiver, allow_loopback, no_resolve_hold) -> None:  # noqa: ANN001
    _pager(ml_team, receiver)
    receiver.answers["/hook"] = [(503, b"busy", {}), (200, b"ok", {})]  # one hiccup, then fine
    _evaluate_and_send(pool, T0, ready_replicas=0.0, request_rate_rps=3.0)  # the outage is pending
    _evaluate_and_send(pool, T0 + timedelta(seconds=30), ready_replicas=0.0, request_rate_rps=3.0)  # fires: 503
    firing = Notification.objects.get(kind=NotificationKind.ALERT_FIRING)
    assert firing.state == NotificationState.PENDING  # its retry waits 30 s
    _evaluate_and_send(pool, T0 + timedelta(seconds=45))  # healthy again: resolved before the retry
    later = T0 + timedelta(minutes=5)
    for pk in services.due_notifications(later):
        services.deliver(pk, later)
    firing.refresh_from_db()
    assert firing.state == NotificationState.SKIPPED and "resolved before" in firing.last_error
    # Before: resolved, then the retried firing, and the receiver stayed on "firing" for an alert that was over.
    assert _accepted(receiver, refused=1) == []
    assert not Notification.objects.filter(kind=NotificationKind.ALERT_RESOLVED).exists()


def test_a_channel_switched_back_on_gets_no_stale_firing(pool: Pool, ml_team, alice: User, receiver,
                                                        allow_loopback) -> None:  # noqa: ANN001
    channel = _pager(ml_team, receiver)
    receiver.answers["/hook"] = [(503, b"busy", {}), (200, b"ok", {})]
    _evaluate_and_send(pool, T0, ready_replicas=0.0, request_rate_rps=3.0)
    _evaluate_and_send(pool, T0 + timedelta(seconds=30), ready_replicas=0.0, request_rate_rps=3.0)  # fires: 503
    services.disable_channel(channel, "another message's 404")
    _evaluate_and_send(pool, T0 + timedelta(seconds=45))
    _evaluate_and_send(pool, T0 + timedelta(seconds=165))  # resolves (2 minutes clear) while the channel is off
    services.enable_channel(Channel.objects.get(pk=channel.pk), core.Actor(alice, ActorChannel.WEB))
    later = T0 + timedelta(hours=2)
    for pk in services.due_notifications(later):
        services.deliver(pk, later)
    assert _accepted(receiver, refused=1) == []  # before: the stale firing alone, and never its resolve


def test_a_firing_delivered_while_its_alert_resolved_is_followed_by_the_resolve(
        pool: Pool, ml_team, receiver, allow_loopback, no_resolve_hold) -> None:  # noqa: ANN001
    _pager(ml_team, receiver)
    _evaluate_and_send(pool, T0, ready_replicas=0.0, request_rate_rps=3.0)
    tick(pool, T0 + timedelta(seconds=30), ready_replicas=0.0, request_rate_rps=3.0)
    fired = alerts.evaluate_alerts([pool], T0 + timedelta(seconds=30)).notifications  # queued, not sent yet
    claimed = services._claim(fired[0], T0 + timedelta(seconds=30))  # a worker takes it...
    _evaluate_and_send(pool, T0 + timedelta(seconds=45))  # ...the alert resolves meanwhile: nobody heard it fire
    assert not Notification.objects.filter(kind=NotificationKind.ALERT_RESOLVED).exists()
    services.transport_for(claimed.channel).notify(claimed)  # the worker's send lands
    services._finish(claimed, NotificationState.DELIVERED)
    alerts.resolve_after_late_firing(claimed, T0 + timedelta(seconds=46))
    resolved = Notification.objects.get(kind=NotificationKind.ALERT_RESOLVED)
    services.deliver(resolved.pk, T0 + timedelta(seconds=46))
    assert _accepted(receiver) == ["alert.firing", "alert.resolved"]


def test_a_drill_never_pages_the_team(pool: Pool, ml_team, alice: User, slack_channel: Channel) -> None:  # noqa: ANN001
    book = playbooks.save(core.Actor(alice, ActorChannel.WEB), ml_team, "surge",
                          steps=[playbooks.StepSpec("look", PlaybookStepKind.CHECKLIST)])
    signals = {"rate_rps": 4.5, "queue_depth": 3.0, "ttft_p95_s": 0.6, "error_rate": 0.45, "ready": 2, "desired": 2}
    drills._open(pool, book, SimpleNamespace(name="dead-endpoint"), signals, T0)  # the drill's first bad tick
    for seconds in range(0, 181, 15):  # the drill ticks on; the beat evaluates every pool every 15 s
        now = T0 + timedelta(seconds=seconds)
        drills._record_signals(pool, signals, now)
        alerts.evaluate_alerts(now=now)
        alerts.evaluate_heartbeats(now + timedelta(minutes=10))  # and the drill's cluster stops ticking after it
    # Before: a P0 error-rate alert for the drill's 45 % errors, queued to the team's on-call channel.
    assert not Alert.objects.exists() and not Notification.objects.exists()
