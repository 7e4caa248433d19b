"""Kinds and states for notification channels and their outbox, for alerts, and for incidents."""
from django.db import models

from incidents import rules


class ChannelKind(models.TextChoices):
    SLACK = "slack", "Slack incoming webhook"
    WEBHOOK = "webhook", "Generic webhook (signed JSON)"


class NotificationKind(models.TextChoices):
    POST = "post", "New message"
    UPDATE = "update", "Update of the posted message"
    REMINDER = "reminder", "Reminder before expiry"
    REPLY = "reply", "Ephemeral reply to a Slack click"
    ALERT_FIRING = "alert_firing", "Alert firing"
    ALERT_RESOLVED = "alert_resolved", "Alert resolved"
    MESSAGE = "message", "Message from a playbook step"


class NotificationState(models.TextChoices):
    PENDING = "pending", "Waiting for delivery"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed (gave up)"
    SKIPPED = "skipped", "Skipped"


ACTIVE_STATES = frozenset({NotificationState.PENDING})
TERMINAL_STATES = frozenset(set(NotificationState) - ACTIVE_STATES)


class SlackOutcome(models.TextChoices):
    """What became of one Slack button click."""

    RECEIVED = "received", "Received"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    UNLINKED = "unlinked", "Slack user not linked"
    FORBIDDEN = "forbidden", "Not allowed"
    CONFLICT = "conflict", "Already decided"
    ACKNOWLEDGED = "acknowledged", "Incident acknowledged"
    MITIGATED = "mitigated", "Incident mitigated"
    RESOLVED = "resolved", "Incident resolved"
    IGNORED = "ignored", "Not an action Headroom knows"


SLACK_ACTIONS = {"approve_proposal": "approve", "reject_proposal": "reject"}
# Buttons on the alert messages of an active incident.
SLACK_INCIDENT_ACTIONS = {"acknowledge_incident": "acknowledge", "mitigate_incident": "mitigate",
                          "resolve_incident": "resolve"}


class AlertTier(models.TextChoices):
    """design.md §5: how soon a person must act."""

    P0 = rules.P0, "P0: page now"
    P1 = rules.P1, "P1: within the hour"
    P2 = rules.P2, "P2: next working day"
    P3 = rules.P3, "P3: this sprint"


class AlertState(models.TextChoices):
    PENDING = rules.PENDING, "Pending (waiting out its for duration)"
    FIRING = rules.FIRING, "Firing"
    RESOLVED = rules.RESOLVED, "Resolved"
    CLEARED = rules.CLEARED, "Cleared before it fired"


ACTIVE_ALERT_STATES = frozenset({AlertState.PENDING, AlertState.FIRING})
TERMINAL_ALERT_STATES = frozenset(set(AlertState) - ACTIVE_ALERT_STATES)
ALERT_TRANSITIONS: dict[str, frozenset[str]] = {
    AlertState.PENDING: frozenset({AlertState.FIRING, AlertState.CLEARED}),
    AlertState.FIRING: frozenset({AlertState.RESOLVED}),
}


class IncidentState(models.TextChoices):
    """design.md §5: an incident moves forward only; `resolved` is final (a new firing opens a new incident)."""

    OPEN = "open", "Open"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    MITIGATED = "mitigated", "Mitigated"
    RESOLVED = "resolved", "Resolved"


ACTIVE_INCIDENT_STATES = frozenset({IncidentState.OPEN, IncidentState.ACKNOWLEDGED, IncidentState.MITIGATED})
INCIDENT_TRANSITIONS: dict[str, frozenset[str]] = {
    IncidentState.OPEN: frozenset({IncidentState.ACKNOWLEDGED, IncidentState.MITIGATED, IncidentState.RESOLVED}),
    IncidentState.ACKNOWLEDGED: frozenset({IncidentState.MITIGATED, IncidentState.RESOLVED}),
    IncidentState.MITIGATED: frozenset({IncidentState.RESOLVED}),
}
# The alert tiers that open (or join) an incident: P0 pages now, P1 needs someone within the hour.
INCIDENT_TIERS = (AlertTier.P0, AlertTier.P1)


class IncidentEventKind(models.TextChoices):
    """What the incident itself records. Alert, proposal and notification history stays in their own
    tables and is merged into the timeline (incidents/timeline.py)."""

    OPENED = "opened", "Opened"
    ALERT_JOINED = "alert_joined", "Alert joined"
    SEVERITY = "severity", "Severity raised"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    MITIGATED = "mitigated", "Mitigated"
    RESOLVED = "resolved", "Resolved"
    NOTE = "note", "Note"
    RESOLVE_SUGGESTED = "resolve_suggested", "All alerts resolved"


class PlaybookStepKind(models.TextChoices):
    """What a playbook step does. Executable kinds run through an action of incidents/playbooks.ACTIONS;
    kinds whose action is not built yet are listed there as unavailable and refused when saved."""

    CHECKLIST = "checklist", "Checklist item (a person ticks it)"
    PRESCALE = "prescale", "Pre-scale to warm pool + 50 % (a proposal, approved like any other)"
    SHIFT = "shift", "Start a traffic shift to another pool on the route"
    NOTIFY = "notify", "Notify a channel"
    FALLBACK = "fallback", "Activate the fallback model"
    BREAKER = "breaker", "Open a circuit breaker"


class RunStepState(models.TextChoices):
    PENDING = "pending", "Pending"
    WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    SKIPPED = "skipped", "Skipped"
    FAILED = "failed", "Failed"


FINISHED_RUN_STEP_STATES = frozenset({RunStepState.DONE, RunStepState.SKIPPED, RunStepState.FAILED})
# Steps that act again when asked: a failed step may be run again (a new proposal after a rejection).
STARTABLE_RUN_STEP_STATES = frozenset({RunStepState.PENDING, RunStepState.FAILED})


class DrillScenario(models.TextChoices):
    SURGE_10X = "surge-10x", "A 10x surge"
    SLOW_COLD_START = "slow-cold-start", "A 3x surge with cold starts four times the usual"
    DEAD_ENDPOINT = "dead-endpoint", "One replica answering only errors"
