"""Serializers for the core inventory. Validation lives on the models; these only translate."""
from __future__ import annotations

from datetime import datetime, time

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.validators import UniqueTogetherValidator

from controlplane import audit_view, permissions, services
from controlplane.api.fields import StrictPrimaryKeyRelatedField
from controlplane.models import SLO, ApiToken, AuditEvent, Cluster, Pool, ScheduleWindow, Team


class TextField(serializers.CharField):
    """A string and only a string: DRF's CharField would store 2.5 as "2.5", which the schema does not promise."""

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field({"type": "string", "pattern": r"^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$", "example": "09:00"})
class WallClockTimeField(serializers.TimeField):
    """A time of day on a wall clock (the window's own time zone): `HH:MM[:SS]`, no offset.

    OpenAPI's `time` format is RFC 3339's, which requires an offset; these times have none on purpose."""

    default_error_messages = {"offset": "Expected 'HH:MM' without a UTC offset (the time is on the wall clock of "
                                        "the window's time_zone), received {value!r}."}

    def to_internal_value(self, value):  # noqa: ANN001, ANN201
        parsed = super().to_internal_value(value)
        # Django's parser drops an offset without a word: "18:00+02:00" would be read as 18:00 in the
        # window's zone, whatever the caller meant by the offset.
        try:
            if isinstance(value, str) and time.fromisoformat(value).tzinfo is not None:
                self.fail("offset", value=value)
        except ValueError:
            pass
        return parsed


class NamedUniqueTogetherValidator(UniqueTogetherValidator):
    """A uniqueness rule that names its last field and the object already there, so a client that retries a
    create after a timeout (the first one landed) learns which object it made: `{"name": ["A pool with this
    cluster and name already exists (id 12)."]}`. DRF's own answer was a `non_field_errors` naming neither.
    The id is given only when the caller can see that object."""

    def __call__(self, attrs, serializer):  # noqa: ANN001, ANN204
        try:
            super().__call__(attrs, serializer)
        except serializers.ValidationError:
            queryset = self.filter_queryset(attrs, self.queryset, serializer)
            existing = self.exclude_current_instance(attrs, queryset, serializer.instance).first()
            request = serializer.context.get("request")
            model = self.queryset.model
            visible = existing is not None and request is not None and (
                not permissions.team_lookups(model)
                or permissions.scoped(model.objects.filter(pk=existing.pk), request.user).exists())
            *others, field = self.fields
            which = f" (id {existing.pk})" if visible else ""
            raise serializers.ValidationError({field: [
                f"A {model._meta.verbose_name} with this {' and '.join([*others, field])} already exists{which}."
            ]}, code="unique") from None


def named_unique(validators: list) -> list:
    """`validators` with every unique-together rule replaced by one that names its field and object."""
    return [
        NamedUniqueTogetherValidator(
            queryset=v.queryset, fields=v.fields, message=v.message, condition_fields=v.condition_fields,
            condition=v.condition, code=v.code, nulls_distinct=v.nulls_distinct,
        ) if type(v) is UniqueTogetherValidator else v
        for v in validators
    ]


STRICT_FIELDS = serializers.ModelSerializer.serializer_field_mapping | {
    models.CharField: TextField, models.TextField: TextField, models.TimeField: WallClockTimeField}


class ScopedModelSerializer(serializers.ModelSerializer):
    """Runs the model's own `clean()` and only offers related objects the user can see
    (except through fields marked `scoped = False`), each named by a whole-number id."""

    serializer_field_mapping = STRICT_FIELDS
    serializer_related_field = StrictPrimaryKeyRelatedField

    def get_fields(self):  # noqa: ANN201
        fields = super().get_fields()
        request = self.context.get("request")
        for field in fields.values():
            target = getattr(field, "child_relation", field)
            queryset = getattr(target, "queryset", None)
            if not getattr(target, "scoped", True):
                continue
            if request is not None and queryset is not None and permissions.team_lookups(queryset.model):
                target.queryset = permissions.scoped(queryset, request.user)
        return fields

    def get_validators(self):  # noqa: ANN201
        return named_unique(super().get_validators())

    def validate(self, attrs):  # noqa: ANN001, ANN201
        attrs = super().validate(attrs)
        model = self.Meta.model
        fields = model._meta.concrete_fields
        instance = model(**{f.attname: getattr(self.instance, f.attname) for f in fields}) if self.instance else model()
        many_to_many = {field.name for field in model._meta.many_to_many}  # set after saving, not on an unsaved row
        for name, value in attrs.items():
            if name not in many_to_many:
                setattr(instance, name, value)
        try:
            instance.clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError(serializers.as_serializer_error(exc)) from None
        return attrs


