"""The P2/P3 rules on the database: hourly means from stored samples, `for` durations, one message each
way, no incident; they fire and resolve at the times the history says."""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.models import Pool
from incidents import alerts, services
from incidents.choices import AlertState, NotificationKind
from incidents.models import Alert, Channel, HourlyRollup, Incident, Notification
from scaling.models import PlannerMemory, SignalSample

from tests.core.conftest import token_client
from tests.incidents.conftest import Receiver
from tests.incidents.test_alerts import HOOK, states

T0 = datetime.fromisoformat("2026-12-01T10:00:00+00:00")
STEP = timedelta(minutes=10)


def store(pool: Pool, start: datetime, end: datetime, **fields) -> None:  # noqa: ANN003
    """A sample every 10 minutes in [start, end); a field given as a function gets the sample's time."""
    rows, at = [], start
    while at < end:
        values = {name: value(at) if callable(value) else value for name, value in fields.items()}
        rows.append(SignalSample(pool=pool, at=at, **values))
        at += STEP
    SignalSample.objects.bulk_create(rows)


def evaluate(pool: Pool, at: datetime) -> alerts.Evaluation:
    result = alerts.evaluate_alerts([Pool.objects.prefetch_related("slos").select_related("team", "cluster").get(pk=pool.pk)],
                                    at)
    for notification_id in result.notifications:
        services.deliver(notification_id, at)
    return result


def state_of(pool: Pool, rule: str) -> str | None:
    alert = Alert.objects.filter(pool=pool, rule=rule).order_by("-started_at").first()
    return alert.state if alert else None


def said(receiver: Receiver, title: str) -> list[dict]:
    return [r.json() for r in receiver.at(HOOK) if title in r.json()["text"]]


