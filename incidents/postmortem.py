"""The postmortem of an incident as Markdown: summary, impact (SLO minutes and requests), timeline,
decisions with their reasons, the what-if replay, notes and follow-ups. Everything comes from stored records; a number
that cannot be known from them (an SLO the samples do not keep, a window older than them) says so."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from controlplane.choices import SloIndicator
from incidents.choices import IncidentEventKind
from incidents.models import Incident
from incidents.timeline import Entry, timeline
from scaling.choices import ReportState
from scaling.models import Proposal, SignalSample

# A sample stands for the time until the next one, but never longer than this: a longer silence is unknown.
MAX_SAMPLE_SPAN_S = 60.0
# SLO indicators the per-tick history (SignalSample) keeps, and the field that holds each.
SAMPLED_INDICATORS = {SloIndicator.TTFT_P95: "ttft_p95_s", SloIndicator.E2E_P95: "e2e_p95_s",
                      SloIndicator.E2E_P99: "e2e_p99_s"}


@dataclass(frozen=True)
class Impact:
    """How long an objective was broken during a window, and how many requests arrived then."""

    breached_minutes: float
    known_minutes: float  # minutes with a reading (the rest is unknown, not good)
    requests: float  # all requests in the window, from the request rate
    requests_in_breach: float


def slo_impact(points: Sequence[tuple[datetime, float | None, float | None]], threshold: float, end: datetime) -> Impact:
    """`points` are (at, indicator value, request rate) in time order; a value above `threshold` breaks the SLO."""
    breached = known = requests = in_breach = 0.0
    for index, (at, value, rate) in enumerate(points):
        following = points[index + 1][0] if index + 1 < len(points) else end
        span_s = max(0.0, min((following - at).total_seconds(), MAX_SAMPLE_SPAN_S))
        served = (rate or 0.0) * span_s
        requests += served
        if value is None:
            continue
        known += span_s
        if value > threshold:
            breached += span_s
            in_breach += served
    return Impact(breached / 60.0, known / 60.0, requests, in_breach)


def _clock(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M:%S} UTC" if at else "—"


def _after(at: datetime | None, since: datetime) -> str:
    if at is None:
        return ""
    minutes = (at - since).total_seconds() / 60.0
    return f" ({minutes:.0f} min after opening)"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _no_pool(incident: Incident, system: str) -> list[str]:
    """What a section says when the incident has no pool: a system incident's reason, or the pool was deleted."""
    if incident.pool_deleted:
        return [f"Unknown: pool {incident.pool_name} has been deleted, and its records with it."]
    return [system]


def _summary(incident: Incident, end: datetime) -> list[str]:
    scope = f"the control loop of cluster **{incident.cluster.name}**" if incident.is_system else f"pool **{incident.scope}**"
    commander = incident.commander.get_username() if incident.commander else "nobody"
    lines = [
        f"{incident.severity} incident on {scope}: {incident.title}.",
        "",
        f"- Opened: {_clock(incident.opened_at)}",
        f"- Acknowledged: {_clock(incident.acknowledged_at)}{_after(incident.acknowledged_at, incident.opened_at)}",
        f"- Mitigated: {_clock(incident.mitigated_at)}{_after(incident.mitigated_at, incident.opened_at)}",
        f"- Resolved: {_clock(incident.resolved_at)}{_after(incident.resolved_at, incident.opened_at)}",
        f"- State: {incident.get_state_display()}; commander: {commander}; "
        f"duration {(end - incident.opened_at).total_seconds() / 60:.0f} min"
        + ("" if incident.resolved_at else " so far"),
    ]
    alerts = list(incident.alerts.order_by("started_at"))
    if alerts:
        lines.append("- Alerts: " + "; ".join(f"#{a.pk} {a.tier} {a.rule} ({a.state})" for a in alerts))
    elif incident.pool_deleted:
        lines.append("- Alerts: deleted with the pool; the timeline keeps what each said when it opened or joined "
                     "the incident.")
    return lines


