"""Notification channels, the outbox of notifications, the Slack messages we posted, Slack links; alerts,
their events, silences, the per-tick SLO observations burn rates are computed from; incidents and their events."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.models import SLO, Cluster, Pool, Team
from controlplane.choices import Channel as ActorChannel
from incidents.choices import (
    ACTIVE_ALERT_STATES,
    ACTIVE_INCIDENT_STATES,
    AlertState,
    AlertTier,
    ChannelKind,
    IncidentEventKind,
    IncidentState,
    NotificationKind,
    NotificationState,
    PlaybookStepKind,
    RunStepState,
    SlackOutcome,
    DrillScenario,
)
from incidents.specs import ChannelSpec
from scaling.models import Proposal, ProposalEvent, TrafficShift


class Channel(models.Model):
    """Where a team's notifications go. A permanent delivery failure disables it, with the reason."""

    team_lookups = ("team",)  # who owns it (see controlplane.permissions)

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="channels")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    settings = models.JSONField(default=dict, help_text="Parsed by the kind's spec (incidents/specs.py).")
    enabled = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="channel_unique_name_per_team")]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.name}" if self.team_id else self.name

    @property
    def spec(self) -> ChannelSpec:
        from incidents.transports import transport_class  # the registry imports models' neighbours

        return transport_class(self.kind).spec_class.parse(self.settings)


class DispatchedEvent(models.Model):
    """Marks a ProposalEvent as fanned out to channels: the outbox's read cursor, one row per event."""

    event = models.OneToOneField(ProposalEvent, on_delete=models.CASCADE, primary_key=True, related_name="dispatch")
    at = models.DateTimeField(auto_now_add=True, db_index=True)  # markers past the outbox's horizon are pruned by it


class Notification(models.Model):
    """One message to one channel, written before it is sent and kept with its delivery history."""

    team_lookups = ("channel__team",)

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notifications")
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    event = models.ForeignKey(ProposalEvent, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    alert = models.ForeignKey("Alert", on_delete=models.CASCADE, null=True, blank=True, related_name="notifications")
    kind = models.CharField(max_length=16, choices=NotificationKind.choices)
    state = models.CharField(max_length=16, choices=NotificationState.choices, default=NotificationState.PENDING)
    # Replies carry their own text and Slack response_url; other kinds render the proposal as it is when sent.
    text = models.TextField(blank=True)
    response_url = models.URLField(max_length=500, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(db_index=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # One message per proposal and channel, and one reminder: retried deliveries never repeat them.
            models.UniqueConstraint(fields=["channel", "proposal"], condition=Q(kind=NotificationKind.POST),
                                    name="notification_one_post_per_proposal"),
            models.UniqueConstraint(fields=["channel", "proposal"], condition=Q(kind=NotificationKind.REMINDER),
                                    name="notification_one_reminder_per_proposal"),
            # One message per alert firing and one on resolve, per channel.
            models.UniqueConstraint(fields=["channel", "alert", "kind"], condition=Q(alert__isnull=False),
                                    name="notification_one_per_alert_and_kind"),
        ]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.kind} #{self.proposal_id} → {self.channel} ({self.state})"


class SlackMessage(models.Model):
    """The message posted for a proposal in one channel, and how to edit it (Slack's response_url)."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="slack_messages")
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="+")
    posted_at = models.DateTimeField()
    # An incoming webhook returns no message id; the first click gives a response_url that edits it.
    response_url = models.URLField(max_length=500, blank=True)
    response_url_expires_at = models.DateTimeField(null=True, blank=True)
    response_url_uses = models.PositiveSmallIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["channel", "proposal"], name="slackmessage_one_per_proposal")]


class SlackIdentity(models.Model):
    """Which Headroom user a Slack user is. Clicks from unlinked Slack users change nothing."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_identity")
    slack_user_id = models.CharField(max_length=32, unique=True)
    linked_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.slack_user_id} → {self.user}"


