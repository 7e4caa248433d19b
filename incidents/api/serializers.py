from __future__ import annotations

from rest_framework import serializers

from controlplane.api.serializers import TeamSlugField
from incidents import outbound
from incidents.models import Channel, Notification


class ChannelSerializer(serializers.ModelSerializer):
    team = TeamSlugField()
    settings = serializers.JSONField(write_only=True, help_text="Kind-specific; see docs/slack.md. Never read back.")
    target = serializers.SerializerMethodField(help_text="Scheme and host only: webhook paths carry secrets.")

    class Meta:
        model = Channel
        fields = ["id", "team", "name", "kind", "settings", "target", "enabled", "disabled_reason", "last_error",
                  "last_error_at", "last_delivered_at", "created_at"]
        read_only_fields = ["enabled", "disabled_reason", "last_error", "last_error_at", "last_delivered_at",
                            "created_at"]

    def validate_settings(self, value: object) -> dict:
        if not isinstance(value, dict):
            raise serializers.ValidationError("Must be an object, e.g. {\"webhook_url\": \"https://hooks.slack.com/…\"}.")
        return value

    def get_target(self, channel: Channel) -> str:
        try:
            return f"{outbound.origin(channel.spec.url)}/…"
        except ValueError:
            return ""


class NotificationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "channel", "proposal", "kind", "state", "attempts", "next_attempt_at", "last_error",
                  "created_at", "delivered_at"]
        read_only_fields = fields