def _impact(incident: Incident, end: datetime) -> list[str]:
    if not incident.pool_id:
        return _no_pool(incident, "No pool: a system incident has no per-pool SLO impact.")
    start = min([incident.opened_at] + [a.started_at for a in incident.alerts.all()])
    samples = list(SignalSample.objects.filter(pool_id=incident.pool_id, at__gte=start, at__lte=end).order_by("at"))
    if not samples:
        return [f"No per-tick samples between {_clock(start)} and {_clock(end)} (they are kept 9 days)."]
    lines = [f"From {_clock(start)} (the first alert's condition) to {_clock(end)}:", ""]
    lines += ["| objective | breached | known | requests | requests while breached |", "|---|---|---|---|---|"]
    judged = False
    for slo in incident.pool.slos.all():
        name = SAMPLED_INDICATORS.get(slo.indicator)
        if name is None:
            continue
        judged = True
        impact = slo_impact([(s.at, getattr(s, name), s.request_rate_rps) for s in samples], slo.threshold / 1000.0, end)
        lines.append(f"| {slo.get_indicator_display()} ≤ {slo.threshold:g} ms | {impact.breached_minutes:.1f} min "
                     f"| {impact.known_minutes:.1f} min | {impact.requests:,.0f} | {impact.requests_in_breach:,.0f} |")
    if not judged:
        lines.append("| (no TTFT p95, e2e p95 or e2e p99 SLO on this pool) | | | | |")
    others = [slo.get_indicator_display() for slo in incident.pool.slos.all() if slo.indicator not in SAMPLED_INDICATORS]
    if others:
        lines += ["", f"Not judged here (the per-tick history does not keep them): {', '.join(others)}; "
                      "see the burn-rate alerts in the timeline."]
    ttft = [s.ttft_p95_s for s in samples if s.ttft_p95_s is not None]
    queue = [s.queue_depth for s in samples if s.queue_depth is not None]
    ready = [s.ready_replicas for s in samples if s.ready_replicas is not None]
    peaks = []
    if ttft:
        peaks.append(f"worst TTFT p95 {max(ttft):.2f} s")
    if queue:
        peaks.append(f"longest queue {max(queue):.0f} requests")
    if ready:
        peaks.append(f"ready replicas {min(ready)}–{max(ready)}")
    if peaks:
        lines += ["", "Peaks: " + ", ".join(peaks) + "."]
    return lines


def _what_if(incident: Incident) -> list[str]:
    """The replay of the incident's window at other warm-pool settings (scaling/report_service.request_what_if)."""
    if not incident.pool_id:
        return _no_pool(incident, "None: a system incident has no pool to replay.")
    report = incident.what_if
    if report is None:
        return ["Not replayed: start it from the incident page (What if) or with "
                "`POST /api/v1/incidents/{id}/what-if/`."]
    if report.state == ReportState.FAILED:
        return [f"The replay (report #{report.pk}) could not be made: {_cell(report.error)}"]
    if report.state != ReportState.SUCCEEDED:
        return [f"The replay (report #{report.pk}) is {report.get_state_display().lower()}, "
                f"{report.percent_done} % done: export again when it has finished."]
    what_if = report.result.get("what_if") or {}
    lines = [f"Replay of {_clock(report.window_start)} to {_clock(report.window_end)} (warm-pool report #{report.pk}, "
             f"{report.get_peak_basis_display().lower()}):", "", what_if.get("summary", ""), ""]
    lines += ["| setting | fallback | would have met | others missed | SLO met | $/month more |", "|---|---|---|---|---|---|"]
    for alternative in what_if.get("alternatives", []):
        lines.append(f"| {alternative['warm_pool_pct']:g} % | {'yes' if alternative['with_fallback'] else 'no'} "
                     f"| {alternative['would_have_met']:,} of {alternative['missed']:,} | {alternative['newly_missed']:,} "
                     f"| {alternative['slo_attainment']:.2%} | {alternative['extra_cost_usd_per_month']:+,.0f} |")
    trust = (report.result.get("observed_vs_replay") or {}).get("summary")
    lines += ["", f"$/month is {what_if.get('cost_basis', 'the window’s extra cost, run for 30 days')}; the replay's "
                  "assumptions are in the report." + (f" How far to trust it: {trust}" if trust else "")]
    return lines


