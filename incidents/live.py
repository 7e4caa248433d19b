"""What the incident view shows, gathered from stored records: the charts (from SignalSample, the loop's
per-tick history), a one-line verdict (better or worse than 5 minutes ago), what Headroom is doing
about it, and the loop's last readings of p99, errors and KV cache."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.safestring import SafeString

from controlplane.charts import Band, Line, Marker, Threshold, time_chart
from controlplane.choices import SloIndicator
from incidents.models import Incident
from incidents.timeline import Entry
from scaling.choices import ProposalState
from scaling.models import PlannerMemory, Proposal, SignalSample

BEFORE = timedelta(minutes=15)  # the charts start this long before the incident opened
MAX_SPAN = timedelta(hours=6)  # a long incident charts its last 6 hours
FORECAST_AHEAD = timedelta(minutes=30)  # the planner's pre-scale horizon (design.md §6)
TREND_LOOKBACK = timedelta(minutes=5)
DEFAULT_COLD_START_S = 90.0


@dataclass(frozen=True)
class Verdict:
    """Is it getting better or worse: the latest reading against the one 5 minutes earlier."""

    direction: str  # worse, better, steady, unknown
    sentence: str


@dataclass
class LiveView:
    charts: list[SafeString] = field(default_factory=list)
    verdict: Verdict = Verdict("unknown", "")
    doing: list[str] = field(default_factory=list)
    now_readings: list[tuple[str, str]] = field(default_factory=list)


def chart_window(incident: Incident, now: datetime) -> tuple[datetime, datetime]:
    end = min(incident.resolved_at + BEFORE, now) if incident.resolved_at else now
    return max(incident.opened_at - BEFORE, end - MAX_SPAN), end


def _reading_then(points: list[tuple[datetime, float | None]], at: datetime) -> float | None:
    """The last known value at or before `at`."""
    known = [value for when, value in points if when <= at and value is not None]
    return known[-1] if known else None


def trend(ttft: list[tuple[datetime, float | None]], queue: list[tuple[datetime, float | None]],
          slo_s: float | None, now: datetime) -> Verdict:
    """Worse when TTFT p95 or the queue grew by more than 10 % over 5 minutes, better when they fell."""
    parts, moves = [], []
    for label, points, unit in (("TTFT p95", ttft, "s"), ("queue", queue, "")):
        latest, earlier = _reading_then(points, now), _reading_then(points, now - TREND_LOOKBACK)
        if latest is None or earlier is None:
            continue
        change = (latest - earlier) / earlier if earlier else (1.0 if latest > 0 else 0.0)
        moves.append(1 if change > 0.1 else -1 if change < -0.1 else 0)
        number = f"{latest:.2f} s" if unit else f"{latest:.0f}"
        was = f"{earlier:.2f} s" if unit else f"{earlier:.0f}"
        parts.append(f"{label} {number} (was {was} 5 min ago)")
    if not moves:
        return Verdict("unknown", "Not enough recent readings to tell whether it is getting better or worse.")
    direction = "worse" if max(moves) > 0 and min(moves) >= 0 else "better" if min(moves) < 0 and max(moves) <= 0 \
        else "steady" if not any(moves) else "mixed"
    latest_ttft = _reading_then(ttft, now)
    over = f"; the SLO is {slo_s:g} s" if slo_s is not None and latest_ttft is not None else ""
    words = {"worse": "Getting worse", "better": "Getting better", "steady": "Steady", "mixed": "Mixed"}[direction]
    return Verdict(direction, f"{words}: {', '.join(parts)}{over}.")


def _slo_s(pool: Any, indicator: str) -> float | None:
    slo = next((s for s in pool.slos.all() if s.indicator == indicator), None)
    return slo.threshold / 1000.0 if slo is not None else None


def markers(entries: list[Entry]) -> list[Marker]:
    """The timeline entries that belong on the time axis, labelled with who acted and where."""
    chosen = []
    for entry in entries:
        if not entry.marker:
            continue
        who = f" ({entry.actor} via {entry.channel})" if entry.kind != "alert" and entry.actor != "Headroom" else ""
        chosen.append(Marker(entry.at, entry.title + who, entry.marker))
    return chosen


def _doing(incident: Incident, memory: PlannerMemory | None, now: datetime) -> list[str]:
    """What Headroom is doing about it, in sentences: its target and the proposals in flight."""
    lines = []
    decision = (memory.last_decision or {}) if memory else {}
    if decision:
        ready, target = decision.get("ready_replicas"), decision.get("target_replicas")
        arriving = decision.get("arriving_replicas") or 0
        if decision.get("hold"):
            lines.append("Holding capacity: the signals are unknown, so Headroom never scales down now.")
        if target is not None and ready is not None:
            lines.append(f"Planner target {target} replicas ({decision.get('binding') or 'no binding term'}); "
                         f"{ready} ready, {arriving} arriving.")
    proposals = Proposal.objects.filter(pool_id=incident.pool_id, state__in=[
        ProposalState.PENDING, ProposalState.APPROVED, ProposalState.EXECUTING]).select_related("decided_by", "pool")
    for proposal in proposals.order_by("created_at"):
        change = f"#{proposal.pk} {proposal.current_replicas} → {proposal.target_replicas} ({proposal.get_kind_display()})"
        if proposal.state == ProposalState.PENDING:
            waited = int((now - proposal.created_at).total_seconds() // 60)
            lines.append(f"Proposal {change} waits for approval since {proposal.created_at:%H:%M} UTC ({waited} min).")
        else:
            since = proposal.applied_at or proposal.decided_at
            cold = proposal.pool.cold_start_p95_s or DEFAULT_COLD_START_S
            by = proposal.decided_by.get_username() if proposal.decided_by else "policy"
            when = f"; expected ready about {since + timedelta(seconds=cold):%H:%M:%S} UTC" if since else ""
            lines.append(f"Proposal {change} approved by {by} via {proposal.decided_channel}, "
                         f"{proposal.get_state_display().lower()}{when}.")
    if not lines:
        lines.append("Nothing in flight: no proposal is pending or executing for this pool.")
    return lines


def _readings_now(memory: PlannerMemory | None) -> list[tuple[str, str]]:
    signals = (memory.last_signals or {}) if memory else {}

    def show(name: str, unit: str, scale: float = 1.0) -> str:
        value = signals.get(name)
        if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
            return "unknown"
        return f"{value * scale:.2f} {unit}" if unit != "%" else f"{value * scale:.1f} %"

    return [("TTFT p99", show("ttft_p99_s", "s")), ("e2e p99", show("e2e_p99_s", "s")),
            ("error rate", show("error_rate", "%", 100)), ("KV cache in use", show("kv_cache_usage", "%", 100))]


def live_view(incident: Incident, entries: list[Entry], now: datetime | None = None) -> LiveView:
    """Charts, verdict and readings for an incident; a system incident (no pool) has no pool charts, nor has the
    incident of a deleted pool (its samples went with it)."""
    now = now or timezone.now()
    view = LiveView()
    if incident.pool_deleted:
        view.verdict = Verdict("unknown", f"Pool {incident.pool_name} has been deleted, and its signals, alerts and "
                                          "proposals with it: what is left is the incident's own timeline below.")
        return view
    if not incident.pool_id:
        view.verdict = Verdict("unknown", "A system incident: the control loop itself stopped. See its alerts below.")
        return view
    pool = incident.pool
    start, end = chart_window(incident, now)
    samples = list(SignalSample.objects.filter(pool=pool, at__gte=start, at__lte=end).order_by("at"))
    memory = PlannerMemory.objects.filter(pool=pool).first()
    tz = incident.cluster.tz
    marks = markers(entries)
    series = {name: [(s.at, getattr(s, name)) for s in samples] for name in (
        "ttft_p95_s", "ttft_p99_s", "e2e_p95_s", "e2e_p99_s", "queue_depth", "request_rate_rps", "ready_replicas",
        "desired_replicas", "target_replicas", "error_rate", "kv_cache_usage", "fallback_share",
        "fallback_answered_share")}
    ttft_slo = _slo_s(pool, SloIndicator.TTFT_P95)
    view.verdict = trend(series["ttft_p95_s"], series["queue_depth"], ttft_slo, end)
    if incident.active:
        view.doing = _doing(incident, memory, now)
        view.now_readings = _readings_now(memory)
    elif view.verdict.sentence:  # a resolved incident: how it stood at the end of its charts, nothing live
        view.verdict = Verdict(view.verdict.direction, f"At {end:%H:%M} UTC: {view.verdict.sentence}")
    common = {"start": start, "end": end, "tz": tz, "markers": marks}
    view.charts += _latency_charts(pool, series, common)
    view.charts.append(time_chart("Requests waiting in the queue", "req",
                                  [Line("waiting requests", series["queue_depth"], "orange")], **common))
    capacity_rps = ((memory.last_decision or {}).get("capacity_per_replica_rps") if memory else None) \
        or pool.replica_capacity_rps
    capacity = [(at, ready * capacity_rps if ready is not None else None) for at, ready in series["ready_replicas"]]
    view.charts.append(time_chart(
        "Demand against effective capacity", "req/s",
        [Line("arriving requests", series["request_rate_rps"], "blue"),
         Line("capacity of ready replicas", capacity, "green")],
        note=f"capacity = ready replicas × {capacity_rps:.2f} req/s (the planner's corrected per-replica capacity)",
        **common))
    view.charts.append(_replicas_chart(incident, series, memory, capacity_rps, common, now))
    view.charts += _health_charts(pool, series, common)
    return view


def _percent(points: list[tuple[datetime, float | None]]) -> list[tuple[datetime, float | None]]:
    return [(at, None if value is None else value * 100.0) for at, value in points]


def _latency_charts(pool: Any, series: dict, common: dict) -> list[SafeString]:
    """TTFT and end-to-end latency, p95 and p99 each, against the pool's SLO lines on them."""
    charts = []
    for title, name, label, indicators in (
            ("Time to first token p95 and p99 against the SLO", "ttft", "time to first token", (SloIndicator.TTFT_P95,)),
            ("End-to-end latency p95 and p99 against the SLO", "e2e", "end-to-end",
             (SloIndicator.E2E_P95, SloIndicator.E2E_P99))):
        thresholds = [Threshold(f"{indicator.label.split(' (')[0]} SLO", value, tone)
                      for indicator, tone in zip(indicators, ("red", "orange"), strict=False)
                      if (value := _slo_s(pool, indicator)) is not None]
        charts.append(time_chart(title, "s", [Line(f"{label} p95", series[f"{name}_p95_s"], "blue"),
                                              Line(f"{label} p99", series[f"{name}_p99_s"], "purple", dashed=True)],
                                 thresholds=thresholds, **common))
    return charts


