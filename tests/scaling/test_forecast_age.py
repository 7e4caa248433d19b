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


def test_a_tick_whose_last_minutes_have_no_rate_caps_the_band_by_the_newest_known_minutes(pool: Pool) -> None:
    """The history is fresh enough to forecast from (3 minutes old) while the last two complete minutes
    hold no sample. The peak seen lately is read from the newest known minutes; read from the last two
    minutes alone it was unknown, a NaN that PostgreSQL's JSON refused, and every tick of the pool failed
    (the sandbox's demo, session 12)."""
    from scaling.engine.signals import PoolSignals, Reading

    _history(pool, NOW - timedelta(minutes=3))
    fresh = lambda value: Reading(float(value), 0.0)  # noqa: E731
    signals = PoolSignals(pool=pool.name, queue_depth=fresh(0), request_rate_rps=fresh(20.0),
                          ready_replicas=fresh(2), desired_replicas=fresh(2), arriving_replicas=fresh(0))
    loop.tick_pool(pool, signals, NOW + timedelta(seconds=30))  # this reading is in no complete minute yet
    memory = PlannerMemory.objects.get(pool=pool)
    predictive = next(t for t in memory.last_decision["terms"] if t["name"] == "PredictiveForecast")
    assert predictive["replicas"] is not None and predictive["numbers"]["lead_peak_rps"] == 20.0


def test_a_number_not_known_this_tick_is_saved_as_null() -> None:
    """PostgreSQL's JSON has no NaN: a term's unknown number is null in the saved decision."""
    import json
    import math

    from scaling.engine import planner

    term = planner.Term(planner.PREDICTIVE, 3, {"lead_peak_rps": math.nan, "p90_rps": 12.0})
    decision = planner.Decision(3, 2, 2, 0, (term,), planner.PREDICTIVE, (), False, 0.0, False, 5.0, None,
                                planner.PlannerState())
    saved = json.loads(json.dumps(loop._decision_dict(decision), allow_nan=False))
    assert saved["terms"][0]["numbers"] == {"lead_peak_rps": None, "p90_rps": 12.0}
