"""The rules read what the real loop stores: a tick of `scaling.loop.tick_pool` with an outage, then with
no metrics at all, evaluated as the beat (or the end of a tick) does."""
from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from controlplane.models import Pool
from incidents import alerts
from incidents.choices import AlertState
from incidents.models import Alert
from scaling import loop
from scaling.engine.signals import PoolSignals, Reading


def _signals(pool: Pool, **values: float) -> PoolSignals:
    return PoolSignals(pool=pool.name, **{name: Reading(value, 0.0) for name, value in values.items()})


def test_it_raises_alerts_from_the_loops_own_records(pool: Pool) -> None:
    start = timezone.now() - timedelta(minutes=5)
    for second in (0, 15, 30):
        now = start + timedelta(seconds=second)
        loop.tick_pool(pool, _signals(pool, ready_replicas=0.0, desired_replicas=1.0, arriving_replicas=1.0,
                                      request_rate_rps=3.0, queue_depth=12.0, ttft_p99_s=7.5), now)
        alerts.evaluate_alerts([pool], now)
    assert Alert.objects.get(rule="outage").state == AlertState.FIRING
    assert Alert.objects.get(rule="ttft_p99").state == AlertState.PENDING  # for 1 min
    # The metrics stop: the planner's staleness alert becomes ours; nothing resolves on unknown.
    for second in range(45, 200, 15):
        now = start + timedelta(seconds=second)
        loop.tick_pool(pool, PoolSignals(pool=pool.name), now)
        alerts.evaluate_alerts([pool], now)
    assert Alert.objects.get(rule="stale_signals").state == AlertState.FIRING
    assert Alert.objects.get(rule="outage").state == AlertState.FIRING
    heartbeat = alerts.evaluate_heartbeats(start + timedelta(seconds=200))
    assert not heartbeat.changed  # the loop ticks
