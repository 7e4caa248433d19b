"""History that stopped arriving is not a forecast (issue 12, item 2)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from controlplane.models import Pool
from scaling import loop
from scaling.models import PlannerMemory, SignalSample

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def _history(pool: Pool, until: datetime) -> None:
    at, samples = until - timedelta(hours=2), []
    while at <= until:
        samples.append(SignalSample(pool=pool, at=at, request_rate_rps=20.0))
        at += timedelta(seconds=15)
    SignalSample.objects.bulk_create(samples)


def test_a_history_that_is_still_arriving_is_forecast(pool: Pool) -> None:
    _history(pool, NOW - timedelta(seconds=15))
    lead, peak, _ = loop.forecasts(pool, loop.pool_plan(pool), PlannerMemory.objects.create(pool=pool), NOW)
    assert lead is not None and abs(lead.expected_rps - 20.0) < 1.0 and peak is not None


def test_a_history_that_stopped_ten_minutes_ago_is_no_forecast(pool: Pool) -> None:
    _history(pool, NOW - timedelta(minutes=10))  # the rate query has failed since (samples with no rate)
    SignalSample.objects.bulk_create(SignalSample(pool=pool, at=NOW - timedelta(seconds=15 * i), request_rate_rps=None)
                                     for i in range(40))
    lead, peak, _ = loop.forecasts(pool, loop.pool_plan(pool), PlannerMemory.objects.create(pool=pool), NOW)
    assert lead is None and peak is None