def busy_afternoons(peak_of_day: float) -> Callable[[datetime], float]:
    """A quarter of the day's peak, the peak from 14:00 to 15:00 UTC; the peak grows 3 req/s a day."""
    def rate(at: datetime) -> float:
        peak = peak_of_day - 3.0 * ((T0 - at).total_seconds() // 86_400)
        return peak if at.hour == 14 else peak / 4
    return rate


def test_capacity_exhausted_within_72_hours_fires_after_its_for_and_resolves_when_max_replicas_rise(
        pool: Pool, slack_channel: Channel, receiver: Receiver, client, alice: User) -> None:  # noqa: ANN001
    # 8 replicas × 5 req/s (the planner's corrected capacity) = 40 req/s; the busiest hour grows from 19 to
    # 34 req/s over 6 days: 43 req/s within 72 h.
    PlannerMemory.objects.create(pool=pool, last_decision={"capacity_per_replica_rps": 5.0})
    store(pool, T0 - timedelta(days=6), T0, request_rate_rps=busy_afternoons(34.0))
    evaluate(pool, T0)
    alert = Alert.objects.get(pool=pool, rule="capacity_72h")
    assert (alert.state, alert.tier) == (AlertState.PENDING, "P2")
    assert alert.numbers["forecast_peak_rps"] == pytest.approx(43.0) and alert.numbers["capacity_rps"] == 40.0
    evaluate(pool, T0 + timedelta(minutes=10))
    assert state_of(pool, "capacity_72h") == AlertState.PENDING and said(receiver, "Capacity") == []
    evaluate(pool, T0 + timedelta(minutes=15))
    alert.refresh_from_db()
    assert (alert.state, alert.fired_at) == (AlertState.FIRING, T0 + timedelta(minutes=15))
    [fired] = said(receiver, "Capacity")
    assert fired["text"] == "P2 firing: Capacity exhausted within 72 h at the forecast · gpu-us-east/chat-8b"
    assert "busiest hour forecast 43.00 req/s within 72 h" in str(fired["blocks"])
    # The growth itself is a P3 (this sprint): 19 → 34 req/s in 5 days.
    assert said(receiver, "Daily peak growing")[0]["text"].startswith("P3 firing")
    assert not Incident.objects.exists()  # P2 is for the next working day: listed and told, nobody paged
    evaluate(pool, T0 + timedelta(minutes=30))
    assert len(said(receiver, "Capacity")) == 1
    client.force_login(alice)  # listed with the pool's alerts, in the calm badge of the later tiers
    page = client.get("/alerts/").content.decode()
    row = page.split(f'<tr id="alert-{alert.pk}">')[1].split("</tr>")[0]
    assert '<span class="badge later">P2</span>' in row and "busiest hour forecast 43.00 req/s" in row
    assert "incident #" not in row
    listed = token_client(alice).get("/api/v1/alerts/", {"tier": "P2", "active": "true"}).json()["results"]
    assert [(a["rule"], a["state"]) for a in listed] == [("capacity_72h", "firing")]

    Pool.objects.filter(pk=pool.pk).update(max_replicas=9)  # 45 req/s: the team made room
    evaluate(pool, T0 + timedelta(minutes=45))
    alert.refresh_from_db()
    assert (alert.state, alert.resolved_at) == (AlertState.RESOLVED, T0 + timedelta(minutes=45))
    assert said(receiver, "Capacity")[1]["text"].startswith("Resolved: Capacity exhausted within 72 h")
    assert states(alert) == [("", "pending"), ("pending", "firing"), ("firing", "resolved")]
    assert Notification.objects.filter(alert=alert, kind=NotificationKind.ALERT_FIRING).count() == 1


def test_a_prefix_cache_hit_rate_drop_fires_and_resolves_at_the_hours_its_6_hour_mean_says(
        pool: Pool, slack_channel: Channel, receiver: Receiver) -> None:
    """60 % for a week, 20 % for 3 hours from `drop`, then 60 % again. The mean of the hours that started
    in the last 6 h falls to 20 points below the 60 % baseline once 2 of its 6 hours are low: 1 h after
    the drop; and rises back once only one low hour is left in it: 4 h after the recovery."""
    drop, recovery = T0, T0 + timedelta(hours=3)
    store(pool, T0 - timedelta(days=8), T0 + timedelta(hours=10),
          prefix_cache_hit_rate=lambda at: 0.2 if drop <= at < recovery else 0.6)
    timeline = {}
    for minutes in range(5, 9 * 60, 15):
        at = drop + timedelta(minutes=minutes)
        evaluate(pool, at)
        timeline.setdefault(state_of(pool, "cache_hit_degradation"), at)
    assert timeline == {None: drop + timedelta(minutes=5), AlertState.PENDING: drop + timedelta(hours=1, minutes=5),
                        AlertState.FIRING: drop + timedelta(hours=1, minutes=20),
                        AlertState.RESOLVED: recovery + timedelta(hours=4, minutes=5)}
    alert = Alert.objects.get(pool=pool, rule="cache_hit_degradation")
    assert alert.tier == "P3" and not Incident.objects.exists()
    texts = [request.json()["text"] for request in receiver.at(HOOK)]
    assert texts == ["P3 firing: Prefix-cache hit rate falling · gpu-us-east/chat-8b",
                     "Resolved: Prefix-cache hit rate falling · gpu-us-east/chat-8b"]


def test_the_hourly_history_keeps_complete_hours_and_reads_the_hour_in_progress_live(pool: Pool) -> None:
    store(pool, T0 - timedelta(hours=2), T0 + timedelta(hours=2), request_rate_rps=lambda at: float(at.minute),
          ttft_p95_s=lambda at: None if at.hour == 8 else 0.5)
    SignalSample.objects.create(pool=pool, at=T0 - timedelta(days=9), request_rate_rps=99.0)  # older than 8 days
    at = T0 + timedelta(minutes=25)  # samples at :00, :10, :20 of the hour in progress
    hours = alerts.hourly_history([pool], at)[pool.pk]
    start = (T0 - timedelta(hours=2)).timestamp()
    assert [(h.start_s, h.request_rate_rps, h.ttft_p95_s) for h in hours] == [
        (start, 25.0, None), (start + 3600, 25.0, 0.5), (start + 7200, 10.0, 0.5)]  # minutes 0..50: mean 25
    rollup = HourlyRollup.objects.get(pool=pool)
    assert (rollup.through, len(rollup.hours)) == (T0, 2)

    with CaptureQueriesContext(connection) as queries:  # the same hour again: the rollup and the live hour
        assert alerts.hourly_history([pool], at + timedelta(minutes=10))[pool.pk][:2] == hours[:2]
    assert len(queries) == 2
    with CaptureQueriesContext(connection) as queries:  # the next hour: one more hour aggregated and stored
        later = alerts.hourly_history([pool], T0 + timedelta(hours=1, minutes=5))[pool.pk]
    assert len(queries) == 4
    assert [(h.start_s, h.request_rate_rps) for h in later] == [
        (start, 25.0), (start + 3600, 25.0), (start + 7200, 25.0), (start + 10800, 0.0)]
    assert HourlyRollup.objects.get(pool=pool).through == T0 + timedelta(hours=1)
    # A worker just behind at the hour's turn reads the stored hours before its own; a replay of an earlier
    # time reads the samples. Neither moves the rollup back.
    with CaptureQueriesContext(connection) as queries:
        assert alerts.hourly_history([pool], at)[pool.pk] == hours
    assert len(queries) == 2
    earlier = alerts.hourly_history([pool], at - timedelta(hours=1))[pool.pk]  # 09:25: 08:00 complete, 09:00 live
    assert [(h.start_s, h.request_rate_rps, h.ttft_p95_s) for h in earlier] == [(start, 25.0, None), (start + 3600, 10.0, 0.5)]
    assert HourlyRollup.objects.get(pool=pool).through == T0 + timedelta(hours=1)
