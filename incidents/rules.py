"""Alert rules as plain code: from one pool's signals, history and SLOs to verdicts. No Django here.

Each rule answers FIRING, OK or UNKNOWN. Unknown is not healthy: it neither fires nor resolves an
alert, it holds the alert where it is (a pool whose metrics stopped has the stale-signals alert for
that); a pending alert's `for` counts only time the condition was seen to hold, and starts again when the
condition is seen after a gap longer than the `for` and `PENDING_GAP_S` (`incidents.alerts`). `advance()` turns a
verdict into the alert's next state, counting the rule's `for` duration on the way up and its resolve hold
(`keep_firing_for_s`, Prometheus' `keep_firing_for`) on the way down.
Tiers and thresholds are design.md §5's defaults; the burn-rate pairs are the SRE workbook's
(fast: 1 h and 5 min at 14.4x, slow: 6 h and 30 min at 6x).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from incidents import trends

P0, P1, P2, P3 = "P0", "P1", "P2", "P3"
TIERS = (P0, P1, P2, P3)
FIRING, OK, UNKNOWN = "firing", "ok", "unknown"
# A pending alert seen again after a gap longer than its rule's `for` and this much more (a loop outage: a
# whole `for` could have passed unseen) starts its `for` over: one bad reading on each side of a gap is not a
# condition that held. Shorter gaps (a Prometheus that times out every other tick under the very overload the
# alert is about) leave the count running, or it might never fire.
PENDING_GAP_S = 60.0
# Alert states (incidents.choices.AlertState has the same values).
PENDING, RESOLVED, CLEARED = "pending", "resolved", "cleared"

MINUTE = 60.0
HOUR = 3600.0
# A firing alert resolves only once its condition has read OK this long without firing again in between: a
# condition flapping around its bar (75 s above, 15 s below, …) is one alert and one page, not one per cycle.
# P2 and P3 rules need 15 minutes (or a measured regression) to fire at all and open no incident: no hold.
KEEP_FIRING_FOR_S = {P0: 2 * MINUTE, P1: 2 * MINUTE, P2: 0.0, P3: 0.0}


@dataclass(frozen=True)
class Rule:
    key: str
    tier: str
    title: str
    for_s: float = 0.0  # how long the condition must hold before the alert fires
    capacity: bool = False  # more ready replicas cure it: held back while a scale-up is warming
    # How long the condition must read OK before a firing alert resolves; None: its tier's (KEEP_FIRING_FOR_S).
    keep_firing_for_s: float | None = None  # a float once built

    def __post_init__(self) -> None:
        if self.keep_firing_for_s is None:
            object.__setattr__(self, "keep_firing_for_s", KEEP_FIRING_FOR_S[self.tier])


OUTAGE = Rule("outage", P0, "No ready replica while traffic arrives", for_s=30.0)
TTFT_P99 = Rule("ttft_p99", P0, "Time to first token p99 above 5 s", for_s=MINUTE, capacity=True)
ERRORS = Rule("error_rate", P0, "Error rate above 5 %", for_s=MINUTE)
TTFT_P95 = Rule("ttft_p95", P1, "Time to first token p95 above 1 s", for_s=2 * MINUTE, capacity=True)
QUEUE_GROWTH = Rule("queue_growth", P1, "Queue growing for 5 minutes", capacity=True)
STALE = Rule("stale_signals", P1, "No fresh metrics for 90 s")
HEARTBEAT = Rule("heartbeat", P0, "The control loop stopped ticking")
COLD_START = Rule("cold_start_regression", P2, "Cold start well above the pool's p95")
CANNOT_SCALE = Rule("cannot_scale", P2, "Headroom cannot scale the pool")
# Over days (incidents/trends.py): a quarter hour of holding keeps an hour boundary from flapping them.
CAPACITY_72H = Rule("capacity_72h", P2, "Capacity exhausted within 72 h at the forecast", for_s=15 * MINUTE)
LATENCY_TREND = Rule("latency_trend", P3, "TTFT p95 trending up over days", for_s=15 * MINUTE)
PEAK_GROWTH = Rule("peak_growth", P3, "Daily peak growing", for_s=15 * MINUTE)
CACHE_HIT = Rule("cache_hit_degradation", P3, "Prefix-cache hit rate falling", for_s=15 * MINUTE)


@dataclass(frozen=True)
class Thresholds:
    """design.md §5's defaults. p95/p99 are time to first token: an end-to-end latency grows with the
    answer's length, so a fixed bar on it would page on long answers (SLOs on it have burn rates)."""

    ttft_p99_s: float = 5.0
    error_rate: float = 0.05
    ttft_p95_s: float = 1.0
    queue_growth_minutes: int = 5
    heartbeat_s: float = 60.0
    # A decision older than this no longer describes the pool: its rules are unknown (the heartbeat speaks).
    decision_max_age_s: float = 60.0
    outage_traffic_lookback_s: float = 10 * MINUTE
    cold_start_factor: float = 1.5
    cold_start_min_excess_s: float = 30.0
    capacity_min_days: int = 3  # daily peaks the 72-hour forecast needs (day 0 among them)
    trend_min_days: int = 4  # daily figures a trend needs, within the last 7 days
    trend_rise: float = 0.2  # a trend fires once its line rose this much (relative) over its days
    latency_trend_min_rise_s: float = 0.05  # ...and TTFT p95 by at least this much: 10 → 12 ms is noise
    cache_hit_drop: float = 0.2  # the hit rate of the last hours this much (relative) below its baseline
    cache_hit_min_drop: float = 0.05  # ...and at least 5 points lower
    cache_recent_s: float = 6 * HOUR
    cache_recent_min_hours: int = 3
    cache_baseline_min_days: int = 2  # of days 1 to 7


