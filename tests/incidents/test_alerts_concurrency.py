"""Several workers evaluating the same pool at the same tick (the beat and the tick, or two beats):
one alert, one transition each, one message."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.models import Pool
from incidents import alerts
from incidents.choices import AlertState
from incidents.models import Alert, AlertEvent, Channel, Notification
from scaling.models import PlannerMemory

from tests.concurrency import race
from tests.incidents.conftest import Receiver

pytestmark = pytest.mark.django_db(transaction=True)


def _tick(pool: Pool, at) -> None:  # noqa: ANN001
    PlannerMemory.objects.update_or_create(pool=pool, defaults={
        "last_signals": {"ready_replicas": 0.0, "request_rate_rps": 2.0},
        "last_decision": {"at": at.isoformat(), "staleness_alert": False}})


def test_it_opens_fires_and_announces_an_alert_once_whoever_evaluates(pool: Pool, slack_channel: Channel,
                                                                      receiver: Receiver) -> None:
    start = timezone.now() - timedelta(seconds=40)  # the second round's messages are due now
    _tick(pool, start)
    outcomes = race(lambda: alerts.evaluate_alerts([Pool.objects.select_related("cluster", "team").get(pk=pool.pk)], start))
    assert not [o for o in outcomes if isinstance(o, Exception)]
    assert Alert.objects.filter(rule="outage").count() == 1
    later = start + timedelta(seconds=30)
    _tick(pool, later)
    race(lambda: alerts.evaluate_alerts([Pool.objects.select_related("cluster", "team").get(pk=pool.pk)], later))
    alert = Alert.objects.get(rule="outage")
    assert alert.state == AlertState.FIRING
    assert list(AlertEvent.objects.filter(alert=alert).values_list("from_state", "to_state")) == [
        ("", "pending"), ("pending", "firing")]
    assert Notification.objects.filter(alert=alert).count() == 1
    assert len(receiver.requests) == 1  # delivered on commit, once