class SlackInteraction(models.Model):
    """One button click as Slack delivered it. The unique key makes a repeated delivery a no-op."""

    delivery_key = models.CharField(max_length=200, unique=True)
    slack_user_id = models.CharField(max_length=32)
    action_id = models.CharField(max_length=64)
    proposal_id = models.BigIntegerField(null=True)
    incident_id = models.BigIntegerField(null=True)
    outcome = models.CharField(max_length=16, choices=SlackOutcome.choices, default=SlackOutcome.RECEIVED)
    detail = models.TextField(blank=True)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-received_at"]


class Silence(models.Model):
    """Mutes the notifications of a team's alerts whose labels match, until `ends_at`. Alerts still fire."""

    team_lookups = ("team",)

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="silences")
    matchers = models.JSONField(help_text='All must match: [{"label": "pool", "value": "12"}] (incidents/rules.py).')
    comment = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(db_index=True)
    expired_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+", help_text="Who ended it early, if anyone.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ends_at", "-id"]
        constraints = [models.CheckConstraint(condition=Q(ends_at__gte=models.F("starts_at")),
                                              name="silence_ends_not_before_start")]

    def __str__(self) -> str:
        return f"silence #{self.pk} ({self.team_id}) until {self.ends_at:%Y-%m-%d %H:%M}"


class Alert(models.Model):
    """One firing (or pending) of one rule for one pool or cluster, from first seen to resolved.

    At most one active alert per fingerprint: a rule that keeps firing updates its alert, it never
    opens a second one. Only the services in incidents/alerts.py write `state`, each time with an event.
    """

    team_lookups = ("team",)

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="alerts")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="alerts")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, null=True, blank=True, related_name="alerts")
    rule = models.CharField(max_length=64)
    tier = models.CharField(max_length=2, choices=AlertTier.choices)
    fingerprint = models.CharField(max_length=32, db_index=True)
    labels = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=AlertState.choices, default=AlertState.PENDING)
    summary = models.TextField(blank=True, help_text="The last evaluation, with its numbers.")
    numbers = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(help_text="When the condition was first seen.")
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    clear_since = models.DateTimeField(null=True, blank=True,
                                       help_text="When its condition was first seen clear while it fired (it resolves "
                                                 "once clear for its rule's keep_firing_for_s); empty while the "
                                                 "condition holds, kept once resolved.")
    last_evaluated_at = models.DateTimeField()
    inhibited_by = models.ForeignKey(Proposal, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                     help_text="The warming scale-up that holds this capacity alert back.")
    inhibited_reason = models.TextField(blank=True)
    silenced_by = models.ForeignKey(Silence, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts")
    announced_at = models.DateTimeField(null=True, blank=True, help_text="When its firing message was queued.")
    incident = models.ForeignKey("Incident", on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts",
                                 help_text="The incident a P0/P1 firing opened or joined.")

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["fingerprint"], condition=Q(state__in=sorted(ACTIVE_ALERT_STATES)),
                                    name="alert_one_active_per_fingerprint"),
        ]
        indexes = [models.Index(fields=["state", "pool"]), models.Index(fields=["state", "cluster"]),
                   # The alerts page's latest resolved ones, without sorting every alert ever resolved.
                   models.Index(fields=["state", "-resolved_at"], name="alert_state_resolved")]

    def __str__(self) -> str:
        return f"{self.tier} {self.rule} {self.pool or self.cluster} ({self.state})"

    @property
    def group(self) -> str:
        """Alerts are grouped per pool (per cluster for the loop's heartbeat)."""
        return f"pool:{self.pool_id}" if self.pool_id else f"cluster:{self.cluster_id}"

    @property
    def held_back(self) -> bool:
        return bool(self.inhibited_by_id or self.silenced_by_id)


class AlertEvent(models.Model):
    """One transition of an alert, or a note on it (held back, released): its timeline."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(db_index=True)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    actor_name = models.CharField(max_length=150, default="auto:system")
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"alert {self.alert_id}: {self.from_state or '∅'} → {self.to_state}"


class SloSample(models.Model):
    """One tick's observation of one SLO: bad and total (ticks for latency, requests/s for errors)."""

    slo = models.ForeignKey(SLO, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    bad = models.FloatField()
    total = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["slo", "at"], name="slosample_one_per_tick")]


