"""Alert evaluation at its edges: a pool whose records cannot be read, a cluster left without pools, a
pending alert across a gap of unknown readings, evaluations that arrive out of order."""
from __future__ import annotations

import logging
from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError
from django.utils import timezone

from controlplane.models import Pool
from incidents import alerts, services, tasks
from incidents.choices import AlertState
from incidents.models import Alert, Channel, Incident
from scaling.models import PlannerMemory, SignalSample

from tests.core.conftest import token_client
from tests.incidents.conftest import Receiver
from tests.incidents.test_alerts import HOOK, T0, alert_of, evaluate, states, tick


def _unreadable(pool: Pool, at: object = "n/a") -> None:
    """A decision whose time cannot be read (a partial write, an older format)."""
    PlannerMemory.objects.update_or_create(pool=pool, defaults={"last_signals": {}, "last_decision": {"at": at}})


# --- one pool's unreadable record ------------------------------------------------------------------------


@pytest.mark.parametrize("at", ["n/a", 1764579600, "2026-12-01T09:00:00"])  # no time, a number, no offset
def test_it_skips_a_pool_whose_record_cannot_be_read_and_evaluates_the_others(
        pool: Pool, search_pool: Pool, at: object, caplog: pytest.LogCaptureFixture) -> None:
    """One bad record must cost its own pool's alerts, not every pool's."""
    tick(pool, T0, ready_replicas=0.0, request_rate_rps=3.0)
    _unreadable(search_pool, at)
    with caplog.at_level(logging.ERROR, logger="incidents.alerts"):
        result = alerts.evaluate_alerts([pool, search_pool], T0)
    assert list(result.errors) == [str(search_pool)] and "ValueError" in result.errors[str(search_pool)]
    assert alert_of(pool, "outage").state == AlertState.PENDING
    assert not Alert.objects.filter(pool=search_pool).exists()
    assert f"alert evaluation failed for pool {search_pool}" in caplog.text


def test_the_beat_reports_a_dead_loop_though_another_pools_record_is_unreadable(pool: Pool, search_pool: Pool) -> None:
    """The heartbeat is what speaks when the loop is broken; a bad record elsewhere must not mute it."""
    SignalSample.objects.create(pool=pool, at=timezone.now() - timedelta(minutes=5), queue_depth=1.0)
    _unreadable(search_pool)
    SignalSample.objects.create(pool=search_pool, at=timezone.now(), queue_depth=1.0)
    tasks.evaluate_alerts()
    assert Alert.objects.get(rule="heartbeat").cluster == pool.cluster


def test_the_beat_evaluates_the_heartbeat_even_when_the_pools_evaluation_fails(pool: Pool) -> None:
    """A failure shared by every pool (the database, say) still leaves the heartbeat its say, and the task
    still fails loudly."""
    SignalSample.objects.create(pool=pool, at=timezone.now() - timedelta(minutes=5), queue_depth=1.0)
    with mock.patch.object(alerts, "pool_facts", autospec=True, side_effect=OperationalError("connection lost")), \
            pytest.raises(OperationalError):
        tasks.evaluate_alerts()
    assert Alert.objects.get(rule="heartbeat").state == AlertState.FIRING


# --- a cluster left without pools --------------------------------------------------------------------------


def test_a_heartbeat_alert_resolves_once_its_clusters_pools_are_all_removed(
        pool: Pool, bob: User, slack_channel: Channel, receiver: Receiver) -> None:
    """No pools, no heartbeat rule: its P0 resolves like any alert whose rule is gone, not fire for ever."""
    tick(pool, T0)
    for notification_id in alerts.evaluate_heartbeats(T0 + timedelta(seconds=120)).notifications:
        services.deliver(notification_id, T0 + timedelta(seconds=120))
    heartbeat = Alert.objects.get(rule="heartbeat")
    assert heartbeat.state == AlertState.FIRING and len(receiver.at(HOOK)) == 1
    assert token_client(bob).delete(f"/api/v1/pools/{pool.pk}/").status_code == 204  # decommissioned

    result = alerts.evaluate_heartbeats(T0 + timedelta(seconds=135))
    for notification_id in result.notifications:
        services.deliver(notification_id, T0 + timedelta(seconds=135))
    heartbeat.refresh_from_db()
    assert (heartbeat.state, heartbeat.resolved_at) == (AlertState.RESOLVED, T0 + timedelta(seconds=135))
    assert heartbeat.events.last().reason == "the rule no longer exists"
    assert receiver.at(HOOK)[1].json()["text"].startswith("Resolved: The control loop stopped ticking")
    assert Incident.objects.get(cluster=heartbeat.cluster, pool=None).resolve_suggested_at is not None
    assert not alerts.evaluate_heartbeats(T0 + timedelta(seconds=150)).changed  # and it stays resolved


