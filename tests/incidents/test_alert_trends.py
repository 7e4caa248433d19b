"""The rules over days (incidents/trends.py and the P2/P3 rules of incidents/rules.py), on synthetic hourly
history without a database: the 72-hour capacity forecast, latency and peak trends, prefix-cache degradation."""
from __future__ import annotations

from collections.abc import Callable

import pytest

from incidents import rules, trends
from incidents.rules import FIRING, OK, UNKNOWN

NOW = 1_764_500_400.0  # 10:00 UTC (hour-aligned), so day windows hold whole hours
HOUR = 3600.0
DAY = 86_400.0


def history(days: float, *, rate: Callable[[float, float], float | None] | None = None,
            ttft: Callable[[float], float | None] | None = None,
            hit: Callable[[float], float | None] | None = None) -> list[trends.Hour]:
    """Hourly means from `days` ago to now; `rate(day_ago, hour_of_day)`, `ttft(day_ago)`, `hit(hours_ago)`."""
    hours = []
    for back in range(int(days * 24) - 1, -1, -1):
        start = NOW - back * HOUR
        day_ago = (NOW - start) // DAY
        hour_of_day = (start % DAY) / HOUR
        hours.append(trends.Hour(start, rate(day_ago, hour_of_day) if rate else None,
                                 ttft(day_ago) if ttft else None, hit(back) if hit else None))
    return hours


def daily_shape(peak_by_day: Callable[[float], float]) -> Callable[[float, float], float]:
    """A day's traffic: a quarter of its peak at night, the peak from 14:00 to 15:00 UTC."""
    return lambda day, hour: peak_by_day(day) if 14 <= hour < 15 else peak_by_day(day) / 4


def facts(hours: list[trends.Hour], *, max_replicas: int = 8, per_replica: float | None = 5.0) -> rules.PoolFacts:
    return rules.PoolFacts(pool_id=7, now_s=NOW, decided_at_s=NOW - 5, signals={}, hours=hours,
                           max_replicas=max_replicas, capacity_per_replica_rps=per_replica)


def verdict(pool_facts: rules.PoolFacts, key: str) -> rules.Verdict:
    return next(v for v in rules.evaluate_pool(pool_facts) if v.rule.key == key)


def test_the_rules_over_days_are_p2_and_p3_and_open_no_incident() -> None:
    from incidents.choices import INCIDENT_TIERS

    tiers = {key: rules.RULES[key].tier for key in ("capacity_72h", "latency_trend", "peak_growth", "cache_hit_degradation")}
    assert tiers == {"capacity_72h": "P2", "latency_trend": "P3", "peak_growth": "P3", "cache_hit_degradation": "P3"}
    assert not set(tiers.values()) & set(INCIDENT_TIERS)


def test_daily_figures_need_twelve_known_hours() -> None:
    hours = history(3, rate=lambda day, hour: None if day == 1 and hour < 14 else 10.0 + day)
    assert trends.daily(hours, NOW, "request_rate_rps") == {0: 10.0, 2: 12.0}


def test_a_theil_sen_line_ignores_one_odd_day() -> None:
    line = trends.theil_sen({0: 16.0, 1: 15.0, 2: 90.0, 3: 13.0, 4: 12.0})
    assert line is not None and line.slope == pytest.approx(1.0) and line.level == pytest.approx(16.0)
    assert line.rise == pytest.approx(4.0) and line.at(3) == pytest.approx(19.0)


@pytest.mark.parametrize(("name", "peak_by_day", "days", "max_replicas", "status"), [
    # 2 req/s more each day: 34 today, 40 in 72 h; 8 replicas × 5 req/s serve 40: not above.
    ("growing to the limit", lambda day: 34.0 - 2 * day, 6, 8, OK),
    # 3 req/s more each day: 34 today, 43 in 72 h > 40.
    ("growing past it", lambda day: 34.0 - 3 * day, 6, 8, FIRING),
    ("the same growth with more replicas", lambda day: 34.0 - 3 * day, 6, 9, OK),
    ("already above it", lambda day: 45.0, 4, 8, FIRING),
    ("only two days known", lambda day: 45.0, 2, 8, UNKNOWN),
])
def test_capacity_is_exhausted_within_72_hours_at_the_forecast(name: str, peak_by_day: Callable[[float], float],
                                                               days: int, max_replicas: int, status: str) -> None:
    got = verdict(facts(history(days, rate=daily_shape(peak_by_day)), max_replicas=max_replicas), "capacity_72h")
    assert got.status == status, (name, got.summary)


def test_the_capacity_forecast_names_its_numbers() -> None:
    got = verdict(facts(history(6, rate=daily_shape(lambda day: 34.0 - 3 * day))), "capacity_72h")
    assert got.numbers["forecast_peak_rps"] == pytest.approx(43.0) and got.numbers["capacity_rps"] == 40.0
    assert got.numbers["hours_ahead"] == 72.0 and got.numbers["growth_rps_per_day"] == pytest.approx(3.0)
    assert got.summary.startswith("busiest hour forecast 43.00 req/s within 72 h (the trend of 6 daily peaks, "
                                  "+3.00 req/s a day) against 40.00 req/s at max 8 replicas × 5.00 req/s")


