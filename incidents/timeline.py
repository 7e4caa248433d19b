"""An incident's timeline: one list, in time order, of everything that happened around it.

Each fact is stored once, by the table that owns it: the incident's own events (IncidentEvent), its
alerts' transitions (AlertEvent), the pool's proposals with their approvals, executions and ready
times (ProposalEvent), and the notifications sent about them (Notification). The timeline merges
them on reading rather than copying them into an incident table: a copy would have to be written by
every workflow (scaling/services.py among them), and would drift from the record it copies.

Sources are a registry. Traffic shifts, fallback activations and circuit breakers add themselves with
`@timeline.source` (from their app's `ready()`), returning `Entry` rows for the incident's window;
nothing here changes when they arrive.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.text import capfirst

from incidents.choices import NotificationState
from incidents.models import AlertEvent, Incident, Notification, PlaybookRunStep
from scaling.choices import ProposalState, ShiftPhase
from scaling.models import ProposalEvent, TrafficShiftEvent

# A surge is usually answered before its alert's `for` duration ends: the proposal that did it belongs here.
LOOKBACK = timedelta(minutes=15)
# Shift transitions the charts mark: weights moving in blue, a rollback in orange, the end in green or red.
SHIFT_MARKERS = {ShiftPhase.HOLDING: "blue", ShiftPhase.ROLLING_BACK: "orange", ShiftPhase.ROLLED_BACK: "orange",
                 ShiftPhase.COMPLETED: "green", ShiftPhase.FAILED: "red"}
# Which proposal transitions the charts mark: decisions in blue, replicas turning ready in green.
PROPOSAL_MARKERS = {ProposalState.APPROVED: "blue", ProposalState.REJECTED: "gray", ProposalState.SUCCEEDED: "green",
                    ProposalState.FAILED: "red"}

# At one instant, causes before their effects (the order of registration says nothing): an alert firing before
# the incident it opens, a proposal or shift before the playbook step that waits on it, the notification last.
CAUSAL_RANK = {kind: rank for rank, kind in enumerate(
    ("alert", "incident", "proposal", "shift", "fallback", "breaker", "playbook", "notification"))}


@dataclass(frozen=True)
class Entry:
    """One line of the timeline: when, what (a plain sentence), who and through which channel, and the
    object it links to."""

    at: datetime
    kind: str  # the source: incident, alert, proposal, notification (shift, fallback, breaker later)
    title: str
    actor: str = ""
    channel: str = ""
    detail: str = ""
    object_type: str = ""  # app_label.model of the linked object
    object_id: int | None = None
    url: str = ""
    marker: str = ""  # a chart tone when the entry belongs on the charts' time axis, "" when it does not


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime


Source = Callable[[Incident, Window], Iterable[Entry]]
SOURCES: list[Source] = []


def source(function: Source) -> Source:
    """Register a timeline source: a function of (incident, window) returning Entry rows."""
    if function not in SOURCES:
        SOURCES.append(function)
    return function


def window(incident: Incident, now: datetime | None = None) -> Window:
    return Window(incident.opened_at - LOOKBACK, incident.resolved_at or now or timezone.now())


def timeline(incident: Incident, now: datetime | None = None) -> list[Entry]:
    """Every source's entries for the incident, oldest first."""
    span = window(incident, now)
    entries = [entry for read in SOURCES for entry in read(incident, span)]
    return sorted(entries, key=lambda entry: (entry.at, CAUSAL_RANK.get(entry.kind, len(CAUSAL_RANK))))


def _actor(name: str) -> str:
    return "Headroom" if name.endswith(":system") else name


# --- the sources this app owns ----------------------------------------------------------------------


@source
def incident_events(incident: Incident, span: Window) -> Iterable[Entry]:
    url = reverse("incidents:incident-view", args=[incident.pk])
    for event in incident.events.select_related("alert"):
        # A deleted pool's alerts went with it; its incident's events keep what each alert said (their text).
        alert = f"alert #{event.alert_id}" if event.alert_id else "an alert since deleted"
        title = {
            "opened": f"Incident opened ({incident.severity}) by {alert}",
            "alert_joined": f"{capfirst(alert)} joined the incident",
            "acknowledged": f"Acknowledged by {_actor(event.actor_name)}",
            "mitigated": f"Marked mitigated by {_actor(event.actor_name)}",
            "resolved": f"Resolved by {_actor(event.actor_name)}",
            "note": ("Follow-up" if event.data.get("follow_up") else "Note") + f" from {_actor(event.actor_name)}",
            "severity": "Severity raised",
            "resolve_suggested": "All alerts resolved",
        }.get(event.kind, event.kind)
        marker = "purple" if event.kind in ("acknowledged", "mitigated", "resolved") else ""
        yield Entry(event.at, "incident", title, _actor(event.actor_name), event.channel, event.text,
                    "incidents.incident", incident.pk, url, marker)


@source
def alert_events(incident: Incident, span: Window) -> Iterable[Entry]:
    rows = AlertEvent.objects.filter(alert__incident=incident, at__lte=span.end).select_related("alert")
    for event in rows:
        alert = event.alert
        if event.from_state == event.to_state:
            title = f"Alert #{alert.pk} {alert.rule}: note"
        else:
            title = f"Alert #{alert.pk} {alert.tier} {alert.rule} {event.to_state}"
        marker = "red" if event.from_state != event.to_state and event.to_state in ("firing", "resolved") else ""
        yield Entry(event.at, "alert", title, _actor(event.actor_name), "auto", event.reason, "incidents.alert",
                    alert.pk, reverse("incidents:alerts") + f"#alert-{alert.pk}", marker)


