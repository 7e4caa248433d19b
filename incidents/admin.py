"""Django admin: channels and their outbox, alerts and silences for inspection; Slack links. Edits of
channels and Slack links are audited like every admin change (a channel's settings hold its secret
address: the audit names the field, never its value)."""
from __future__ import annotations

from django import forms
from django.contrib import admin

from controlplane.admin import URL_FORMFIELDS, AuditedAdmin
from incidents import outbound
from incidents.models import Alert, Channel, Incident, Notification, Silence, SlackIdentity, SlackInteraction


class ChannelAdminForm(forms.ModelForm):
    # The settings hold the webhook address and signing secret: written here, never shown back (docs/slack.md).
    settings = forms.JSONField(
        required=False, widget=forms.Textarea(attrs={"rows": 4}),
        help_text="Write-only: the current settings are not shown. Leave empty to keep them; a new JSON object "
                  "replaces them whole (incidents/specs.py).")

    class Meta:
        model = Channel
        fields = "__all__"

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.initial["settings"] = None

    def clean(self):  # noqa: ANN201
        cleaned = super().clean()
        if cleaned.get("settings") in (None, "") and self.instance.pk:
            cleaned["settings"] = self.instance.settings  # left empty: unchanged
        channel = Channel(kind=cleaned.get("kind", ""), settings=cleaned.get("settings") or {})
        try:
            channel.spec  # noqa: B018 (parsing is the validation, as in the UI and the API)
        except (ValueError, KeyError) as exc:
            self.add_error("settings", str(exc))
        return cleaned


@admin.register(Channel)
class ChannelAdmin(AuditedAdmin):
    form = ChannelAdminForm
    list_display = ["name", "team", "kind", "enabled", "disabled_reason", "last_delivered_at", "last_error_at"]
    list_filter = ["kind", "enabled", "team"]
    readonly_fields = ["target"]

    def get_fields(self, request, obj=None):  # noqa: ANN001, ANN201
        fields = super().get_fields(request, obj)
        if obj is not None and not self.has_change_permission(request, obj):
            # A read-only view shows fields from the record itself: the settings would be shown in full.
            fields = [field for field in fields if field != "settings"]
        return fields

    @admin.display(description="target")
    def target(self, channel: Channel) -> str:
        """Scheme and host only, as the API's `target`."""
        try:
            return f"{outbound.origin(channel.spec.url)}/…"
        except (ValueError, KeyError):
            return ""


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    formfield_overrides = URL_FORMFIELDS
    list_display = ["created_at", "channel", "kind", "proposal", "state", "attempts", "next_attempt_at", "last_error"]
    list_filter = ["state", "kind"]
    readonly_fields = ["event", "proposal"]
    exclude = ["response_url"]  # Slack's response_url posts into the channel for 30 minutes: a credential


@admin.register(SlackIdentity)
class SlackIdentityAdmin(AuditedAdmin):
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

    list_display = ["id", "severity", "state", "pool", "pool_name", "cluster", "commander", "opened_at", "resolved_at"]
    list_filter = ["state", "severity", "team"]
    readonly_fields = ["team", "cluster", "pool", "pool_name", "severity", "state", "commander", "opened_at", "acknowledged_at",
                       "mitigated_at", "resolved_at", "resolve_suggested_at"]
