"""Incident workflows: P0/P1 alerts open or join an incident, people acknowledge, mitigate and resolve it.

An incident belongs to one pool (or, for the loop's heartbeat, to a cluster: a system incident), and keeps
the pool's name should the pool be deleted (`Incident.pool_name`: a system incident has none). The
alert workflow (incidents/alerts.py) calls `on_alert_firing` and `on_alert_resolved` inside its own
transaction; the browser, the API and Slack call `acknowledge`, `mitigate`, `resolve` and `add_note`.
Each transition locks the incident row, re-checks its state, and writes an IncidentEvent and an audit
record in one transaction. Clearing alerts only *suggest* resolving: a person says when it is over.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel, Role
from controlplane.errors import ServiceError
from incidents import rules
from incidents.choices import (
    ACTIVE_ALERT_STATES,
    ACTIVE_INCIDENT_STATES,
    INCIDENT_TIERS,
    INCIDENT_TRANSITIONS,
    AlertState,
    IncidentEventKind,
    IncidentState,
)
from incidents.models import Alert, Incident, IncidentEvent

AUTO = core.Actor(user=None, channel=ActorChannel.AUTO)
ACTIVE = sorted(ACTIVE_INCIDENT_STATES)
NOTE_MAX_CHARS = 4000


class IncidentError(ServiceError):
    """Base of the errors a caller turns into an answer (400, 403, 409)."""


class InvalidIncidentInput(IncidentError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def payload(self) -> dict[str, Any]:
        return {self.field: [str(self)]}


class IncidentConflict(IncidentError):
    status_code = 409

    def __init__(self, incident: Incident, message: str) -> None:
        super().__init__(message)
        self.incident = incident

    def payload(self) -> dict[str, Any]:
        return {"detail": str(self), "state": self.incident.state, "id": self.incident.pk}


@dataclass(frozen=True)
class Transition:
    """What a person's action did: the incident as it is now, and whether this call changed it."""

    incident: Incident
    changed: bool


def _event(incident: Incident, kind: str, actor: core.Actor, now: datetime, *, text: str = "", from_state: str = "",
           alert: Alert | None = None, **data: Any) -> IncidentEvent:
    return IncidentEvent.objects.create(incident=incident, at=now, kind=kind, from_state=from_state,
                                        to_state=incident.state, actor_name=actor.name, channel=actor.channel,
                                        text=text, alert=alert, data=data)


def _title(alert: Alert) -> str:
    rule = rules.RULES.get(alert.rule)
    return f"{rule.title if rule else alert.rule} on {alert.pool or alert.cluster.name}"[:200]


# --- alerts open, join and clear incidents ------------------------------------------------------------


def _active_for(alert: Alert) -> Incident | None:
    scope = {"pool": alert.pool} if alert.pool_id else {"cluster": alert.cluster, "pool__isnull": True, "pool_name": ""}
    return Incident.objects.select_for_update().filter(state__in=ACTIVE, **scope).first()


def on_alert_firing(alert: Alert, now: datetime) -> Incident | None:
    """Open the pool's incident for a firing P0/P1 alert, or add the alert to the one already open.

    Called in the alert evaluation's transaction. Silenced alerts open nothing (a person muted them);
    an alert a warming scale-up holds back still joins, and its timeline says it is held back.
    """
    if alert.tier not in INCIDENT_TIERS or alert.state != AlertState.FIRING or alert.incident_id or alert.silenced_by_id:
        return None
    incident = _active_for(alert)
    if incident is None:
        try:
            with transaction.atomic():
                incident = Incident.objects.create(team=alert.team, cluster=alert.cluster, pool=alert.pool,
                                                   pool_name=alert.pool.name if alert.pool_id else "",
                                                   title=_title(alert), severity=alert.tier, opened_at=now)
                _event(incident, IncidentEventKind.OPENED, AUTO, now, alert=alert, to_tier=alert.tier,
                       text=f"{alert.tier} {alert.rule}: {alert.summary}")
                core.record(AUTO, "open_incident", incident, team=alert.team)
        except IntegrityError:
            incident = _active_for(alert)  # another worker opened it a moment ago: join that one
            if incident is None:
                return None
            _join(incident, alert, now)
    else:
        _join(incident, alert, now)
    Alert.objects.filter(pk=alert.pk).update(incident=incident)
    alert.incident = incident
    return incident


def _join(incident: Incident, alert: Alert, now: datetime) -> None:
    _event(incident, IncidentEventKind.ALERT_JOINED, AUTO, now, alert=alert,
           text=f"{alert.tier} {alert.rule}: {alert.summary}")
    changes: list[str] = []
    if alert.tier < incident.severity:  # "P0" < "P1": more urgent
        _event(incident, IncidentEventKind.SEVERITY, AUTO, now, alert=alert, from_tier=incident.severity,
               to_tier=alert.tier, text=f"severity raised from {incident.severity} to {alert.tier} by {alert.rule}")
        incident.severity = alert.tier
        changes.append("severity")
    if incident.resolve_suggested_at is not None:  # firing again: the suggestion no longer holds
        incident.resolve_suggested_at = None
        changes.append("resolve_suggested_at")
    if changes:
        incident.save(update_fields=changes)


def on_alert_resolved(alert: Alert, now: datetime) -> None:
    """When the incident's last alert resolves, suggest resolving it (a person decides)."""
    if not alert.incident_id:
        return
    incident = Incident.objects.select_for_update().filter(pk=alert.incident_id, state__in=ACTIVE).first()
    if incident is None or incident.alerts.filter(state__in=ACTIVE_ALERT_STATES).exists():
        return
    if incident.resolve_suggested_at is None:
        incident.resolve_suggested_at = now
        incident.save(update_fields=["resolve_suggested_at"])
        _event(incident, IncidentEventKind.RESOLVE_SUGGESTED, AUTO, now,
               text="every alert of this incident has resolved; resolve it once the pool is healthy")