DEFAULTS = Thresholds()


@dataclass(frozen=True)
class BurnRule:
    rule: Rule
    long_s: float
    short_s: float
    factor: float


BURN_FAST = BurnRule(Rule("slo_burn_fast", P0, "Fast error-budget burn", capacity=True), HOUR, 5 * MINUTE, 14.4)
BURN_SLOW = BurnRule(Rule("slo_burn_slow", P1, "Slow error-budget burn", capacity=True), 6 * HOUR, 30 * MINUTE, 6.0)
BURN_RULES = (BURN_FAST, BURN_SLOW)
RULES = {rule.key: rule for rule in (OUTAGE, TTFT_P99, ERRORS, TTFT_P95, QUEUE_GROWTH, STALE, HEARTBEAT, COLD_START,
                                     CANNOT_SCALE,
                                     CAPACITY_72H, LATENCY_TREND, PEAK_GROWTH, CACHE_HIT,
                                     *(burn.rule for burn in BURN_RULES))}
BURN_WINDOWS_S = sorted({w for b in BURN_RULES for w in (b.long_s, b.short_s)})
MIN_WINDOW_SAMPLES = 3
# A window is judged once its samples span half of it: 45 s of history is no 6-hour burn rate.
MIN_WINDOW_COVERAGE = 0.5

# SLO indicator → the signal that measures it (latency SLO thresholds are in ms, signals in s).
SLO_SIGNALS = {"e2e_p95": "e2e_p95_s", "e2e_p99": "e2e_p99_s", "ttft_p95": "ttft_p95_s",
               "queue_time_p95": "queue_time_p95_s", "error_rate": "error_rate"}


@dataclass(frozen=True)
class Verdict:
    rule: Rule
    labels: Mapping[str, str]
    status: str
    summary: str = ""
    numbers: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.labels)


