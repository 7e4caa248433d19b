"""Django admin: channels and their outbox, alerts and silences for inspection; Slack links (the audited
command is preferred)."""
from __future__ import annotations

from django.contrib import admin

from incidents.models import Alert, Channel, Incident, Notification, Silence, SlackIdentity, SlackInteraction


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "kind", "enabled", "disabled_reason", "last_delivered_at", "last_error_at"]
    list_filter = ["kind", "enabled", "team"]


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["created_at", "channel", "kind", "proposal", "state", "attempts", "next_attempt_at", "last_error"]
    list_filter = ["state", "kind"]
    readonly_fields = ["event", "proposal"]


@admin.register(SlackIdentity)
class SlackIdentityAdmin(admin.ModelAdmin):
    list_display = ["user", "slack_user_id", "linked_at"]


@admin.register(SlackInteraction)
class SlackInteractionAdmin(admin.ModelAdmin):
    list_display = ["received_at", "slack_user_id", "action_id", "proposal_id", "outcome"]
    list_filter = ["outcome"]


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["started_at", "tier", "rule", "pool", "cluster", "state", "fired_at", "resolved_at", "summary"]
    list_filter = ["state", "tier", "rule"]
    readonly_fields = ["inhibited_by", "silenced_by"]


@admin.register(Silence)
class SilenceAdmin(admin.ModelAdmin):
    list_display = ["team", "matchers", "starts_at", "ends_at", "created_by", "comment"]


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin):
    """For inspection: states change through incidents/incidents.py (the page, the API, Slack)."""

    list_display = ["id", "severity", "state", "pool", "cluster", "commander", "opened_at", "resolved_at"]
    list_filter = ["state", "severity", "team"]
    readonly_fields = ["team", "cluster", "pool", "severity", "state", "commander", "opened_at", "acknowledged_at",
                       "mitigated_at", "resolved_at", "resolve_suggested_at"]