def _health_charts(pool: Any, series: dict, common: dict) -> list[SafeString]:
    """Error rate (against its SLO and the P0 bar), KV-cache use and the share sent to the fallback, in %."""
    error_slo = next((s.threshold for s in pool.slos.all() if s.indicator == SloIndicator.ERROR_RATE), None)
    error_lines = [Threshold("P0 alert (5 %)", 5.0, "red")]
    if error_slo is not None:
        error_lines.insert(0, Threshold("error-rate SLO", error_slo * 100.0, "orange"))
    return [
        time_chart("Error rate", "%", [Line("requests failing", _percent(series["error_rate"]), "red")],
                   thresholds=error_lines, **common),
        time_chart("KV cache in use", "%", [Line("KV cache in use (mean over ready replicas)",
                                                 _percent(series["kv_cache_usage"]), "teal")],
                   thresholds=[Threshold("full", 100.0, "gray")], **common),
        time_chart("Share of traffic on the fallback pool", "%",
                   [Line("route weight on the fallback", _percent(series["fallback_share"]), "orange"),
                    Line("requests the fallback answered", _percent(series["fallback_answered_share"]), "purple")],
                   note="the weight Headroom wrote and read back, and the share the fallback model answered (the "
                        "weight's, plus the gateway's per-request spill-over)", **common),
    ]


