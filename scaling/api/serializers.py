from __future__ import annotations

from rest_framework import serializers

from controlplane.api.fields import StrictIdField, StrictPrimaryKeyRelatedField
from controlplane.api.serializers import ScopedModelSerializer, TextField
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import report_service, reports, services
from scaling.choices import PeakBasis, ProposalKind
from scaling.engine import shifting
from scaling.models import (
    BreakerTransition,
    CircuitBreaker,
    FallbackActivation,
    FallbackEvent,
    FallbackPolicy,
    Proposal,
    ProposalEvent,
    TrafficShift,
    TrafficShiftEvent,
    WarmPoolReport,
)


class ProposalEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = ProposalEvent
        fields = ["at", "from_state", "to_state", "actor_name", "channel", "comment", "data"]


class ProposalSerializer(serializers.ModelSerializer):
    pool_name = serializers.CharField(source="pool.__str__", read_only=True)
    # null: asked by the loop or a token of a since-deleted user; not decided yet; decided by policy.
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, default=None, allow_null=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, default=None, allow_null=True)
    decided_channel = serializers.ChoiceField(choices=Channel.choices, allow_blank=True, read_only=True,
                                              help_text="Empty until decided.")
    cost_per_hour_usd = serializers.FloatField(read_only=True, allow_null=True)  # null: no price for the GPU type
    events = ProposalEventSerializer(many=True, read_only=True)

    class Meta:
        model = Proposal
        fields = [
            "id", "pool", "pool_name", "kind", "state", "current_replicas", "target_replicas", "reasons",
            "signals", "evidence", "cost_per_hour_usd", "requested_by", "requested_channel", "decided_by",
            "decided_channel", "decision_comment", "created_at", "expires_at", "decided_at",
            "execution_started_at", "applied_at", "finished_at", "measured_cold_start_s", "attempts",
            "last_error", "events",
        ]
        read_only_fields = fields


class ProposalListSerializer(ProposalSerializer):
    """A proposal in a list: what it changes, why in a sentence, and where it stands. Its signal snapshot,
    evidence series and events come with the proposal itself (`GET proposals/{id}/`), so a page of 50 stays
    small whatever each one's history."""

    events = None  # removes the parent's declared field

    class Meta(ProposalSerializer.Meta):
        fields = [name for name in ProposalSerializer.Meta.fields if name not in ("signals", "evidence", "events")]
        read_only_fields = fields


class ProposalCreateSerializer(ScopedModelSerializer):
    """A person's proposal: "scale pool X to N", with an optional reason and idempotency key."""

    kind = serializers.ChoiceField(choices=[ProposalKind.MANUAL, ProposalKind.SCHEDULED], default=ProposalKind.MANUAL)
    reason = TextField(required=False, allow_blank=True, max_length=500)
    idempotency_key = TextField(required=False, max_length=100)

    class Meta:
        model = Proposal
        fields = ["pool", "target_replicas", "kind", "reason", "idempotency_key"]
        validators: list = []  # a key already used for the pool answers with its proposal (the service)

    def validate_idempotency_key(self, value: str) -> str:
        if value.startswith(services.LOOP_KEY_PREFIX):
            raise serializers.ValidationError(
                f"Keys starting with '{services.LOOP_KEY_PREFIX}' are reserved for the control loop.")
        return value

    def validate(self, attrs):  # noqa: ANN001, ANN201
        return attrs  # the service checks the bounds against the pool


class DecisionSerializer(serializers.Serializer):
    comment = TextField(required=False, allow_blank=True, max_length=2000, default="")


class TrafficShiftEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = TrafficShiftEvent
        fields = ["at", "from_phase", "to_phase", "step", "actor_name", "channel", "comment", "data"]


class TrafficShiftSerializer(serializers.ModelSerializer):
    from_pool_name = serializers.CharField(source="from_pool.__str__", read_only=True)
    to_pool_name = serializers.CharField(source="to_pool.__str__", read_only=True)
    share_percent = serializers.IntegerField(read_only=True, help_text="The receiving backend's share now, in percent.")
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    events = TrafficShiftEventSerializer(many=True, read_only=True)

    class Meta:
        model = TrafficShift
        fields = [
            "id", "cluster", "from_pool", "from_pool_name", "to_pool", "to_pool_name", "router_kind", "route_namespace",
            "route_name", "from_backend", "to_backend", "steps", "hold_s", "max_p95_s", "max_error_rate",
            "failure_threshold", "no_data_deadline_s", "gated_steps", "phase", "step", "share_percent", "good_step",
            "rollback_step", "approved_step", "step_since", "failed_checks", "no_data_since", "start_weights",
            "planned_weights", "current_weights", "last_check", "last_error", "created_by", "created_channel",
            "created_at", "finished_at", "events",
        ]
        read_only_fields = fields