def fingerprint(labels: Mapping[str, str]) -> str:
    """The same labels always give the same alert: one active alert per fingerprint."""
    return hashlib.sha256(json.dumps(dict(labels), sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Next:
    """An alert's next state (None: no change) and when its condition was first seen clear while it fired
    (None: not clearing). On a resolve, `clear_since_s` is kept: resolved at `now`, clear since then."""

    state: str | None
    clear_since_s: float | None = None


def advance(state: str | None, pending_since_s: float | None, status: str, for_s: float, now_s: float, *,
            keep_firing_for_s: float = 0.0, clear_since_s: float | None = None) -> Next:
    """The alert's next state and clear-since time. `state` None: no active alert for this fingerprint.

    A firing alert whose condition reads OK keeps firing and remembers the first clear reading; it resolves
    (at `now_s`, the evaluation at which the hold ran out) once that reading is `keep_firing_for_s` old and
    the latest reading is OK too. A firing reading in the hold forgets it: the same alert goes on, nothing
    changes. An unknown reading changes nothing, the hold's clock included: it keeps counting from the first
    clear reading (only a firing reading restarts it), and the next OK reading may resolve. A pending alert
    that reads OK clears at once, as before the hold.
    """
    if status == UNKNOWN:
        return Next(None, clear_since_s if state == FIRING else None)
    if state is None:
        if status != FIRING:
            return Next(None)
        return Next(FIRING if for_s <= 0 else PENDING)
    if state == PENDING:
        if status == OK:
            return Next(CLEARED)
        held_s = now_s - (pending_since_s if pending_since_s is not None else now_s)
        return Next(FIRING if held_s >= for_s else None)
    if state == FIRING:
        if status == FIRING:
            return Next(None)  # back within the hold (or never gone): the clear time is forgotten
        since_s = clear_since_s if clear_since_s is not None and clear_since_s <= now_s else now_s
        return Next(RESOLVED if now_s - since_s >= keep_firing_for_s else None, since_s)
    return Next(None)


def duration(seconds: float) -> str:
    """45 s, 2 min, 90 s, 1.5 h: how the alert texts say a span."""
    if seconds >= HOUR and seconds % (HOUR / 10) < 1e-6:
        return f"{seconds / HOUR:g} h"
    if seconds >= MINUTE and seconds % MINUTE < 1e-6:
        return f"{seconds / MINUTE:g} min"
    return f"{seconds:.0f} s"


CLEARING = "; condition clear for "


def without_hold(summary: str) -> str:
    """A summary without what `clearing_summary` added: the condition's own words."""
    return summary.split(CLEARING, 1)[0]


def clearing_summary(summary: str, clear_for_s: float, keep_firing_for_s: float, *, resolved: bool) -> str:
    """A firing alert's summary in its resolve hold, or at the resolve the hold ended (with how long it was clear)."""
    if resolved:
        return f"{summary}{CLEARING}{duration(clear_for_s)}: resolved"
    return (f"{summary}{CLEARING}{duration(clear_for_s)}; resolves once clear for "
            f"{duration(keep_firing_for_s)} unless it returns")


# --- per-pool inputs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at_s: float
    queue_depth: float | None = None
    request_rate_rps: float | None = None


@dataclass(frozen=True)
class WindowTotals:
    """Sums over one window of SLO observations: bad and total weight, how many ticks were known,
    and how far back the oldest of them lies."""

    bad: float = 0.0
    total: float = 0.0
    samples: int = 0
    span_s: float = 0.0

    def bad_share(self, window_s: float) -> float | None:
        if self.samples < MIN_WINDOW_SAMPLES or self.total <= 0 or self.span_s < window_s * MIN_WINDOW_COVERAGE:
            return None
        return self.bad / self.total


@dataclass(frozen=True)
class SloFacts:
    slo_id: int
    name: str  # "TTFT p95 ≤ 1000 ms"
    objective: float
    totals: Mapping[float, WindowTotals]  # window seconds → totals


@dataclass(frozen=True)
class PoolFacts:
    pool_id: int
    now_s: float
    decided_at_s: float | None  # the planner's last decision; None: never planned
    signals: Mapping[str, float | None]  # the tick's readings, None: unknown
    staleness_alert: bool = False
    signals_unknown_for_s: float | None = None
    history: Sequence[Sample] = ()  # the stored samples of the last minutes, oldest first
    slos: Sequence[SloFacts] = ()
    cold_start_latest_s: float | None = None
    cold_start_p95_s: float | None = None
    hours: Sequence[trends.Hour] = ()  # hourly means of the stored samples, up to 8 days back
    max_replicas: int | None = None
    capacity_per_replica_rps: float | None = None  # the planner's corrected (effective) capacity
    scale_refusal: str | None = None  # why a write of its replicas would be refused ("": it would not; None: unchecked)


def slo_observation(indicator: str, threshold: float, signals: Mapping[str, float | None]) -> tuple[float, float] | None:
    """One tick's (bad, total) for an SLO, or None when unknown.

    Latency SLOs are judged by time: a tick whose percentile breaks the threshold is a bad tick.
    The error-rate SLO is judged by requests: errors and requests of the tick, by its request rate.
    """
    value = signals.get(SLO_SIGNALS.get(indicator, ""))
    if value is None or not math.isfinite(value):
        return None
    if indicator == "error_rate":
        rate = signals.get("request_rate_rps")
        if rate is None or rate <= 0:
            return None  # no requests: nothing to judge
        return value * rate, rate
    return (1.0 if value * 1000.0 > threshold else 0.0), 1.0


def window_totals(observations: Iterable[tuple[float, float, float]], now_s: float, window_s: float) -> WindowTotals:
    """Sum (at_s, bad, total) observations inside (now - window, now]; the database does the same in SQL."""
    inside = [(at_s, bad, total) for at_s, bad, total in observations if now_s - window_s < at_s <= now_s]
    span_s = now_s - min((at_s for at_s, _, _ in inside), default=now_s)
    return WindowTotals(sum(b for _, b, _ in inside), sum(t for _, _, t in inside), len(inside), span_s)


# --- the rules -------------------------------------------------------------------------------------


def _labels(facts: PoolFacts, rule: Rule, **extra: str) -> dict[str, str]:
    return {"rule": rule.key, "pool": str(facts.pool_id), **extra}


def _threshold_rule(facts: PoolFacts, rule: Rule, signal: str, limit: float, text: str) -> Verdict:
    value = facts.signals.get(signal)
    labels = _labels(facts, rule)
    if value is None:
        return Verdict(rule, labels, UNKNOWN, numbers={signal: None, "threshold": limit})
    status = FIRING if value > limit else OK
    return Verdict(rule, labels, status, text.format(value=value, limit=limit), {signal: value, "threshold": limit})


def outage(facts: PoolFacts, limits: Thresholds) -> Verdict:
    ready = facts.signals.get("ready_replicas")
    labels = _labels(facts, OUTAGE)
    if ready is None:
        return Verdict(OUTAGE, labels, UNKNOWN)
    if ready > 0:
        return Verdict(OUTAGE, labels, OK, f"{ready:.0f} ready replicas", {"ready_replicas": ready})
    rate, queue = facts.signals.get("request_rate_rps"), facts.signals.get("queue_depth")
    if rate is None and queue is None:  # no pod left to ask: the last known rate says whether traffic comes
        recent = [s.request_rate_rps for s in facts.history
                  if s.request_rate_rps is not None and facts.now_s - s.at_s <= limits.outage_traffic_lookback_s]
        rate = recent[-1] if recent else None
    if rate is None and queue is None:
        return Verdict(OUTAGE, labels, UNKNOWN, "no ready replica; traffic unknown", {"ready_replicas": 0})
    traffic = (rate or 0.0) > 0 or (queue or 0.0) > 0
    numbers = {"ready_replicas": 0.0, "request_rate_rps": rate, "queue_depth": queue}
    if not traffic:
        return Verdict(OUTAGE, labels, OK, "no ready replica and no traffic", numbers)
    return Verdict(OUTAGE, labels, FIRING, f"0 ready replicas while {rate or 0:.2f} req/s arrive "
                   f"and {queue or 0:.0f} requests wait", numbers)


def minute_means(history: Sequence[Sample], now_s: float, minutes: int) -> list[float | None]:
    """Mean queue depth per minute, oldest first, ending now; None for a minute with no known sample."""
    sums, counts = [0.0] * minutes, [0] * minutes
    for sample in history:
        index = minutes - 1 - int((now_s - sample.at_s) // MINUTE)
        if 0 <= index < minutes and sample.queue_depth is not None and now_s >= sample.at_s:
            sums[index] += sample.queue_depth
            counts[index] += 1
    return [s / c if c else None for s, c in zip(sums, counts, strict=True)]


def queue_growth(facts: PoolFacts, limits: Thresholds) -> Verdict:
    """Firing when the queue grew in each of the last N minutes (N+1 minute means, each above the last)."""
    means = minute_means(facts.history, facts.now_s, limits.queue_growth_minutes + 1)
    labels = _labels(facts, QUEUE_GROWTH)
    pairs = list(zip(means, means[1:], strict=False))
    if any(a is not None and b is not None and b <= a for a, b in pairs):
        return Verdict(QUEUE_GROWTH, labels, OK, "queue not growing", {"queue_depth": means[-1]})
    if any(m is None for m in means):
        return Verdict(QUEUE_GROWTH, labels, UNKNOWN)
    first, last = means[0], means[-1]
    return Verdict(QUEUE_GROWTH, labels, FIRING,
                   f"queue grew every minute for {limits.queue_growth_minutes} min: {first:.1f} → {last:.1f} waiting",
                   {"queue_depth_start": first, "queue_depth": last, "minutes": float(limits.queue_growth_minutes)})


def stale(facts: PoolFacts) -> Verdict:
    labels = _labels(facts, STALE)
    unknown_for = facts.signals_unknown_for_s
    if not facts.staleness_alert:
        return Verdict(STALE, labels, OK, "metrics fresh", {"signals_unknown_for_s": unknown_for})
    held = f"for {unknown_for:.0f} s" if unknown_for is not None else "since the first tick"
    return Verdict(STALE, labels, FIRING, f"no fresh queue or load metric {held}: the planner holds capacity "
                   "and never scales down", {"signals_unknown_for_s": unknown_for})


def cold_start(facts: PoolFacts, limits: Thresholds) -> Verdict:
    latest, p95 = facts.cold_start_latest_s, facts.cold_start_p95_s
    labels = _labels(facts, COLD_START)
    if latest is None or p95 is None or p95 <= 0:
        return Verdict(COLD_START, labels, UNKNOWN)
    bar = max(p95 * limits.cold_start_factor, p95 + limits.cold_start_min_excess_s)
    numbers = {"cold_start_s": latest, "cold_start_p95_s": p95, "threshold_s": bar}
    if latest <= bar:
        return Verdict(COLD_START, labels, OK, f"last cold start {latest:.0f} s", numbers)
    return Verdict(COLD_START, labels, FIRING, f"last cold start took {latest:.0f} s against a p95 of {p95:.0f} s "
                   f"(alert above {bar:.0f} s): capacity arrives later than the planner expects", numbers)


def cannot_scale(facts: PoolFacts) -> Verdict:
    """The pool's scaling target would refuse a write: found before a surge needs one, with the fix."""
    labels = _labels(facts, CANNOT_SCALE)
    if facts.scale_refusal is None:
        return Verdict(CANNOT_SCALE, labels, UNKNOWN)
    if not facts.scale_refusal:
        return Verdict(CANNOT_SCALE, labels, OK, "its scaling target takes writes")
    return Verdict(CANNOT_SCALE, labels, FIRING, f"a change of its replicas would be refused: {facts.scale_refusal}")


def burn(facts: PoolFacts, slo: SloFacts, burn_rule: BurnRule) -> Verdict:
    """Both windows burn faster than the factor: firing. Either one at or below it: OK (the short
    window lets the alert resolve soon after the burn stops)."""
    rule, budget = burn_rule.rule, 1.0 - slo.objective
    labels = _labels(facts, rule, slo=str(slo.slo_id))
    rates = {}
    for name, window_s in (("long", burn_rule.long_s), ("short", burn_rule.short_s)):
        share = slo.totals.get(window_s, WindowTotals()).bad_share(window_s)
        rates[name] = None if share is None or budget <= 0 else share / budget
    numbers = {"burn_long": rates["long"], "burn_short": rates["short"], "factor": burn_rule.factor,
               "long_window_s": burn_rule.long_s, "short_window_s": burn_rule.short_s}
    text = (f"{slo.name} ({slo.objective:.2%}): error budget burning "
            f"{_x(rates['long'])} over {_window(burn_rule.long_s)} and {_x(rates['short'])} over "
            f"{_window(burn_rule.short_s)} (alert at {burn_rule.factor:g}x)")
    if any(r is not None and r <= burn_rule.factor for r in rates.values()):
        return Verdict(rule, labels, OK, text, numbers)
    if any(r is None for r in rates.values()):
        return Verdict(rule, labels, UNKNOWN, text, numbers)
    return Verdict(rule, labels, FIRING, text, numbers)


def _x(rate: float | None) -> str:
    return "?x" if rate is None else f"{rate:.1f}x"


def _window(seconds: float) -> str:
    return f"{seconds / HOUR:g} h" if seconds >= HOUR else f"{seconds / MINUTE:g} min"


# --- over days: P2 capacity, P3 trends ------------------------------------------------------------


def capacity_72h(facts: PoolFacts, limits: Thresholds) -> Verdict:
    """The busiest hour forecast for the next 72 h against what max replicas serve at the effective capacity."""
    labels = _labels(facts, CAPACITY_72H)
    per_replica, most = facts.capacity_per_replica_rps, facts.max_replicas
    peaks = trends.daily(facts.hours, facts.now_s, "request_rate_rps")
    made = trends.peak_forecast(peaks, limits.capacity_min_days)
    if made is None or not per_replica or per_replica <= 0 or not most:
        return Verdict(CAPACITY_72H, labels, UNKNOWN, numbers={"days_known": float(len(peaks))})
    capacity = most * per_replica
    numbers = {"forecast_peak_rps": made.peak_rps, "capacity_rps": capacity, "max_replicas": float(most),
               "capacity_per_replica_rps": per_replica, "fitted_peak_now_rps": made.growth.level,
               "growth_rps_per_day": made.growth.slope, "hours_ahead": made.day * 24.0}
    how = "last week's same days plus the growth" if made.weekly else f"the trend of {made.growth.days} daily peaks"
    text = (f"busiest hour forecast {made.peak_rps:.2f} req/s within {made.day * 24} h ({how}, "
            f"{made.growth.slope:+.2f} req/s a day) against {capacity:.2f} req/s at max {most} replicas "
            f"× {per_replica:.2f} req/s")
    if made.peak_rps <= capacity:
        return Verdict(CAPACITY_72H, labels, OK, text, numbers)
    return Verdict(CAPACITY_72H, labels, FIRING, text + ": raise max replicas or the per-replica capacity", numbers)


def _trend(facts: PoolFacts, rule: Rule, points: dict[int, float], limits: Thresholds
           ) -> tuple[trends.Line, float] | Verdict:
    """The fitted line over the last 7 days and its relative rise, or the unknown verdict."""
    recent = {day: value for day, value in points.items() if day < 7}
    line = trends.theil_sen(recent) if 0 in recent and len(recent) >= limits.trend_min_days else None
    start = line.at(-line.span_days) if line else None
    if line is None or start is None or start <= 0:
        return Verdict(rule, _labels(facts, rule), UNKNOWN, numbers={"days_known": float(len(recent))})
    return line, line.rise / start


def latency_trend(facts: PoolFacts, limits: Thresholds) -> Verdict:
    """Each day's median hourly TTFT p95 over the last week: firing when the fitted line rose 20 %."""
    fitted = _trend(facts, LATENCY_TREND, trends.daily(facts.hours, facts.now_s, "ttft_p95_s", "median"), limits)
    if isinstance(fitted, Verdict):
        return fitted
    line, rise = fitted
    numbers = {"ttft_p95_s": line.level, "ttft_p95_start_s": line.at(-line.span_days), "rise": rise,
               "days": float(line.span_days)}
    text = (f"TTFT p95 (daily median) {line.at(-line.span_days):.3f} s → {line.level:.3f} s over {line.span_days} days "
            f"({rise:+.0%}, alert at +{limits.trend_rise:.0%})")
    firing = rise >= limits.trend_rise and line.rise >= limits.latency_trend_min_rise_s
    return Verdict(LATENCY_TREND, _labels(facts, LATENCY_TREND), FIRING if firing else OK, text, numbers)


def peak_growth(facts: PoolFacts, limits: Thresholds) -> Verdict:
    """Each day's busiest hour over the last week: firing when the fitted line rose 20 %, with when it
    would reach what max replicas serve."""
    fitted = _trend(facts, PEAK_GROWTH, trends.daily(facts.hours, facts.now_s, "request_rate_rps"), limits)
    if isinstance(fitted, Verdict):
        return fitted
    line, rise = fitted
    capacity = (facts.max_replicas or 0) * (facts.capacity_per_replica_rps or 0)
    numbers = {"peak_rps": line.level, "peak_start_rps": line.at(-line.span_days), "rise": rise,
               "growth_rps_per_day": line.slope, "days": float(line.span_days), "capacity_rps": capacity or None}
    text = (f"daily peak {line.at(-line.span_days):.2f} → {line.level:.2f} req/s over {line.span_days} days "
            f"({rise:+.0%}, alert at +{limits.trend_rise:.0%})")
    if capacity > line.level and line.slope > 0:
        days_left = (capacity - line.level) / line.slope
        numbers["days_to_capacity"] = days_left
        text += f"; at this pace it reaches max capacity ({capacity:.2f} req/s) in about {days_left:.0f} days"
    return Verdict(PEAK_GROWTH, _labels(facts, PEAK_GROWTH), FIRING if rise >= limits.trend_rise else OK, text, numbers)


def cache_hit_degradation(facts: PoolFacts, limits: Thresholds) -> Verdict:
    """The prefix-cache hit rate of the last 6 hours against the median of the days before (days 1 to 7)."""
    labels = _labels(facts, CACHE_HIT)
    recent, hours = trends.recent_mean(facts.hours, facts.now_s, "prefix_cache_hit_rate", limits.cache_recent_s)
    days = {day: value for day, value in trends.daily(facts.hours, facts.now_s, "prefix_cache_hit_rate", "median").items()
            if 1 <= day <= 7}
    if recent is None or hours < limits.cache_recent_min_hours or len(days) < limits.cache_baseline_min_days:
        return Verdict(CACHE_HIT, labels, UNKNOWN, numbers={"recent_hours": float(hours), "baseline_days": float(len(days))})
    baseline = statistics.median(days.values())
    drop = baseline - recent
    numbers = {"hit_rate": recent, "baseline_hit_rate": baseline, "baseline_days": float(len(days))}
    text = (f"prefix-cache hit rate {recent:.0%} over the last {limits.cache_recent_s / HOUR:g} h against "
            f"{baseline:.0%} on the {len(days)} days before")
    firing = drop >= limits.cache_hit_min_drop and drop >= limits.cache_hit_drop * baseline
    return Verdict(CACHE_HIT, labels, FIRING if firing else OK,
                   text + (": prompts changed, the cache shrank, or routing lost its affinity" if firing else ""), numbers)


def evaluate_pool(facts: PoolFacts, limits: Thresholds = DEFAULTS) -> list[Verdict]:
    """Every rule's verdict for one pool. With no recent decision, the signal rules are unknown; the
    rules over days read the stored history, which a stopped loop does not change."""
    verdicts = [cold_start(facts, limits), cannot_scale(facts), capacity_72h(facts, limits), latency_trend(facts, limits),
                peak_growth(facts, limits), cache_hit_degradation(facts, limits)]
    fresh = facts.decided_at_s is not None and facts.now_s - facts.decided_at_s <= limits.decision_max_age_s
    signal_verdicts = [
        outage(facts, limits),
        _threshold_rule(facts, TTFT_P99, "ttft_p99_s", limits.ttft_p99_s, "TTFT p99 {value:.2f} s (alert above {limit:g} s)"),
        _threshold_rule(facts, ERRORS, "error_rate", limits.error_rate,
                        "{value:.1%} of requests failing (alert above {limit:.0%})"),
        _threshold_rule(facts, TTFT_P95, "ttft_p95_s", limits.ttft_p95_s, "TTFT p95 {value:.2f} s (alert above {limit:g} s)"),
        queue_growth(facts, limits),
        stale(facts),
        *(burn(facts, slo, burn_rule) for slo in facts.slos for burn_rule in BURN_RULES),
    ]
    if not fresh:
        signal_verdicts = [Verdict(v.rule, v.labels, UNKNOWN) for v in signal_verdicts]
    return verdicts + signal_verdicts


def heartbeat(cluster_id: int, last_tick_s: float | None, now_s: float, limits: Thresholds = DEFAULTS) -> Verdict:
    """The loop's own health, judged apart from the tick. A cluster never ticked is unknown, not down."""
    labels = {"rule": HEARTBEAT.key, "cluster": str(cluster_id)}
    if last_tick_s is None:
        return Verdict(HEARTBEAT, labels, UNKNOWN)
    silent_s = now_s - last_tick_s
    numbers = {"seconds_since_tick": silent_s, "threshold_s": limits.heartbeat_s}
    if silent_s <= limits.heartbeat_s:
        return Verdict(HEARTBEAT, labels, OK, f"last tick {silent_s:.0f} s ago", numbers)
    return Verdict(HEARTBEAT, labels, FIRING, f"no tick for {silent_s:.0f} s (alert after {limits.heartbeat_s:.0f} s): "
                   "nothing is reading signals or scaling this cluster's pools", numbers)


# --- inhibition and silences -------------------------------------------------------------------------


@dataclass(frozen=True)
class Warming:
    """An approved scale-up whose replicas are expected Ready at `ready_by_s`."""

    proposal_id: int
    current_replicas: int
    target_replicas: int
    since_s: float
    ready_by_s: float


def inhibitor(rule: Rule, warming: Sequence[Warming], now_s: float) -> tuple[int, str] | None:
    """The scale-up that holds back a capacity alert, and the sentence that says so; None: not held."""
    if not rule.capacity:
        return None
    live = [w for w in warming if w.target_replicas > w.current_replicas and w.since_s <= now_s < w.ready_by_s]
    if not live:
        return None
    held = max(live, key=lambda w: w.ready_by_s)
    return held.proposal_id, (
        f"held back: approved scale-up #{held.proposal_id} ({held.current_replicas} → {held.target_replicas} replicas) "
        f"has been warming for {now_s - held.since_s:.0f} s and is expected ready within {held.ready_by_s - now_s:.0f} s")


@dataclass(frozen=True)
class Matcher:
    label: str
    value: str


MATCHABLE = ("rule", "tier", "pool", "cluster", "slo")
ID_LABELS = ("pool", "cluster", "slo")
_ID = re.compile(r"[1-9][0-9]{0,17}")


def parse_matchers(raw: object) -> tuple[Matcher, ...]:
    """[{"label": "pool", "value": "12"}, …]: all must match. Raises ValueError with the reason.

    The shape only, as silences are stored; `validate_matchers` says what a new silence must also get right."""
    if not isinstance(raw, list) or not raw:
        raise ValueError('matchers must be a non-empty list like [{"label": "rule", "value": "ttft_p95"}]')
    matchers = []
    for item in raw:
        if not isinstance(item, dict) or set(item) != {"label", "value"}:
            raise ValueError('each matcher is {"label": …, "value": …}')
        if item["label"] not in MATCHABLE:
            raise ValueError(f"label must be one of {', '.join(MATCHABLE)}, got {item['label']!r}")
        matchers.append(Matcher(str(item["label"]), str(item["value"])))
    return tuple(matchers)


def validate_matchers(raw: object) -> tuple[Matcher, ...]:
    """Matchers some alert can carry: string values, a known rule, a real tier, ids as alerts write them
    (the team's ownership of the ids is the service's check). Raises ValueError with the reason."""
    matchers = parse_matchers(raw)
    for item in cast(list[dict[str, object]], raw):  # (parse_matchers checked the shape)
        if not isinstance(item["value"], str):
            raise ValueError(f'the value of {item["label"]} must be a string, e.g. "12", got {item["value"]!r}')
    by_label = {m.label: m.value for m in matchers}
    if len(by_label) < len(matchers):
        raise ValueError("each label at most once: an alert carries one value of each, and all matchers must match")
    rule = by_label.get("rule")
    if rule is not None and rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    tier = by_label.get("tier")
    if tier is not None and tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    for label in ID_LABELS:
        if label in by_label and not _ID.fullmatch(by_label[label]):
            raise ValueError(f'{label} must be an id like "12", got {by_label[label]!r}')
    if rule is not None and tier is not None and RULES[rule].tier != tier:
        raise ValueError(f"rule {rule} is {RULES[rule].tier}, never {tier}: this silence would match nothing")
    if rule == HEARTBEAT.key and ("pool" in by_label or "slo" in by_label):
        raise ValueError("heartbeat alerts are per cluster, with no pool or slo: match them by cluster")
    if rule is not None and "slo" in by_label and rule not in {burn.rule.key for burn in BURN_RULES}:
        raise ValueError(f"only the burn-rate rules carry an slo, {rule} does not")
    return matchers


def matches(matchers: Sequence[Matcher], labels: Mapping[str, str]) -> bool:
    return bool(matchers) and all(labels.get(m.label) == m.value for m in matchers)