# --- a pending alert across a gap ----------------------------------------------------------------------------


def test_a_pending_alert_starts_its_hold_over_after_a_gap_of_unknown_readings(pool: Pool, slack_channel: Channel,
                                                                              receiver: Receiver) -> None:
    """After a loop outage, one bad reading must not page: the 2-minute `for` counts observed time only."""
    evaluate(pool, T0, ttft_p95_s=1.4)  # one bad tick: pending (for = 2 min)
    for seconds in range(15, 600, 15):  # the loop stops for 10 minutes: the beat sees a stale decision
        alerts.evaluate_alerts([pool], T0 + timedelta(seconds=seconds))
    assert alert_of(pool, "ttft_p95").state == AlertState.PENDING  # unknown holds it

    evaluate(pool, T0 + timedelta(seconds=600), ttft_p95_s=1.4)  # the first tick after the gap
    after = alert_of(pool, "ttft_p95")
    assert (after.state, after.started_at) == (AlertState.PENDING, T0 + timedelta(seconds=600))
    assert receiver.at(HOOK) == []
    for seconds in range(615, 735, 15):  # seen, tick after tick, for its 2 minutes: now it fires
        evaluate(pool, T0 + timedelta(seconds=seconds), ttft_p95_s=1.4)
    assert (alert_of(pool, "ttft_p95").state, len(receiver.at(HOOK))) == (AlertState.FIRING, 1)


def test_a_pending_alert_fires_through_readings_that_blink_unknown(pool: Pool, slack_channel: Channel,
                                                                 receiver: Receiver) -> None:
    """A Prometheus timing out every other tick under the overload the alert is about must not keep it from
    firing: gaps shorter than PENDING_GAP_S leave the `for` running."""
    for seconds in range(0, 135, 30):  # a bad reading every 30 s, an unknown one between
        evaluate(pool, T0 + timedelta(seconds=seconds), ttft_p95_s=1.4)
        evaluate(pool, T0 + timedelta(seconds=seconds + 15), ttft_p95_s=None)
    alert = alert_of(pool, "ttft_p95")
    assert alert.started_at == T0 and alert.state == AlertState.FIRING and len(receiver.at(HOOK)) == 1


# --- evaluations out of order ------------------------------------------------------------------------------------


def test_an_evaluation_older_than_the_last_changes_no_alert(pool: Pool, slack_channel: Channel,
                                                            receiver: Receiver) -> None:
    """The tick evaluates at its start time, the beat at its own now: the older of the two must not resolve
    an alert before it fired, nor move its evaluation time back."""
    evaluate(pool, T0, ready_replicas=0.0, request_rate_rps=3.0)
    tick(pool, T0 + timedelta(seconds=15), ready_replicas=0.0, request_rate_rps=3.0)
    alerts.evaluate_alerts([pool], T0 + timedelta(seconds=31))  # the beat at 09:00:31: outage fires
    tick(pool, T0 + timedelta(seconds=30))  # the tick that started at 09:00:30 read the pool healthy
    alerts.evaluate_alerts([pool], T0 + timedelta(seconds=30))
    alert = alert_of(pool, "outage")
    assert (alert.state, alert.fired_at, alert.last_evaluated_at) == (
        AlertState.FIRING, T0 + timedelta(seconds=31), T0 + timedelta(seconds=31))

    alerts.evaluate_alerts([pool], T0 + timedelta(seconds=46))  # the next beat reads the healthy tick
    assert alert_of(pool, "outage").clear_since == T0 + timedelta(seconds=46)  # its resolve hold starts
    tick(pool, T0 + timedelta(seconds=165))
    alerts.evaluate_alerts([pool], T0 + timedelta(seconds=166))  # 2 minutes clear
    alert = alert_of(pool, "outage")
    assert (alert.state, alert.resolved_at) == (AlertState.RESOLVED, T0 + timedelta(seconds=166))
    assert states(alert) == [("", "pending"), ("pending", "firing"), ("firing", "resolved")]
    assert list(alert.events.values_list("at", flat=True)) == sorted(alert.events.values_list("at", flat=True))