def _timeline(entries: Sequence[Entry]) -> list[str]:
    lines = ["| time (UTC) | what | who, where | detail |", "|---|---|---|---|"]
    for entry in entries:
        who = ", ".join(part for part in (entry.actor, entry.channel) if part)
        lines.append(f"| {entry.at:%H:%M:%S} | {_cell(entry.title)} | {_cell(who)} | {_cell(entry.detail)[:300]} |")
    return lines


def _decisions(incident: Incident, start: datetime, end: datetime) -> list[str]:
    if not incident.pool_id:
        return _no_pool(incident, "None: a system incident has no pool to scale.")
    proposals = Proposal.objects.filter(pool_id=incident.pool_id, created_at__gte=start, created_at__lte=end) \
        .select_related("requested_by", "decided_by").order_by("created_at")
    lines = []
    for proposal in proposals:
        by = proposal.requested_by.get_username() if proposal.requested_by else "Headroom"
        line = (f"- **#{proposal.pk} {proposal.get_kind_display()} {proposal.current_replicas} → "
                f"{proposal.target_replicas}**, proposed by {by} via {proposal.requested_channel} at "
                f"{proposal.created_at:%H:%M:%S}: {proposal.get_state_display().lower()}")
        if proposal.decided_at:
            decider = proposal.decided_by.get_username() if proposal.decided_by else "policy"
            line += f"; decided by {decider} via {proposal.decided_channel} at {proposal.decided_at:%H:%M:%S}"
            if proposal.decision_comment:
                line += f" (“{_cell(proposal.decision_comment)}”)"
        if proposal.applied_at:
            line += f"; applied {proposal.applied_at:%H:%M:%S}"
        if proposal.measured_cold_start_s is not None:
            line += f"; ready after {proposal.measured_cold_start_s:.0f} s"
        lines.append(line + ".")
        for reason in proposal.reasons or []:
            lines.append(f"  - `{reason.get('code', '')}` {_cell(reason.get('detail', ''))}")
    return lines or ["No proposal for this pool during the incident."]


def render(incident: Incident, now: datetime | None = None) -> str:
    """The incident's postmortem as Markdown."""
    now = now or timezone.now()
    end = incident.resolved_at or now
    entries = timeline(incident, now)
    notes = list(incident.events.filter(kind=IncidentEventKind.NOTE).order_by("at"))
    follow_ups = [note for note in notes if note.data.get("follow_up")]
    sections = [
        [f"# Postmortem: incident #{incident.pk}, {incident.title}"],
        ["## Summary", "", *_summary(incident, end)],
        ["## Impact", "", *_impact(incident, end)],
        ["## Timeline", "", *_timeline(entries)],
        ["## Decisions", "", *_decisions(incident, incident.opened_at - timedelta(minutes=15), end)],
        ["## What if", "", *_what_if(incident)],
        ["## Notes", "", *([f"- {note.at:%H:%M:%S} {note.actor_name}: {_cell(note.text)}" for note in notes]
                           or ["None."])],
        ["## Follow-ups", "", *([f"- [ ] {_cell(note.text)} ({note.actor_name})" for note in follow_ups]
                                or ["None recorded yet: mark a note as a follow-up on the incident page or with "
                                    "`POST /api/v1/incidents/{id}/notes/` and `\"follow_up\": true`."])],
        [f"_Generated by Headroom at {_clock(now)}._"],
    ]
    return "\n\n".join("\n".join(section) for section in sections) + "\n"


__all__ = ["Impact", "render", "slo_impact"]
