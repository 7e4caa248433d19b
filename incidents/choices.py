"""Kinds and states for notification channels and their outbox."""
from django.db import models


class ChannelKind(models.TextChoices):
    SLACK = "slack", "Slack incoming webhook"
    WEBHOOK = "webhook", "Generic webhook (signed JSON)"


class NotificationKind(models.TextChoices):
    POST = "post", "New message"
    UPDATE = "update", "Update of the posted message"
    REMINDER = "reminder", "Reminder before expiry"
    REPLY = "reply", "Ephemeral reply to a Slack click"


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
    IGNORED = "ignored", "Not an action Headroom knows"


SLACK_ACTIONS = {"approve_proposal": "approve", "reject_proposal": "reject"}