class HourlyRollup(models.Model):
    """A pool's hourly means of its stored samples over the last 8 days, for the alert rules over days.

    Kept hour by hour: an evaluation adds the hours completed since `through` (one, usually) instead of
    averaging 8 days of 15-second samples every 15 s; the hour in progress is read live. Each entry of
    `hours` is [hour start (epoch s), request rate, TTFT p95, prefix-cache hit rate], null where unknown.
    """

    pool = models.OneToOneField(Pool, on_delete=models.CASCADE, related_name="hourly_rollup")
    through = models.DateTimeField(help_text="Every complete hour before this is in `hours`.")
    hours = models.JSONField(default=list)


class Incident(models.Model):
    """A P0/P1 situation on one pool (or, with no pool, the control loop of a cluster), from the first
    firing alert to a person resolving it.

    At most one active incident per pool (per cluster for system incidents): later alerts join it.
    A deleted pool's incidents stay, with its name (`pool_name`): postmortems are read for months. So an
    empty `pool` alone does not make a system incident; `is_system` and `pool_deleted` tell them apart.
    Only incidents/incidents.py writes `state`, each time with an IncidentEvent and an audit record.
    """

    team_lookups = ("team",)
    cluster_lookup = "cluster"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="incidents")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="incidents")
    pool = models.ForeignKey(Pool, on_delete=models.SET_NULL, null=True, blank=True, related_name="incidents",
                             help_text="Empty for a system incident (the control loop of the cluster), and once "
                                       "the pool is deleted.")
    pool_name = models.CharField(max_length=63, blank=True,
                                 help_text="The pool's name, kept after the pool is deleted; empty only for a "
                                           "system incident.")
    title = models.CharField(max_length=200)
    severity = models.CharField(max_length=2, choices=AlertTier.choices, help_text="The highest tier of its alerts.")
    state = models.CharField(max_length=16, choices=IncidentState.choices, default=IncidentState.OPEN)
    commander = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                  related_name="+", help_text="Who leads the response (the first to acknowledge).")
    opened_at = models.DateTimeField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    mitigated_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolve_suggested_at = models.DateTimeField(null=True, blank=True,
                                                help_text="When its last alert resolved; a person still resolves it.")
    what_if = models.ForeignKey("scaling.WarmPoolReport", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="+", help_text="The latest replay of its window at other warm-pool "
                                                            "settings (scaling/report_service.request_what_if).")

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["pool"], condition=Q(state__in=sorted(ACTIVE_INCIDENT_STATES), pool__isnull=False),
                                    name="incident_one_active_per_pool"),
            # A deleted pool's incident has no pool either, but keeps its name: it is never a system incident.
            models.UniqueConstraint(fields=["cluster"], condition=Q(state__in=sorted(ACTIVE_INCIDENT_STATES), pool__isnull=True,
                                                                    pool_name=""),
                                    name="incident_one_active_system_per_cluster"),
        ]
        indexes = [models.Index(fields=["state", "opened_at"]),
                   # The incidents page's latest resolved ones, without sorting every incident ever resolved.
                   models.Index(fields=["state", "-resolved_at"], name="incident_state_resolved")]

    def __str__(self) -> str:
        where = self.scope if self.pool_deleted else self.pool or self.cluster
        return f"incident #{self.pk} {self.severity} {where} ({self.state})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pool_id and not self.pool_name:  # every incident of a pool names it, whoever creates it
            self.pool_name = self.pool.name
        super().save(*args, **kwargs)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_INCIDENT_STATES

    @property
    def is_system(self) -> bool:
        """The control loop of a cluster: no pool, and never had one."""
        return self.pool_id is None and not self.pool_name

    @property
    def pool_deleted(self) -> bool:
        """Opened on a pool that has since been deleted: its name is all that is left of it."""
        return self.pool_id is None and bool(self.pool_name)

    @property
    def scope(self) -> str:
        if self.pool_id:
            return str(self.pool)
        if self.pool_name:
            return f"{self.cluster.name}/{self.pool_name} (deleted)"
        return f"{self.cluster.name} (control loop)"

    @property
    def is_drill(self) -> bool:
        """Opened by `manage.py drill`: practice, never paged to real channels."""
        return Drill.objects.filter(incident_id=self.pk).exists() if self.pk else False


