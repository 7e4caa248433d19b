"""The resolve hold (a rule's `keep_firing_for_s`, Prometheus' `keep_firing_for`): a firing alert whose condition
reads OK keeps firing until it has read OK for the hold, so a condition flapping around its bar is one alert,
one page and one incident, not a page per cycle. Pure steps first, then the evaluation on the database."""
from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool
from incidents import alerts, rules
from incidents.choices import AlertState, IncidentEventKind, NotificationKind
from incidents.models import Alert, Channel, Incident, Notification

from tests.core.conftest import token_client
from tests.incidents.conftest import Receiver
from tests.incidents.test_alerts import HOOK, T0, alert_of, evaluate, states, tick

FIRING, OK, UNKNOWN = rules.FIRING, rules.OK, rules.UNKNOWN
NOW = 1_800_000_000.0
KEEP = 120.0


# --- pure: the step -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "clear_ago_s", "status", "keep_s", "expected"), [
    # clear, then resolved once clear for the hold (at the evaluation the hold ran out; clear since kept)
    (rules.FIRING, None, OK, KEEP, (None, NOW)),
    (rules.FIRING, 15.0, OK, KEEP, (None, NOW - 15.0)),
    (rules.FIRING, 119.0, OK, KEEP, (None, NOW - 119.0)),
    (rules.FIRING, 120.0, OK, KEEP, (rules.RESOLVED, NOW - 120.0)),
    (rules.FIRING, 300.0, OK, KEEP, (rules.RESOLVED, NOW - 300.0)),
    # firing again within the hold: no change, the clear time forgotten
    (rules.FIRING, 60.0, FIRING, KEEP, (None, None)),
    (rules.FIRING, None, FIRING, KEEP, (None, None)),
    # unknown during the hold: neither resolves nor restarts it, even past the hold
    (rules.FIRING, 60.0, UNKNOWN, KEEP, (None, NOW - 60.0)),
    (rules.FIRING, 300.0, UNKNOWN, KEEP, (None, NOW - 300.0)),
    (rules.FIRING, None, UNKNOWN, KEEP, (None, None)),
    # no hold: resolved at the first clear reading, as before
    (rules.FIRING, None, OK, 0.0, (rules.RESOLVED, NOW)),
    # a pending alert that clears is cleared at once, whatever the hold
    (rules.PENDING, None, OK, KEEP, (rules.CLEARED, None)),
    (rules.PENDING, None, UNKNOWN, KEEP, (None, None)),
    (None, None, OK, KEEP, (None, None)),
])
def test_it_holds_a_firing_alert_until_its_condition_stays_clear(state: str, clear_ago_s: float | None, status: str,
                                                                 keep_s: float, expected: tuple) -> None:
    clear_since = None if clear_ago_s is None else NOW - clear_ago_s
    got = rules.advance(state, NOW - 600.0, status, 60.0, NOW, keep_firing_for_s=keep_s, clear_since_s=clear_since)
    assert (got.state, got.clear_since_s) == expected


def _run(readings: list[tuple[float, str]], for_s: float = 60.0, keep_s: float = KEEP) -> list[tuple[float, str]]:
    """Every transition of one fingerprint's alerts through (time, status) readings, as `alerts._apply` steps them."""
    state, since, clear, moves = None, None, None, []
    for at, status in readings:
        got = rules.advance(state, since, status, for_s, at, keep_firing_for_s=keep_s, clear_since_s=clear)
        if state is None and got.state is not None:
            since = at
        clear = got.clear_since_s
        if got.state is not None:
            moves.append((at, got.state))
            state = None if got.state in (rules.RESOLVED, rules.CLEARED) else got.state
    return moves


def flapping(seconds: int) -> list[tuple[float, str]]:
    """75 s above the bar, 15 s below, every 15 s."""
    return [(NOW + t, FIRING if t % 90 < 75 else OK) for t in range(0, seconds, 15)]


def test_a_flapping_condition_fires_once_and_resolves_once_it_stays_clear() -> None:
    clear = [(NOW + t, OK) for t in range(600, 800, 15)]
    assert _run(flapping(600) + clear) == [(NOW, rules.PENDING), (NOW + 60, rules.FIRING), (NOW + 720, rules.RESOLVED)]
    # Without the hold: a page and a resolve every 90 s, 12 messages in 10 minutes.
    without = [state for _, state in _run(flapping(600), keep_s=0.0)]
    assert (without.count(rules.FIRING), without.count(rules.RESOLVED)) == (6, 6)


