"""A pool "now", at a glance: each reading next to its objective and coloured by it, its trend over the
last 5 minutes, the replica ceiling, what waits for a person and since when, and how fresh the data is.

Pure Python (no Django): `templatetags/glance.py` gathers the values from the database once per pool
and the fleet and pool pages render the result. Unknown is shown as unknown, never as zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

TREND_WINDOW_S = 300.0  # "better or worse" compares with the reading this long ago
TREND_TOLERANCE = 0.10  # changes under 10 % are steady
WARN_SHARE = 0.8  # a reading above 80 % of its objective is a warning, above 100 % a breach
FRESH_S = 45.0  # three ticks: older replica reads mean the loop is not reading this pool


@dataclass(frozen=True)
class Reading:
    label: str  # "TTFT p95"
    value: str  # "0.82 s", or "unknown"
    objective: str  # "≤ 1 s", or "" when there is none
    level: str  # "ok", "warn", "bad", or "unknown"
    trend: str  # "better", "worse", "steady", or "" when there is nothing to compare with


@dataclass(frozen=True)
class PoolNow:
    readings: tuple[Reading, ...]
    at_ceiling: str  # "at its replica ceiling (8)" or ""
    waiting: str  # "waiting for approval since 04:52 UTC (4 min): …" or ""
    freshness: str  # "read 12 s ago", or "not read for 3 min: why"
    fresh: bool
    unheard: str = ""  # "ML Platform has no notification channel: …", or "" when someone hears about the pool
    unprotected: str = ""  # "no SLO: …", or "" when the planner aims at the pool's own TTFT p95 SLO


def level(value: float | None, objective: float | None) -> str:
    if value is None:
        return "unknown"
    if objective is None or objective <= 0:
        return "ok"
    return "ok" if value <= WARN_SHARE * objective else "warn" if value <= objective else "bad"


def trend(now: float | None, before: float | None) -> str:
    """Lower is better for every reading shown (latency, queue)."""
    if now is None or before is None:
        return ""
    scale = max(abs(before), 1e-9)
    change = (now - before) / scale
    return "worse" if change > TREND_TOLERANCE else "better" if change < -TREND_TOLERANCE else "steady"


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


def _age(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def latency_reading(label: str, now: float | None, before: float | None, objective_s: float | None) -> Reading:
    return Reading(label, "unknown" if now is None else _seconds(now),
                   "" if objective_s is None else f"≤ {objective_s:g} s", level(now, objective_s), trend(now, before))


def queue_reading(now: float | None, before: float | None, ready: int | None, target_per_replica: float) -> Reading:
    """Waiting requests per ready replica against the pool's target queue per replica."""
    per_replica = None if now is None or not ready else now / ready
    value = "unknown" if now is None else f"{now:.0f} waiting" + ("" if per_replica is None else f" ({per_replica:.1f}/replica)")
    return Reading("queue", value, f"≤ {target_per_replica:g}/replica", level(per_replica, target_per_replica),
                   trend(now, before))


def ceiling(desired: int | None, max_replicas: int) -> str:
    return f"at its replica ceiling ({max_replicas})" if desired is not None and desired >= max_replicas else ""


def waiting(since: datetime | None, now: datetime, why: str) -> str:
    """"waiting for approval since 04:52 UTC (4 min): <who may approve and why a person is needed>"."""
    if since is None:
        return ""
    minutes = max(0, int((now - since).total_seconds() // 60))
    return f"waiting for approval since {since:%H:%M} UTC ({minutes} min): {why}"


def unheard(team: str, enabled: int, disabled: int) -> str:
    """Why nobody hears about the pool: alerts and proposals waiting for approval go to its team's enabled
    channels only (`incidents.services.fan_out`, `incidents.alerts`), so a team with none is told nothing."""
    if enabled:
        return ""
    if disabled:
        return (f"nobody is told about this pool: every notification channel of {team} is disabled, so its alerts "
                f"and the proposals waiting for approval reach no one; fix the channel and switch it on")
    return (f"nobody is told about this pool: {team} has no notification channel, so its alerts and the proposals "
            f"waiting for approval reach no one; add a Slack or webhook channel")


def unprotected(indicators: set[str], default_ttft_s: float) -> str:
    """What a pool without SLOs (or without the TTFT p95 one the planner plans to) silently runs on."""
    if not indicators:
        return (f"no SLO: the planner aims at a default TTFT p95 of {default_ttft_s:g} s and no error-budget (burn-rate) "
                f"alert can fire; add the pool's SLOs")
    if "ttft_p95" not in indicators:
        return (f"no TTFT p95 SLO: the planner plans to TTFT p95 only, so it aims at a default {default_ttft_s:g} s; "
                f"the pool's other SLOs drive alerts, not scaling")
    return ""


def read_errors(errors: dict[str, str], names_shown: int = 3) -> str:
    """What the last tick could not read, one clause per reason: a proxy answering every query with the same
    502 is one clause naming a few of the queries, not twenty copies of the page."""
    by_reason: dict[str, list[str]] = {}
    for source, why in errors.items():
        by_reason.setdefault(why, []).append(source)
    clauses = []
    for why, sources in by_reason.items():
        named = ", ".join(sources[:names_shown]) + (f" and {len(sources) - names_shown} more"
                                                     if len(sources) > names_shown else "")
        clauses.append(f"{named}: {why}")
    return "; ".join(clauses)


def freshness(observed_at: datetime | None, now: datetime, last_error: str, signals_unknown_s: float | None,
              read_errors: str = "") -> tuple[str, bool]:
    """How old the pool's data is, and why when it is not fresh (`read_errors`: what the last tick could not read)."""
    # A read that failed (a Deployment that does not exist, a refused token) says why it was never read.
    failed = f"the last tick could not read it ({read_errors})" if read_errors else ""
    if observed_at is None:
        reason = last_error or failed or "Headroom has never read it from its cluster"
        return f"not read: {reason}", False
    age_s = max(0.0, (now - observed_at).total_seconds())
    if age_s > FRESH_S:
        reason = last_error or failed or "the control loop has not read this pool since (is the worker running?)"
        return f"not read for {_age(age_s)}: {reason}", False
    if signals_unknown_s is not None:  # math.inf: unknown since the planner started
        since = f" for {_age(signals_unknown_s)}" if math.isfinite(signals_unknown_s) else ""
        # No read failed, so Prometheus answered (or is not set): without this pool's series, or only stale ones.
        why = read_errors or ("no fresh vLLM series from Prometheus for this pool: is the cluster's Prometheus set, "
                              "and are the pool's pods scraped?")
        return f"replicas read {_age(age_s)} ago; signals unknown{since} ({why}): holding, never scaling down", False
    return f"read {_age(age_s)} ago", True