def _replicas_chart(incident: Incident, series: dict, memory: PlannerMemory | None, capacity_rps: float,
                    common: dict, now: datetime) -> SafeString:
    pool = incident.pool
    arriving = [(at, max(0, desired - ready) if desired is not None and ready is not None else None)
                for (at, ready), (_, desired) in zip(series["ready_replicas"], series["desired_replicas"])]
    bands = []
    forecast = (memory.seasonal_forecast or {}) if memory else {}
    end = common["end"]
    if incident.active and forecast.get("expected") is not None and forecast.get("p90") is not None and capacity_rps:
        low = math.ceil(forecast["expected"] / capacity_rps)
        high = math.ceil(forecast["p90"] / capacity_rps)
        bands.append(Band("replicas the 30-min forecast needs (expected to p90)",
                          [(now, low, high), (now + FORECAST_AHEAD, low, high)], "orange"))
        end = now + FORECAST_AHEAD
    return time_chart(
        "Replicas: ready, arriving, desired", "replicas",
        [Line("ready", series["ready_replicas"], "green"), Line("arriving", arriving, "orange"),
         Line("desired (cluster)", series["desired_replicas"], "blue"),
         Line("Headroom's target", series["target_replicas"], "purple", dashed=True)],
        bands=bands, thresholds=[Threshold("max replicas", pool.max_replicas, "gray")],
        start=common["start"], end=end, tz=common["tz"], markers=common["markers"],
        note="shaded: the forecast for the next 30 minutes" if bands else "")


__all__ = ["LiveView", "Verdict", "chart_window", "live_view", "markers", "trend"]