def test_an_unknown_gap_neither_restarts_nor_ends_the_hold() -> None:
    readings = [(NOW, FIRING), (NOW + 15, OK), *((NOW + t, UNKNOWN) for t in range(30, 165, 15))]
    assert _run(readings, for_s=0.0) == [(NOW, rules.FIRING)]  # past the hold, but the last reading is unknown
    assert _run([*readings, (NOW + 165, OK)], for_s=0.0) == [(NOW, rules.FIRING), (NOW + 165, rules.RESOLVED)]
    assert _run([*readings, (NOW + 165, FIRING), (NOW + 180, OK)], for_s=0.0) == [(NOW, rules.FIRING)]


def test_the_hold_follows_the_tier() -> None:
    for rule in rules.RULES.values():
        assert rule.keep_firing_for_s == (120.0 if rule.tier in (rules.P0, rules.P1) else 0.0), rule.key
    assert rules.HEARTBEAT.keep_firing_for_s == rules.BURN_FAST.rule.keep_firing_for_s == 120.0
    assert dataclasses.replace(rules.ERRORS, keep_firing_for_s=0.0).keep_firing_for_s == 0.0


def test_it_says_how_long_the_condition_has_been_clear() -> None:
    text = "0.0% of requests failing (alert above 5%)"
    assert rules.clearing_summary(text, 45.0, 120.0, resolved=False) == (
        text + "; condition clear for 45 s; resolves once clear for 2 min unless it returns")
    assert rules.clearing_summary(text, 120.0, 120.0, resolved=True) == text + "; condition clear for 2 min: resolved"


# --- on the database ------------------------------------------------------------------------------------------


def _fire_errors(pool: Pool) -> None:
    """The P0 error-rate alert: above 5 % for its minute."""
    for second in range(0, 75, 15):
        evaluate(pool, T0 + timedelta(seconds=second), error_rate=0.2)
    assert alert_of(pool, "error_rate").state == AlertState.FIRING


def _sent(kind: str) -> int:
    return Notification.objects.filter(alert__rule="error_rate", kind=kind).count()


def test_a_flapping_error_rate_pages_once_in_ten_minutes(pool: Pool, alice: User, slack_channel: Channel,
                                                         receiver: Receiver) -> None:
    """75 s above 5 %, 15 s below, for 10 minutes: before the hold, 12 messages (6 pages, 6 resolves), 6 alerts
    and, had a person resolved each incident, 6 incidents. Now one page, one alert, one incident."""
    for second in range(0, 600, 15):
        evaluate(pool, T0 + timedelta(seconds=second), error_rate=0.2 if second % 90 < 75 else 0.0)
    assert len(receiver.at(HOOK)) == 1 and _sent(NotificationKind.ALERT_FIRING) == 1
    assert _sent(NotificationKind.ALERT_RESOLVED) == 0
    assert Alert.objects.filter(pool=pool, rule="error_rate").count() == 1
    assert Incident.objects.count() == 1
    alert = alert_of(pool, "error_rate")
    assert (alert.state, alert.fired_at, alert.clear_since) == (AlertState.FIRING, T0 + timedelta(seconds=60), None)
    assert states(alert) == [("", "pending"), ("pending", "firing")]

    for second in range(600, 720, 15):  # then it stays clear: still firing for 2 minutes, saying so
        evaluate(pool, T0 + timedelta(seconds=second), error_rate=0.0)
    alert = alert_of(pool, "error_rate")
    assert (alert.state, alert.clear_since) == (AlertState.FIRING, T0 + timedelta(seconds=600))
    assert alert.summary == ("0.0% of requests failing (alert above 5%); condition clear for 105 s; "
                             "resolves once clear for 2 min unless it returns")
    assert (alert.numbers["clear_for_s"], alert.numbers["keep_firing_for_s"]) == (105.0, 120.0)
    incident = Incident.objects.get()
    assert incident.resolve_suggested_at is None  # the incident waits for its alert
    [listed] = token_client(alice).get("/api/v1/alerts/?active=true&rule=error_rate").data["results"]
    assert listed["clear_since"] == (T0 + timedelta(seconds=600)).isoformat().replace("+00:00", "Z")
    assert "condition clear for 105 s" in listed["summary"]
    client = Client()
    client.force_login(alice)
    assert "(clearing since 09:10:00)" in client.get("/alerts/").content.decode()
    assert len(receiver.at(HOOK)) == 1

    evaluate(pool, T0 + timedelta(seconds=720), error_rate=0.0)
    alert = alert_of(pool, "error_rate")
    assert (alert.state, alert.resolved_at) == (AlertState.RESOLVED, T0 + timedelta(seconds=720))
    assert states(alert) == [("", "pending"), ("pending", "firing"), ("firing", "resolved")]
    assert _sent(NotificationKind.ALERT_FIRING) == _sent(NotificationKind.ALERT_RESOLVED) == 1
    fired, resolved = receiver.at(HOOK)
    assert resolved.json()["text"] == "Resolved: Error rate above 5 % · gpu-us-east/chat-8b"
    assert "condition clear for 2 min: resolved" in str(resolved.json()["blocks"])
    incident.refresh_from_db()
    assert incident.resolve_suggested_at == T0 + timedelta(seconds=720)
    assert incident.events.filter(kind=IncidentEventKind.RESOLVE_SUGGESTED).count() == 1


