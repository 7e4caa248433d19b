"""Notification channels, the outbox of notifications, the Slack messages we posted, and Slack links."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.models import Team
from incidents.choices import ChannelKind, NotificationKind, NotificationState, SlackOutcome
from incidents.specs import ChannelSpec
from scaling.models import Proposal, ProposalEvent


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
    at = models.DateTimeField(auto_now_add=True)


class Notification(models.Model):
    """One message to one channel, written before it is sent and kept with its delivery history."""

    team_lookups = ("channel__team",)

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notifications")
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    event = models.ForeignKey(ProposalEvent, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
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
    outcome = models.CharField(max_length=16, choices=SlackOutcome.choices, default=SlackOutcome.RECEIVED)
    detail = models.TextField(blank=True)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-received_at"]