def test_the_capacity_forecast_follows_last_weeks_same_days_once_it_has_a_week() -> None:
    """Flat weeks with one busy weekday: the day 5 days ago (2 days ahead, a week later) peaks at 44."""
    hours = history(8, rate=daily_shape(lambda day: 44.0 if day == 5 else 20.0))
    got = verdict(facts(hours), "capacity_72h")
    assert (got.status, got.numbers["hours_ahead"], got.numbers["forecast_peak_rps"]) == (FIRING, 48.0, 44.0)
    assert "last week's same days plus the growth" in got.summary
    # The line alone (less than a week known) would have called it flat at 20 req/s.
    assert verdict(facts(hours[-6 * 24:]), "capacity_72h").status == OK


def test_history_that_stopped_arriving_forecasts_nothing() -> None:
    hours = [h for h in history(6, rate=daily_shape(lambda day: 60.0)) if h.start_s < NOW - DAY]
    assert verdict(facts(hours), "capacity_72h").status == UNKNOWN
    assert verdict(facts(history(6, rate=daily_shape(lambda day: 60.0)), per_replica=None), "capacity_72h").status == UNKNOWN


@pytest.mark.parametrize(("name", "ttft", "days", "status"), [
    ("up 50 % over 6 days", lambda day: 0.45 - 0.025 * day, 7, FIRING),
    ("up 10 %", lambda day: 0.33 - 0.005 * day, 7, OK),
    ("flat", lambda day: 0.4, 7, OK),
    ("falling", lambda day: 0.3 + 0.05 * day, 7, OK),
    ("up 30 % but only 3 ms", lambda day: 0.013 - 0.0005 * day, 7, OK),
    ("three days known", lambda day: 0.45 - 0.05 * day, 3, UNKNOWN),
])
def test_ttft_p95_trending_up_over_days(name: str, ttft: Callable[[float], float], days: int, status: str) -> None:
    got = verdict(facts(history(days, ttft=ttft)), "latency_trend")
    assert got.status == status, (name, got.summary)


def test_a_latency_trend_says_from_where_to_where() -> None:
    got = verdict(facts(history(7, ttft=lambda day: 0.45 - 0.025 * day)), "latency_trend")
    assert got.summary == "TTFT p95 (daily median) 0.300 s → 0.450 s over 6 days (+50%, alert at +20%)"


def test_a_growing_daily_peak_fires_and_says_when_it_reaches_max_capacity() -> None:
    got = verdict(facts(history(7, rate=daily_shape(lambda day: 26.0 - 2 * day))), "peak_growth")
    assert got.status == FIRING
    assert got.summary == ("daily peak 14.00 → 26.00 req/s over 6 days (+86%, alert at +20%); at this pace it reaches "
                           "max capacity (40.00 req/s) in about 7 days")
    assert verdict(facts(history(7, rate=daily_shape(lambda day: 26.0 - 0.5 * day))), "peak_growth").status == OK
    one_odd_day = daily_shape(lambda day: 90.0 if day == 3 else 26.0)
    assert verdict(facts(history(7, rate=one_odd_day)), "peak_growth").status == OK


@pytest.mark.parametrize(("name", "hit", "days", "status"), [
    ("fell from 60 % to 30 % in the last 6 h", lambda back: 0.3 if back <= 6 else 0.6, 8, FIRING),
    ("fell 4 points", lambda back: 0.56 if back <= 6 else 0.6, 8, OK),
    ("fell from 20 % to 14 %: 6 points but 30 %", lambda back: 0.14 if back <= 6 else 0.2, 8, FIRING),
    ("fell from 10 % to 6 %: 40 % but 4 points", lambda back: 0.06 if back <= 6 else 0.1, 8, OK),
    ("steady", lambda back: 0.6, 8, OK),
    ("one day before the last", lambda back: 0.3 if back <= 6 else 0.6, 1.9, UNKNOWN),
    ("no hit rate", lambda back: None, 8, UNKNOWN),
])
def test_prefix_cache_hit_degradation(name: str, hit: Callable[[float], float | None], days: float, status: str) -> None:
    got = verdict(facts(history(days, hit=hit)), "cache_hit_degradation")
    assert got.status == status, (name, got.summary)


def test_the_rules_over_days_answer_without_a_fresh_decision() -> None:
    """A stopped loop (the heartbeat's business) does not change the stored history they read."""
    stale = rules.PoolFacts(pool_id=7, now_s=NOW, decided_at_s=None, signals={}, max_replicas=8,
                            capacity_per_replica_rps=5.0, hours=history(6, rate=daily_shape(lambda day: 45.0)))
    assert verdict(stale, "capacity_72h").status == FIRING
    assert verdict(stale, "ttft_p95").status == UNKNOWN
