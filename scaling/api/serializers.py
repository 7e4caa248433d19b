from __future__ import annotations

from rest_framework import serializers

from controlplane.api.serializers import ScopedModelSerializer
from scaling import services
from controlplane.choices import Channel
from scaling.choices import ProposalKind
from scaling.models import Proposal, ProposalEvent


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


class ProposalCreateSerializer(ScopedModelSerializer):
    """A person's proposal: "scale pool X to N", with an optional reason and idempotency key."""

    kind = serializers.ChoiceField(choices=[ProposalKind.MANUAL, ProposalKind.SCHEDULED], default=ProposalKind.MANUAL)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500)
    idempotency_key = serializers.CharField(required=False, max_length=100)

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
    comment = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")