class TeamSlugField(serializers.SlugRelatedField):
    """A team named by its slug; text that cannot be a slug is refused before any query."""

    def __init__(self, **kwargs) -> None:  # noqa: ANN003
        super().__init__(slug_field="slug", queryset=Team.objects.all(), **kwargs)

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        if not isinstance(data, str) or "\x00" in data:
            self.fail("invalid")
        return super().to_internal_value(data)

    def get_choices(self, cutoff: int | None = None) -> dict[str, str]:
        """The teams a form offers (the browsable API's): the caller's own, unless the field names any team
        (`scoped = False`). A slug typed in is still read, so a write to another team is refused saying why."""
        teams = self.get_queryset()
        request = self.context.get("request")
        if getattr(self, "scoped", True) and request is not None:
            teams = permissions.scoped(teams, request.user)
        return {self.to_representation(team): self.display_value(team) for team in teams[:cutoff]}


class AnyTeamSlugField(TeamSlugField):
    """Any team by its slug, not only the caller's own: the teams a cluster is shared with."""

    scoped = False


class TeamSerializer(ScopedModelSerializer):
    class Meta:
        model = Team
        fields = ["id", "name", "slug"]


class ClusterSerializer(ScopedModelSerializer):
    team = TeamSlugField()
    shared_with = AnyTeamSlugField(
        many=True, required=False,
        help_text="Slugs of the other teams whose pools may sit in this cluster; only its team's admins change it.",
    )

    class Meta:
        model = Cluster
        fields = [
            "id", "name", "team", "shared_with", "region", "kube_api_url", "credentials_ref", "prometheus_url",
            "prometheus_rate_window",
            "time_zone", "off_hours", "gpu_prices",
        ]

    def validate_credentials_ref(self, value: str) -> str:
        request = self.context.get("request")
        if refusal := services.credentials_refusal(getattr(request, "user", None), self.instance, value or ""):
            raise serializers.ValidationError(refusal)
        return value


class SLOSerializer(ScopedModelSerializer):
    class Meta:
        model = SLO
        fields = ["id", "pool", "indicator", "threshold", "objective", "window_days"]


class ScheduleWindowSerializer(ScopedModelSerializer):
    class Meta:
        model = ScheduleWindow
        fields = ["id", "pool", "name", "weekday", "start", "end", "time_zone", "prescale_factor", "lead_minutes"]


class PoolSerializer(ScopedModelSerializer):
    team = TeamSlugField()
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    slos = SLOSerializer(many=True, read_only=True)
    batch_slots_in_use = serializers.IntegerField(
        read_only=True, allow_null=True,
        help_text="What the work share's batch fill is read against: batch_slots, else the --max-num-seqs the "
                  "Deployment's command line stated at the last read (null: neither).")
    scale_refusal = serializers.CharField(
        source="status.scale_refusal", read_only=True, allow_null=True,
        help_text="Why a change of the pool's replicas would be refused by its scaling target, as the control loop "
                  "last checked (every 10 minutes, and at once after the target changes), with the fix; empty: it "
                  "would be written; null: the pool was never read from its cluster.")
    scale_checked_at = serializers.DateTimeField(source="status.scale_checked_at", read_only=True, allow_null=True)

    class Meta:
        model = Pool
        fields = [
            "id", "name", "cluster", "cluster_name", "team", "namespace", "deployment", "model_name",
            "gpu_type", "gpus_per_replica", "min_replicas", "max_replicas", "warm_pool_fraction",
            "target_queue_per_replica", "replica_capacity_rps", "batch_slots", "batch_slots_in_use", "prefill_tokens_per_s", "cold_start_p50_s", "cold_start_p95_s",
            "scaling_target", "scaled_object", "scale_refusal", "scale_checked_at", "route_name", "route_backend", "fallback_pool", "priority", "approval_policy", "planner_constants", "slos",
        ]

    def get_validators(self):  # noqa: ANN201
        # Pool.clean() checks the Deployment claim itself and names the field; DRF's generic
        # "must make a unique set" would answer first and name none.
        claim = {"cluster", "namespace", "deployment"}
        return [validator for validator in super().get_validators() if set(getattr(validator, "fields", ())) != claim]


class AuditEventSerializer(serializers.ModelSerializer):
    object_kind = serializers.SerializerMethodField(help_text="The object's kind in words, e.g. 'Proposal'.")

    class Meta:
        model = AuditEvent
        fields = [
            "id", "at", "actor_name", "channel", "action", "object_type", "object_kind", "object_id", "object_repr",
            "before", "after", "request_id",
        ]
        read_only_fields = fields


    def get_object_kind(self, event: AuditEvent) -> str:
        return audit_view.type_name(event.object_type)


class ApiTokenSerializer(serializers.ModelSerializer):
    serializer_field_mapping = STRICT_FIELDS

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at"]
        extra_kwargs = {"expires_at": {"help_text": "When it stops working; API_TOKEN_DEFAULT_DAYS from now when left out."}}

    def validate_expires_at(self, value: datetime | None) -> datetime | None:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("Must be in the future (leave it out for the default lifetime).")
        if value is not None and (latest := services.latest_token_expiry()) is not None and value > latest:
            raise serializers.ValidationError(f"At most {settings.API_TOKEN_MAX_DAYS} days from now "
                                              f"(API_TOKEN_MAX_DAYS), that is before {latest:%Y-%m-%d %H:%M} UTC.")
        return value


class IssuedApiTokenSerializer(ApiTokenSerializer):
    """The answer to creating a token: the only time the raw token is shown."""

    token = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
