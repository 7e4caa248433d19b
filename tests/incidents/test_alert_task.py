"""The beat's alert task: every pool's rules and every cluster's heartbeat, on a schedule with an expiry."""
from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from controlplane.celery import app
from controlplane.models import Pool
from incidents import tasks
from incidents.choices import AlertState
from incidents.models import Alert
from scaling.models import PlannerMemory, SignalSample


def test_it_is_scheduled_every_15_s_and_expires_before_the_next_run() -> None:
    entry = app.conf.beat_schedule["evaluate-alerts"]
    assert entry["task"] == "incidents.tasks.evaluate_alerts" == tasks.evaluate_alerts.name
    assert entry["schedule"] == 15.0 and entry["options"]["expires"] < entry["schedule"]


def test_it_evaluates_pools_and_the_heartbeat(pool: Pool) -> None:
    last_tick = timezone.now() - timedelta(minutes=2)
    SignalSample.objects.create(pool=pool, at=last_tick, ready_replicas=0, request_rate_rps=1.0)
    PlannerMemory.objects.create(pool=pool, last_signals={"ready_replicas": 0.0, "request_rate_rps": 1.0},
                                 last_decision={"at": last_tick.isoformat()})
    tasks.evaluate_alerts()
    assert Alert.objects.get(rule="heartbeat").state == AlertState.FIRING
    # Two minutes without a tick: the pool's own rules are unknown, nothing opens on old numbers.
    assert not Alert.objects.filter(pool=pool).exclude(rule="cold_start_regression").exists()
