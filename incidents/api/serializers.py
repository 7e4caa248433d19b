from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.fields import StrictIdField
from controlplane.api.serializers import STRICT_FIELDS, TeamSlugField, named_unique
from incidents import outbound, rules, timeline
from scaling.choices import PeakBasis
from incidents.models import (
    Alert, Channel, Incident, IncidentEvent, Notification, Playbook, PlaybookRun, PlaybookRunStep, PlaybookStep, Silence,
)


class ChannelSerializer(serializers.ModelSerializer):
    serializer_field_mapping = STRICT_FIELDS  # `name` is a string only: 0 is a 400, not a channel named "0"
    team = TeamSlugField()
    settings = serializers.JSONField(write_only=True, help_text="Kind-specific; see docs/slack.md. Never read back.")
    target = serializers.SerializerMethodField(help_text="Scheme and host only: webhook paths carry secrets.")

    class Meta:
        model = Channel
        fields = ["id", "team", "name", "kind", "settings", "target", "enabled", "disabled_reason", "last_error",
                  "last_error_at", "last_delivered_at", "created_at"]
        read_only_fields = ["enabled", "disabled_reason", "last_error", "last_error_at", "last_delivered_at",
                            "created_at"]

    def get_validators(self):  # noqa: ANN201
        return named_unique(super().get_validators())  # a retried create names the channel it made

    def validate_settings(self, value: object) -> dict:
        if not isinstance(value, dict):
            raise serializers.ValidationError("Must be an object, e.g. {\"webhook_url\": \"https://hooks.slack.com/…\"}.")
        return value

    def get_target(self, channel: Channel) -> str:
        try:
            return f"{outbound.origin(channel.spec.url)}/…"
        except ValueError:
            return ""


class CreatedChannelSerializer(ChannelSerializer):
    generated_secret = serializers.CharField(
        read_only=True, required=False,
        help_text="A webhook created without a secret: the one generated for it, in this answer only.")

    class Meta(ChannelSerializer.Meta):
        fields = [*ChannelSerializer.Meta.fields, "generated_secret"]


class NotificationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "channel", "proposal", "alert", "kind", "state", "attempts", "next_attempt_at", "last_error",
                  "created_at", "delivered_at"]
        read_only_fields = fields


class AlertSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    group = serializers.CharField(read_only=True, help_text="pool:<id>, or cluster:<id> for the loop's heartbeat.")

    class Meta:
        model = Alert
        fields = ["id", "team", "cluster", "pool", "group", "rule", "tier", "state", "fingerprint", "labels", "summary",
                  "numbers", "started_at", "fired_at", "clear_since", "resolved_at", "last_evaluated_at", "inhibited_by",
                  "inhibited_reason", "silenced_by", "announced_at", "incident"]
        read_only_fields = fields


class SilenceSerializer(serializers.ModelSerializer):
    serializer_field_mapping = STRICT_FIELDS  # `comment` is a string only, like every text field of the API
    team = TeamSlugField()
    matchers = serializers.JSONField(help_text='All must match: [{"label": "pool", "value": "12"}]; labels: '
                                               + ", ".join(rules.MATCHABLE) + '; values are strings: a rule\'s key, '
                                               '"P0" to "P3", the id of one of the team\'s pools, clusters or SLOs.')
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    expired_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Silence
        fields = ["id", "team", "matchers", "comment", "starts_at", "ends_at", "created_by", "expired_by", "created_at"]
        read_only_fields = ["created_by", "expired_by", "created_at"]
        extra_kwargs = {"starts_at": {"required": False}}


class IncidentEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = IncidentEvent
        fields = ["id", "at", "kind", "from_state", "to_state", "actor_name", "channel", "text", "alert", "data"]
        read_only_fields = fields


class TimelineEntrySerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    kind = serializers.CharField(help_text="incident, alert, proposal, notification (more sources may add kinds).")
    title = serializers.CharField()
    actor = serializers.CharField()
    channel = serializers.CharField()
    detail = serializers.CharField()
    object_type = serializers.CharField(help_text="app_label.model of the linked object.")
    object_id = serializers.IntegerField(allow_null=True)
    url = serializers.CharField(help_text="The linked object's page.")


class IncidentSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    commander = serializers.SlugRelatedField(slug_field="username", read_only=True)
    alerts = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    # `pool` is null for a system incident and for a deleted pool's: these two say which.
    pool_deleted = serializers.BooleanField(read_only=True, help_text="Its pool has been deleted (`pool` is null, "
                                                                      "`pool_name` names it); its alerts went with it.")
    system = serializers.BooleanField(source="is_system", read_only=True,
                                      help_text="A system incident: the control loop of `cluster`, never a pool.")

    class Meta:
        model = Incident
        fields = ["id", "team", "cluster", "pool", "pool_name", "pool_deleted", "system", "title", "severity", "state",
                  "commander", "opened_at", "acknowledged_at", "mitigated_at", "resolved_at", "resolve_suggested_at",
                  "alerts"]
        read_only_fields = fields


class IncidentDetailSerializer(IncidentSerializer):
    timeline = serializers.SerializerMethodField(help_text="Every source merged, oldest first (docs/incidents.md).")

    class Meta(IncidentSerializer.Meta):
        fields = [*IncidentSerializer.Meta.fields, "timeline"]
        read_only_fields = fields

    @extend_schema_field(TimelineEntrySerializer(many=True))
    def get_timeline(self, incident: Incident) -> list[dict]:
        return TimelineEntrySerializer(timeline.timeline(incident), many=True).data


class IncidentActionSerializer(serializers.Serializer):
    text = serializers.CharField(required=False, allow_blank=True, max_length=4000,
                                 help_text="Why, in a sentence; kept on the timeline.")


class IncidentWhatIfSerializer(serializers.Serializer):
    """Replay the incident's window at other warm-pool settings (and with the fallback model)."""

    sizes_pct = serializers.ListField(child=serializers.FloatField(min_value=0, max_value=100), required=False,
                                      allow_empty=False, max_length=21,
                                      help_text="Warm-pool sizes, percent of the expected peak (default 0-100 by 20).")
    peak_basis = serializers.ChoiceField(choices=PeakBasis.choices, default=PeakBasis.DAY_PEAK)


class IncidentNoteSerializer(serializers.Serializer):
    text = serializers.CharField(max_length=4000)
    follow_up = serializers.BooleanField(default=False, help_text="Work to do after the incident; listed in the postmortem.")


class PlaybookStepSerializer(serializers.ModelSerializer):
    kind = serializers.CharField(help_text="checklist, prescale, shift, notify (fallback and breaker: not yet available).")
    params = serializers.JSONField(required=False, default=dict,
                                   help_text='prescale {"buffer": 0.5}; shift {"to_pool": NAME, "steps": [80, 95, 100]}; '
                                             'notify {"channel": NAME, "text": ...}; checklist {}.')

    class Meta:
        model = PlaybookStep
        fields = ["position", "title", "kind", "params"]
        read_only_fields = ["position"]
        extra_kwargs = {"title": {"allow_blank": True}}  # the service names the step: steps[N].title


class PlaybookSerializer(serializers.ModelSerializer):
    """A playbook with its ordered steps; writing replaces every step (validated together by the service)."""

    team = TeamSlugField()
    steps = PlaybookStepSerializer(many=True)
    alert_rules = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    severities = serializers.ListField(child=serializers.CharField(), required=False, default=list)

    class Meta:
        model = Playbook
        fields = ["id", "team", "name", "description", "alert_rules", "severities", "steps", "created_at", "updated_at"]
        read_only_fields = ["created_at", "updated_at"]
        validators: list = []  # the service says which name is taken, naming the field


class PlaybookRunStepSerializer(serializers.ModelSerializer):
    class Meta:
        model = PlaybookRunStep
        fields = ["position", "title", "kind", "params", "state", "reason", "actor_name", "channel", "updated_at",
                  "proposal", "shift", "data"]
        read_only_fields = fields


class PlaybookRunSerializer(serializers.ModelSerializer):
    steps = PlaybookRunStepSerializer(many=True, read_only=True)
    started_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = PlaybookRun
        fields = ["id", "incident", "playbook", "playbook_name", "started_by", "started_channel", "started_at", "steps"]
        read_only_fields = fields


class PlaybookRunStartSerializer(serializers.Serializer):
    incident = StrictIdField()
    playbook = StrictIdField()


class PlaybookRunStepActionSerializer(serializers.Serializer):
    position = serializers.IntegerField(min_value=1, max_value=1000)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, help_text="Why it is skipped.")
