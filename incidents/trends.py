"""Numbers over days for the P2 and P3 alert rules, from a pool's hourly history. No Django here.

The per-tick history (`SignalSample`, kept 9 days) is read as hourly means (one SQL query for all pools,
see incidents/alerts.py). Days are the 24-hour windows ending now (day 0 is the last 24 h, day 1 the
24 h before), not calendar days, so a rule's answer does not jump at midnight. A day counts only with
at least 12 known hours: a pool that was down half the day has no daily figure, never a low one.

Trends are Theil-Sen lines (the median of the pairwise slopes), so one odd day (an incident, a holiday)
does not tilt them. The 72-hour peak forecast is the busiest hour of each of the next three days: the
same weekday's busiest hour one week earlier plus a week of the fitted growth once a week of history
exists (weekly seasonality: Monday is not Sunday), the fitted line alone before that.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

HOUR_S = 3600.0
DAY_S = 86_400.0
MIN_DAY_HOURS = 12  # a day with fewer known hours has no daily figure
HISTORY_DAYS = 8  # day 0 .. day 7: the weekly reference of the next three days is days 4 to 6 ago


@dataclass(frozen=True)
class Hour:
    """Means of one clock hour's known samples (None: nothing known that hour)."""

    start_s: float
    request_rate_rps: float | None = None
    ttft_p95_s: float | None = None
    prefix_cache_hit_rate: float | None = None


@dataclass(frozen=True)
class Line:
    """A fitted line over days: `level` is its value now (day 0), `slope` its change per day."""

    level: float
    slope: float
    days: int  # how many daily figures it was fitted to
    span_days: int  # from the oldest of them to day 0

    def at(self, day: float) -> float:
        """Its value `day` days from now (negative: in the past)."""
        return self.level + self.slope * day

    @property
    def rise(self) -> float:
        """How much it grew from the oldest day to now."""
        return self.slope * self.span_days


@dataclass(frozen=True)
class PeakForecast:
    peak_rps: float  # the busiest hour forecast in the next three days
    day: int  # 1, 2 or 3: the day (24 h windows from now) it falls in
    weekly: bool  # from last week's same days (else the fitted line alone)
    growth: Line


def days_ago(hour: Hour, now_s: float) -> int:
    return int((now_s - hour.start_s) // DAY_S)


def daily(hours: Sequence[Hour], now_s: float, signal: str, combine: str = "max") -> dict[int, float]:
    """Day (0 = the last 24 h) → the day's busiest hour (`max`) or its median hour (`median`) of `signal`;
    days with fewer than MIN_DAY_HOURS known hours are left out."""
    by_day: dict[int, list[float]] = {}
    for hour in hours:
        value = getattr(hour, signal)
        day = days_ago(hour, now_s)
        if value is not None and 0 <= day < HISTORY_DAYS and hour.start_s <= now_s:
            by_day.setdefault(day, []).append(value)
    pick = max if combine == "max" else statistics.median
    return {day: pick(values) for day, values in by_day.items() if len(values) >= MIN_DAY_HOURS}


def theil_sen(points: dict[int, float]) -> Line | None:
    """The robust line through (day ago, value) points; None with fewer than two."""
    if len(points) < 2:
        return None
    xs = sorted(points)
    slopes = [(points[a] - points[b]) / (b - a) for i, a in enumerate(xs) for b in xs[i + 1:]]  # x = -day
    slope = statistics.median(slopes)
    level = statistics.median(points[day] + slope * day for day in xs)
    return Line(level=level, slope=slope, days=len(xs), span_days=max(xs))


def peak_forecast(peaks: dict[int, float], min_days: int) -> PeakForecast | None:
    """The busiest hour of the next 72 h from the daily peaks; None without day 0 or with fewer than
    `min_days` days (history that stopped arriving is no forecast of the coming days)."""
    if 0 not in peaks or len(peaks) < min_days:
        return None
    growth = theil_sen(peaks)
    if growth is None:
        return None
    weekly = all(7 - day in peaks for day in (1, 2, 3))
    ahead = [peaks[7 - day] + growth.slope * 7 if weekly else growth.at(day) for day in (1, 2, 3)]
    peak = max(ahead)
    return PeakForecast(peak_rps=max(peak, 0.0), day=ahead.index(peak) + 1, weekly=weekly, growth=growth)


def recent_mean(hours: Sequence[Hour], now_s: float, signal: str, window_s: float) -> tuple[float | None, int]:
    """The mean of the known hourly values whose hour started within `window_s` of now, and how many there were."""
    values = [getattr(h, signal) for h in hours if now_s - window_s <= h.start_s <= now_s and getattr(h, signal) is not None]
    return (sum(values) / len(values) if values else None), len(values)


__all__ = ["Hour", "Line", "PeakForecast", "daily", "peak_forecast", "recent_mean", "theil_sen"]