class TrafficShiftCreateSerializer(ScopedModelSerializer):
    """Move a route's traffic from one pool's backend to another's, in steps under a guard."""

    steps = serializers.ListField(child=serializers.IntegerField(), required=False, default=list(shifting.DEFAULT_STEPS),
                                  help_text="The receiving backend's share in percent at each step, rising.")
    hold_s = serializers.FloatField(min_value=0, max_value=86400, default=shifting.DEFAULT_HOLD_S)
    max_p95_s = serializers.FloatField(min_value=0.001, default=1.0)
    max_error_rate = serializers.FloatField(min_value=0, max_value=1, default=0.01)
    failure_threshold = serializers.IntegerField(min_value=1, max_value=100, default=shifting.DEFAULT_FAILURE_THRESHOLD)
    no_data_deadline_s = serializers.FloatField(min_value=0, max_value=86400,
                                                default=shifting.DEFAULT_NO_DATA_DEADLINE_S)
    gated_steps = serializers.ListField(child=serializers.IntegerField(), required=False, default=list,
                                        help_text="Step numbers (from 1) that wait for a person's approval.")
    idempotency_key = TextField(required=False, max_length=100)

    class Meta:
        model = TrafficShift
        fields = ["from_pool", "to_pool", "router_kind", "steps", "hold_s", "max_p95_s", "max_error_rate",
                  "failure_threshold", "no_data_deadline_s", "gated_steps", "idempotency_key"]
        validators: list = []  # a key already used for the pool answers with its shift (the service)

    def validate(self, attrs):  # noqa: ANN001, ANN201
        return attrs  # the service checks the pools, the route and the steps against each other


class ShiftActionSerializer(serializers.Serializer):
    comment = TextField(required=False, allow_blank=True, max_length=2000, default="")


class BulkDecisionSerializer(serializers.Serializer):
    """Several proposals decided at once: each under the same rules as one approve or reject."""

    ids = serializers.ListField(child=StrictIdField(max_value=2**31 - 1),
                                min_length=1, max_length=services.BULK_MAX)
    verdict = serializers.ChoiceField(choices=["approve", "reject"])
    comment = TextField(required=False, allow_blank=True, max_length=2000, default="")


class BulkOutcomeSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="proposal_id")
    ok = serializers.BooleanField()
    state = serializers.CharField(allow_null=True)
    error = serializers.CharField()
    status = serializers.IntegerField(source="status_code")


class BulkResultSerializer(serializers.Serializer):
    results = BulkOutcomeSerializer(many=True)


class WarmPoolReportSerializer(serializers.ModelSerializer):
    """A warm-pool report: its state and percent done, and once done its result (`docs/reports.md`)."""

    pool_name = serializers.CharField(source="pool.__str__", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, default=None)

    class Meta:
        model = WarmPoolReport
        fields = ["id", "pool", "pool_name", "state", "percent_done", "days", "sizes_pct", "rate_scale", "peak_basis",
                  "trace_name", "window_start", "window_end", "error", "requested_by", "requested_channel", "created_at", "started_at",
                  "finished_at", "result"]
        read_only_fields = fields


class WarmPoolReportListSerializer(WarmPoolReportSerializer):
    """The list leaves the result out (it carries a day of per-minute series); read one report for it."""

    class Meta(WarmPoolReportSerializer.Meta):
        fields = [name for name in WarmPoolReportSerializer.Meta.fields if name != "result"]
        read_only_fields = fields


class WarmPoolReportCreateSerializer(ScopedModelSerializer):
    """Ask for a report: a pool, the last `days` of its stored history (or an uploaded `trace`), the sizes."""

    days = serializers.FloatField(default=reports.DEFAULT_DAYS, min_value=report_service.MIN_DAYS,
                                  max_value=report_service.MAX_DAYS)
    sizes_pct = serializers.ListField(child=serializers.FloatField(min_value=0, max_value=100), required=False,
                                      allow_empty=False, max_length=reports.MAX_SIZES)
    rate_scale = serializers.FloatField(default=1.0, min_value=0.001, max_value=1000)
    peak_basis = serializers.ChoiceField(choices=PeakBasis.choices, default=PeakBasis.FORECAST)
    trace = serializers.FileField(required=False, allow_empty_file=False, write_only=True,
                                  help_text="A trace file (Azure CSV, Mooncake JSONL, ServeGen CSV or tar.gz).")

    class Meta:
        model = WarmPoolReport
        fields = ["pool", "days", "sizes_pct", "rate_scale", "peak_basis", "trace"]

    def validate(self, attrs):  # noqa: ANN001, ANN201
        return attrs  # the service checks the rest (the trace is parsed there)


class FallbackEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = FallbackEvent
        fields = ["at", "kind", "from_phase", "to_phase", "share", "actor_name", "channel", "comment", "data"]


class FallbackActivationSerializer(serializers.ModelSerializer):
    pool_name = serializers.CharField(source="pool.__str__", read_only=True)
    fallback_pool_name = serializers.CharField(source="fallback_pool.__str__", read_only=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    events = FallbackEventSerializer(many=True, read_only=True)

    class Meta:
        model = FallbackActivation
        fields = [
            "id", "pool", "pool_name", "fallback_pool", "fallback_pool_name", "router_kind", "route_namespace",
            "route_name", "primary_backend", "fallback_backend", "phase", "trigger", "forced", "share",
            "target_percent", "route_percent", "pair_total", "start_weights", "reasons", "last_error", "created_by",
            "created_channel", "started_at", "finished_at", "events",
        ]
        read_only_fields = fields


class FallbackActionSerializer(serializers.Serializer):
    """A person's action on a pool's fallback; `share` only for `activate`."""

    pool = StrictPrimaryKeyRelatedField(queryset=Pool.objects.select_related("team", "cluster"))
    share = serializers.FloatField(required=False, min_value=0.01, max_value=1.0,
                                   help_text="Of the pool's fallback-eligible traffic (activate only; default 1.0).")
    comment = TextField(required=False, allow_blank=True, max_length=2000, default="")

    def get_fields(self):  # noqa: ANN201
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None:
            from controlplane import permissions

            fields["pool"].queryset = permissions.scoped(fields["pool"].queryset, request.user)
        return fields


class BreakerTransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = BreakerTransition
        fields = ["at", "from_state", "to_state", "actor_name", "channel", "reason"]


class CircuitBreakerSerializer(serializers.ModelSerializer):
    transitions = BreakerTransitionSerializer(many=True, read_only=True)

    class Meta:
        model = CircuitBreaker
        fields = ["id", "scope", "pool", "endpoint", "state", "since", "probe_successes", "forced", "failure_ratio",
                  "min_requests", "open_for_s", "last_counts", "last_reasons", "transitions"]
        read_only_fields = fields


class BreakerActionSerializer(serializers.Serializer):
    comment = TextField(required=False, allow_blank=True, max_length=2000, default="")


class FallbackPolicySerializer(ScopedModelSerializer):
    """A pool's fallback thresholds; its fallback pool is the pool's own `fallback_pool`."""

    entry_after_s = serializers.FloatField(min_value=0, max_value=3600, default=15.0)
    exit_after_s = serializers.FloatField(min_value=0, max_value=86400, default=180.0)
    exit_latency_ratio = serializers.FloatField(min_value=0.01, max_value=1.0, default=0.8)
    max_share = serializers.FloatField(min_value=0.0, max_value=1.0, default=1.0)
    return_step_hold_s = serializers.FloatField(min_value=0, max_value=86400, default=60.0)
    eligible_share = serializers.FloatField(min_value=0.0, max_value=1.0, default=1.0)
    classes = serializers.ListField(child=serializers.ChoiceField(choices=["standard", "priority"]),
                                    default=list(["standard"]), allow_empty=True)

    class Meta:
        model = FallbackPolicy
        fields = ["pool", "router_kind", "enabled", "requires_approval", "entry_after_s", "exit_after_s",
                  "exit_latency_ratio", "max_share", "return_step_hold_s", "classes", "eligible_share", "state",
                  "last_decision", "updated_at"]
        read_only_fields = ["state", "last_decision", "updated_at"]

    def validate(self, attrs):  # noqa: ANN001, ANN201
        attrs = super().validate(attrs)
        pool = attrs.get("pool") or getattr(self.instance, "pool", None)
        if self.instance is not None and "pool" in attrs and attrs["pool"].pk != self.instance.pool_id:
            raise serializers.ValidationError({"pool": ["A policy stays with its pool; create one for the other pool."]})
        if pool is not None and pool.fallback_pool_id is None:
            raise serializers.ValidationError({"pool": [f"Pool {pool} has no fallback_pool; set it on the pool first."]})
        return attrs