def test_a_condition_that_clears_for_good_resolves_two_minutes_later(pool: Pool, slack_channel: Channel,
                                                                     receiver: Receiver) -> None:
    _fire_errors(pool)
    for second in range(75, 195, 15):
        evaluate(pool, T0 + timedelta(seconds=second), error_rate=0.01)
    alert = alert_of(pool, "error_rate")
    assert (alert.state, alert.resolved_at) == (AlertState.FIRING, None)  # 1 min 45 s clear: still firing
    assert alert.clear_since == T0 + timedelta(seconds=75)
    assert Incident.objects.get().resolve_suggested_at is None
    assert _sent(NotificationKind.ALERT_RESOLVED) == 0
    evaluate(pool, T0 + timedelta(seconds=195), error_rate=0.01)
    alert = alert_of(pool, "error_rate")
    assert (alert.state, alert.resolved_at, alert.clear_since) == (
        AlertState.RESOLVED, T0 + timedelta(seconds=195), T0 + timedelta(seconds=75))
    assert _sent(NotificationKind.ALERT_RESOLVED) == 1 and len(receiver.at(HOOK)) == 2
    assert alert.events.last().reason.endswith("condition clear for 2 min: resolved")
    assert Incident.objects.get().resolve_suggested_at == T0 + timedelta(seconds=195)
    evaluate(pool, T0 + timedelta(seconds=210), error_rate=0.01)
    assert len(receiver.at(HOOK)) == 2 and Alert.objects.filter(rule="error_rate").count() == 1


def test_unknown_readings_in_the_hold_keep_its_clock(pool: Pool, slack_channel: Channel, receiver: Receiver) -> None:
    """The hold counts from the first clear reading; unknown readings neither reset it nor resolve; the first
    clear reading after it ran out resolves."""
    _fire_errors(pool)
    evaluate(pool, T0 + timedelta(seconds=75), error_rate=0.0)
    for second in range(90, 225, 15):  # 2¼ minutes with no error rate (Prometheus timing out)
        evaluate(pool, T0 + timedelta(seconds=second), error_rate=None)
    alert = alert_of(pool, "error_rate")
    assert alert.state == AlertState.FIRING and alert.clear_since == T0 + timedelta(seconds=75)
    evaluate(pool, T0 + timedelta(seconds=225), error_rate=0.0)
    alert = alert_of(pool, "error_rate")
    assert (alert.state, alert.resolved_at) == (AlertState.RESOLVED, T0 + timedelta(seconds=225))
    assert "condition clear for 150 s: resolved" in alert.summary


def test_a_condition_back_within_the_hold_continues_the_same_alert(pool: Pool, slack_channel: Channel,
                                                                   receiver: Receiver) -> None:
    _fire_errors(pool)
    evaluate(pool, T0 + timedelta(seconds=75), error_rate=0.0)
    evaluate(pool, T0 + timedelta(seconds=180), error_rate=0.0)
    evaluate(pool, T0 + timedelta(seconds=190), error_rate=0.3)  # back 115 s into the hold
    assert Alert.objects.filter(rule="error_rate").count() == 1
    alert = alert_of(pool, "error_rate")
    assert (alert.state, alert.summary) == (AlertState.FIRING, "30.0% of requests failing (alert above 5%)")
    assert alert.clear_since is None
    evaluate(pool, T0 + timedelta(seconds=205), error_rate=0.0)  # clear again: the hold starts over
    evaluate(pool, T0 + timedelta(seconds=310), error_rate=0.0)
    assert alert_of(pool, "error_rate").state == AlertState.FIRING
    evaluate(pool, T0 + timedelta(seconds=325), error_rate=0.0)
    assert alert_of(pool, "error_rate").state == AlertState.RESOLVED
    assert len(receiver.at(HOOK)) == 2 and Alert.objects.filter(rule="error_rate").count() == 1