class IncidentEvent(models.Model):
    """What happened to the incident itself: opened, alerts joining, transitions, notes.

    The rest of its timeline (alert transitions, proposals and approvals, notifications) lives in the
    tables that own it and is merged on reading (incidents/timeline.py), so no fact is written twice.
    """

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=20, choices=IncidentEventKind.choices)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    actor_name = models.CharField(max_length=150, default="auto:system")
    channel = models.CharField(max_length=16, choices=ActorChannel.choices, default=ActorChannel.AUTO)
    text = models.TextField(blank=True)
    alert = models.ForeignKey(Alert, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"incident {self.incident_id}: {self.kind}"


class Playbook(models.Model):
    """A team's prepared response: ordered steps, offered in incidents opened by its alert rules or severities."""

    team_lookups = ("team",)

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="playbooks")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    alert_rules = models.JSONField(default=list, blank=True, help_text="Rule keys whose incidents offer it.")
    severities = models.JSONField(default=list, blank=True, help_text="Incident kinds (P0, P1) that offer it.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="playbook_unique_name_per_team")]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name}" if self.team_id else self.name


class PlaybookStep(models.Model):
    """One step: a checklist item or an action with its parameters (parsed by incidents/playbooks.py)."""

    playbook = models.ForeignKey(Playbook, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveSmallIntegerField()
    title = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=PlaybookStepKind.choices)
    params = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["playbook", "position"]
        constraints = [models.UniqueConstraint(fields=["playbook", "position"], name="playbook_step_unique_position")]


class PlaybookRun(models.Model):
    """A playbook run inside an incident. Steps are copied at the start, so editing the playbook later
    changes no run in progress; one run per playbook and incident (starting twice answers the first)."""

    team_lookups = ("incident__team",)

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="playbook_runs")
    playbook = models.ForeignKey(Playbook, on_delete=models.SET_NULL, null=True, related_name="runs")
    playbook_name = models.CharField(max_length=100)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    started_channel = models.CharField(max_length=16, choices=ActorChannel.choices)
    started_at = models.DateTimeField()

    class Meta:
        ordering = ["started_at", "id"]
        constraints = [models.UniqueConstraint(fields=["incident", "playbook"], name="playbook_run_once_per_incident")]


class PlaybookRunStep(models.Model):
    """One step's outcome in a run: who did it, when, and the proposal or shift it made."""

    run = models.ForeignKey(PlaybookRun, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveSmallIntegerField()
    title = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=PlaybookStepKind.choices)
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=20, choices=RunStepState.choices, default=RunStepState.PENDING)
    reason = models.TextField(blank=True, help_text="Why it failed or was skipped, or what it did.")
    actor_name = models.CharField(max_length=150, blank=True)
    channel = models.CharField(max_length=16, choices=ActorChannel.choices, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)
    proposal = models.ForeignKey(Proposal, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    shift = models.ForeignKey(TrafficShift, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "position"], name="playbook_run_step_unique_position")]


class Drill(models.Model):
    """A playbook practised against the sandbox: its incident (kept with its timeline) and its score."""

    team_lookups = ("incident__team",)

    playbook = models.ForeignKey(Playbook, on_delete=models.SET_NULL, null=True, related_name="drills")
    scenario = models.CharField(max_length=20, choices=DrillScenario.choices)
    incident = models.OneToOneField(Incident, on_delete=models.CASCADE, related_name="drill")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="drills")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    score = models.JSONField(default=dict, blank=True)
    ticks = models.JSONField(default=list, blank=True, help_text="The scenario's signals per drill tick.")

    class Meta:
        ordering = ["-started_at", "-id"]