def _proposal_title(event: ProposalEvent) -> str:
    proposal = event.proposal
    change = f"{proposal.current_replicas} → {proposal.target_replicas} replicas"
    if not event.from_state:
        return f"Proposal #{proposal.pk} ({proposal.get_kind_display()}): {change}"
    if event.from_state == event.to_state:
        return f"Proposal #{proposal.pk}: {event.comment or 'note'}"
    verbs = {ProposalState.APPROVED: "approved", ProposalState.REJECTED: "rejected",
             ProposalState.EXECUTING: "executing", ProposalState.SUCCEEDED: "replicas ready",
             ProposalState.FAILED: "failed", ProposalState.EXPIRED: "expired", ProposalState.SUPERSEDED: "superseded"}
    title = f"Proposal #{proposal.pk} {verbs.get(event.to_state, event.to_state)}"
    if event.to_state == ProposalState.SUCCEEDED and proposal.measured_cold_start_s is not None:
        title += f" after {proposal.measured_cold_start_s:.0f} s (measured cold start)"
    return title


@source
def proposal_events(incident: Incident, span: Window) -> Iterable[Entry]:
    if not incident.pool_id:
        return
    rows = ProposalEvent.objects.filter(proposal__pool_id=incident.pool_id, at__gte=span.start, at__lte=span.end) \
        .select_related("proposal")
    for event in rows:
        detail = "; ".join(f"{r.get('code', '')}: {r.get('detail', '')}" for r in event.proposal.reasons or []) \
            if not event.from_state else event.comment
        yield Entry(event.at, "proposal", _proposal_title(event), _actor(event.actor_name), event.channel, detail,
                    "scaling.proposal", event.proposal_id, reverse("approvals") + f"#proposal-{event.proposal_id}",
                    PROPOSAL_MARKERS.get(event.to_state, "") if event.from_state != event.to_state else "")


@source
def notifications(incident: Incident, span: Window) -> Iterable[Entry]:
    about = Q(alert__incident=incident)
    if incident.pool_id:
        about |= Q(proposal__pool_id=incident.pool_id)
    rows = Notification.objects.filter(about, created_at__gte=span.start, created_at__lte=span.end) \
        .exclude(state=NotificationState.SKIPPED).select_related("channel")
    for note in rows:
        subject = f"alert #{note.alert_id}" if note.alert_id else f"proposal #{note.proposal_id}"
        state = {"delivered": "sent", "pending": "queued", "failed": "failed"}.get(note.state, note.state)
        yield Entry(note.delivered_at or note.created_at, "notification",
                    f"{note.get_kind_display()} about {subject} to {note.channel.name}: {state}",
                    channel=note.channel.kind, detail=note.last_error, object_type="incidents.notification",
                    object_id=note.pk, url=reverse("incidents:channels"))


def _shift_title(event: TrafficShiftEvent) -> str:
    shift = event.shift
    if not event.from_phase:
        return f"Shift #{shift.pk} started: {shift.from_backend} → {shift.to_backend} ({', '.join(f'{s} %' for s in shift.steps)})"
    if event.from_phase == event.to_phase:
        return f"Shift #{shift.pk}: {event.comment or 'note'}"
    if event.to_phase == ShiftPhase.HOLDING:
        return f"Shift #{shift.pk} step {event.step}: {shift.steps[event.step - 1]} % on {shift.to_backend}"
    verbs = {ShiftPhase.ROLLING_BACK: "rolling back", ShiftPhase.ROLLED_BACK: "rolled back",
             ShiftPhase.WAITING_APPROVAL: "waits for approval", ShiftPhase.STEPPING: f"writing step {event.step}"}
    return f"Shift #{shift.pk} {verbs.get(event.to_phase, event.to_phase)}"


@source
def shift_events(incident: Incident, span: Window) -> Iterable[Entry]:
    """Traffic shifts to or from the incident's pool: each step, check failure and rollback."""
    if not incident.pool_id:
        return
    rows = TrafficShiftEvent.objects.filter(Q(shift__from_pool_id=incident.pool_id) | Q(shift__to_pool_id=incident.pool_id),
                                            at__gte=span.start, at__lte=span.end).select_related("shift")
    for event in rows:
        url = reverse("pool-detail", args=[event.shift.to_pool_id]) + f"#shift-{event.shift_id}"
        marker = SHIFT_MARKERS.get(event.to_phase, "") if event.from_phase != event.to_phase else ""
        yield Entry(event.at, "shift", _shift_title(event), _actor(event.actor_name), event.channel, event.comment,
                    "scaling.trafficshift", event.shift_id, url, marker)


@source
def playbook_steps(incident: Incident, span: Window) -> Iterable[Entry]:
    """Playbook steps as they were last settled (done, skipped, failed, or started and waiting)."""
    url = reverse("incidents:incident-view", args=[incident.pk]) + "#playbooks"
    rows = PlaybookRunStep.objects.filter(run__incident=incident, updated_at__isnull=False).select_related("run")
    for step in rows:
        yield Entry(step.updated_at, "playbook", f"Playbook {step.run.playbook_name} step {step.position} "
                                                 f"({step.title}): {step.get_state_display().lower()}",
                    _actor(step.actor_name), step.channel, step.reason, "incidents.playbookrun", step.run_id, url)


__all__ = ["Entry", "LOOKBACK", "SOURCES", "Window", "source", "timeline", "window"]