def test_an_older_evaluation_leaves_the_hold_alone(pool: Pool) -> None:
    _fire_errors(pool)
    evaluate(pool, T0 + timedelta(seconds=75), error_rate=0.0)
    tick(pool, T0 + timedelta(seconds=70), error_rate=0.3)  # the tick that started at 70 s saw errors
    alerts.evaluate_alerts([pool], T0 + timedelta(seconds=70))
    alert = alert_of(pool, "error_rate")
    assert (alert.state, alert.last_evaluated_at) == (AlertState.FIRING, T0 + timedelta(seconds=75))
    assert alert.clear_since == T0 + timedelta(seconds=75)


def test_a_hold_scales_with_the_sandbox_clock(pool: Pool, settings) -> None:  # noqa: ANN001
    settings.ALERT_HOLD_SCALE = 0.25  # the demo at 4x: 30 wall seconds of `for` and 30 of hold
    evaluate(pool, T0, error_rate=0.2)
    evaluate(pool, T0 + timedelta(seconds=15), error_rate=0.2)
    evaluate(pool, T0 + timedelta(seconds=30), error_rate=0.0)
    evaluate(pool, T0 + timedelta(seconds=45), error_rate=0.0)
    assert alert_of(pool, "error_rate").state == AlertState.FIRING
    evaluate(pool, T0 + timedelta(seconds=60), error_rate=0.0)
    assert alert_of(pool, "error_rate").state == AlertState.RESOLVED


def test_a_p2_alert_resolves_at_its_first_clear_reading(pool: Pool) -> None:
    from scaling.models import ColdStart

    Pool.objects.filter(pk=pool.pk).update(cold_start_p95_s=90.0)
    pool.refresh_from_db()
    ColdStart.objects.create(pool=pool, seconds=240.0)
    evaluate(pool, T0)
    assert alert_of(pool, "cold_start_regression").state == AlertState.FIRING
    ColdStart.objects.create(pool=pool, seconds=95.0)
    evaluate(pool, T0 + timedelta(seconds=15))
    alert = alert_of(pool, "cold_start_regression")
    assert (alert.state, alert.resolved_at) == (AlertState.RESOLVED, T0 + timedelta(seconds=15))
    assert alert.summary == "last cold start 95 s"


def test_a_silence_ending_in_the_hold_pages_nobody(pool: Pool, alice: User, slack_channel: Channel,
                                                  receiver: Receiver) -> None:
    """A silenced alert is not announced; if its silence ends while the condition is clear, paging then would
    announce what is over. It is announced only if the condition returns."""
    silence = alerts.create_silence(pool.team, [{"label": "rule", "value": "outage"}], T0 + timedelta(minutes=5),
                                    core.Actor(alice, ActorChannel.API), now=T0 - timedelta(seconds=1),
                                    starts_at=T0 - timedelta(seconds=1))
    evaluate(pool, T0, ready_replicas=0.0, request_rate_rps=2.0)
    evaluate(pool, T0 + timedelta(seconds=30), ready_replicas=0.0, request_rate_rps=2.0)  # fires, silenced
    evaluate(pool, T0 + timedelta(seconds=45))  # clear: the hold starts
    alerts.expire_silence(silence, core.Actor(alice, ActorChannel.API), now=T0 + timedelta(seconds=50))
    evaluate(pool, T0 + timedelta(seconds=60))
    alert = alert_of(pool, "outage")
    assert (alert.state, alert.silenced_by_id, alert.announced_at) == (AlertState.FIRING, None, None)
    assert receiver.at(HOOK) == [] and not Incident.objects.exists()
    evaluate(pool, T0 + timedelta(seconds=75), ready_replicas=0.0, request_rate_rps=2.0)  # back: now it pages
    assert len(receiver.at(HOOK)) == 1 and Incident.objects.count() == 1


def test_a_heartbeat_in_its_hold_resolves_at_once_when_its_rule_is_gone(pool: Pool, bob: User) -> None:
    tick(pool, T0)
    alerts.evaluate_heartbeats(T0 + timedelta(seconds=120))
    tick(pool, T0 + timedelta(seconds=130))
    alerts.evaluate_heartbeats(T0 + timedelta(seconds=135))
    heartbeat = Alert.objects.get(rule="heartbeat")
    assert heartbeat.state == AlertState.FIRING and heartbeat.clear_since == T0 + timedelta(seconds=135)
    assert token_client(bob).delete(f"/api/v1/pools/{pool.pk}/").status_code == 204
    alerts.evaluate_heartbeats(T0 + timedelta(seconds=150))
    heartbeat.refresh_from_db()
    assert (heartbeat.state, heartbeat.resolved_at) == (AlertState.RESOLVED, T0 + timedelta(seconds=150))
    assert heartbeat.events.last().reason == "the rule no longer exists"
    assert heartbeat.summary.endswith("; the rule no longer exists") and "resolves once" not in heartbeat.summary