# --- people act on incidents --------------------------------------------------------------------------


def _locked(incident_id: int) -> Incident:
    return Incident.objects.select_for_update(of=("self",)).select_related("team", "cluster", "pool").get(pk=incident_id)


def _check_may_act(incident: Incident, actor: core.Actor) -> None:
    """Operators of the incident's team, in a cluster the team may act in (as for approvals)."""
    core.check_may_change(actor.user, incident.team, incident.cluster, Role.OPERATOR)


def _clean_text(text: str, *, required: bool) -> str:
    text = (text or "").replace("\x00", "").strip()
    if required and not text:
        raise InvalidIncidentInput("text", "A note needs some text.")
    if len(text) > NOTE_MAX_CHARS:
        raise InvalidIncidentInput("text", f"At most {NOTE_MAX_CHARS} characters; got {len(text)}.")
    return text


def _moved_by(incident: Incident) -> str:
    """Who moved the incident into its current state (not its commander: Bob may resolve Alice's incident)."""
    if incident.state == IncidentState.OPEN:
        return ""
    return incident.events.filter(kind=incident.state).order_by("-at", "-pk").values_list("actor_name", flat=True).first() \
        or (incident.commander.get_username() if incident.commander else "")


def _move(incident_id: int, target: str, actor: core.Actor, text: str, now: datetime | None) -> Transition:
    now = now or timezone.now()
    text = _clean_text(text, required=False)
    with transaction.atomic():
        incident = _locked(incident_id)
        _check_may_act(incident, actor)
        source = incident.state
        if target not in INCIDENT_TRANSITIONS.get(source, frozenset()):
            who = f" by {by}" if (by := _moved_by(incident)) else ""
            raise IncidentConflict(incident, f"Incident #{incident.pk} is {source}{who}; it cannot become {target}.")
        before = core.snapshot(incident)
        incident.state = target
        setattr(incident, f"{target}_at", now)
        if incident.commander_id is None and actor.user is not None and target != IncidentState.RESOLVED:
            incident.commander = actor.user  # whoever takes it first leads until handed over
        incident.save()
        _event(incident, target, actor, now, text=text, from_state=source)
        core.record(actor, target, incident, before=before, team=incident.team)
    return Transition(incident, True)


def acknowledge(incident_id: int, actor: core.Actor, text: str = "", now: datetime | None = None) -> Transition:
    """Someone is on it: open → acknowledged; they become the commander if there is none.

    Acknowledging twice answers with the incident unchanged when the same person repeats it (a double
    click), and IncidentConflict when someone else already did (they are told who).
    """
    try:
        return _move(incident_id, IncidentState.ACKNOWLEDGED, actor, text, now)
    except IncidentConflict as exc:
        incident = exc.incident
        if incident.state == IncidentState.ACKNOWLEDGED and actor.user is not None and incident.commander_id == actor.user.pk:
            return Transition(incident, False)
        raise


def mitigate(incident_id: int, actor: core.Actor, text: str = "", now: datetime | None = None) -> Transition:
    """The impact has stopped (capacity arrived, traffic moved) though the cause may remain."""
    return _move(incident_id, IncidentState.MITIGATED, actor, text, now)


def resolve(incident_id: int, actor: core.Actor, text: str = "", now: datetime | None = None) -> Transition:
    """It is over. Final: a new firing opens a new incident."""
    return _move(incident_id, IncidentState.RESOLVED, actor, text, now)


def add_note(incident_id: int, actor: core.Actor, text: str, *, follow_up: bool = False,
             now: datetime | None = None) -> IncidentEvent:
    """A note on the timeline (also after resolving, for the postmortem). `follow_up` marks work to do later."""
    now = now or timezone.now()
    text = _clean_text(text, required=True)
    with transaction.atomic():
        incident = _locked(incident_id)
        _check_may_act(incident, actor)
        event = _event(incident, IncidentEventKind.NOTE, actor, now, text=text, follow_up=follow_up)
        core.record(actor, "note", incident, after={"note": text, "follow_up": follow_up}, team=incident.team)
    return event


def close_drill(incident_id: int, text: str, now: datetime | None = None) -> None:
    """A drill's end resolves its incident (the drill, not a person, decides when practice is over)."""
    _close_by_system(incident_id, text, now, drills_only=True)


def close_abandoned(incident_id: int, text: str, now: datetime | None = None) -> None:
    """Resolve an incident whose world is gone (a retired sandbox's): nobody is left to resolve it, and `text`
    says why on its timeline."""
    _close_by_system(incident_id, text, now, drills_only=False)


def _close_by_system(incident_id: int, text: str, now: datetime | None, *, drills_only: bool) -> None:
    now = now or timezone.now()
    with transaction.atomic():
        incident = _locked(incident_id)
        if (drills_only and not incident.is_drill) or incident.state not in ACTIVE:
            return
        source, before = incident.state, core.snapshot(incident)
        incident.state, incident.resolved_at = IncidentState.RESOLVED, now
        incident.save(update_fields=["state", "resolved_at"])
        _event(incident, IncidentState.RESOLVED, AUTO, now, text=text, from_state=source)
        core.record(AUTO, IncidentState.RESOLVED, incident, before=before, team=incident.team)


__all__ = ["IncidentConflict", "IncidentError", "InvalidIncidentInput", "Transition", "acknowledge", "add_note",
           "close_abandoned", "close_drill", "mitigate", "on_alert_firing", "on_alert_resolved", "resolve"]
