from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from controlplane import permissions, services as core
from controlplane.api.views import PoolChildFilter
from controlplane.choices import Channel, Role
from scaling import services
from scaling.api import serializers
from scaling.models import Proposal


class ProposalFilter(PoolChildFilter):
    class Meta:
        model = Proposal
        fields = ["state", "pool", "kind", "cluster", "team"]


class ProposalViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                      viewsets.GenericViewSet):
    """Scaling proposals. Operators create, approve, reject and execute them; viewers read."""

    queryset = Proposal.objects.select_related("pool__cluster", "pool__team", "requested_by", "decided_by") \
        .prefetch_related("events")
    serializer_class = serializers.ProposalSerializer
    filterset_class = ProposalFilter
    action_roles = {"create": Role.OPERATOR, "approve": Role.OPERATOR, "reject": Role.OPERATOR,
                    "execute": Role.OPERATOR, "bulk": Role.OPERATOR}

    def get_queryset(self):  # noqa: ANN201
        return permissions.scoped(super().get_queryset(), self.request.user)

    def get_serializer_class(self):  # noqa: ANN201
        return serializers.ProposalCreateSerializer if self.action == "create" else super().get_serializer_class()

    @property
    def actor(self) -> core.Actor:
        return core.Actor.from_request(self.request, Channel.API)

    @extend_schema(request=serializers.ProposalCreateSerializer, responses={201: serializers.ProposalSerializer})
    def create(self, request, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        incoming = self.get_serializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        pool = data["pool"]
        if not core.has_role(request.user, pool.team, Role.OPERATOR):
            raise PermissionDenied(f"Proposing needs the operator role in team {pool.team}.")
        core.check_may_change(request.user, pool.team, pool.cluster, Role.OPERATOR, field="pool")
        reason = data.get("reason") or f"requested by {self.actor.name}"
        proposal = services.propose(
            pool, data["target_replicas"], data["kind"], self.actor,
            reasons=[{"code": "manual", "detail": reason}], idempotency_key=data.get("idempotency_key"),
        )
        proposal = self.get_queryset().get(pk=proposal.pk)
        return Response(serializers.ProposalSerializer(proposal).data, status=status.HTTP_201_CREATED)

    def _decide(self, request, decide) -> Response:  # noqa: ANN001
        proposal = self.get_object()  # 404 when invisible; object permission checks the role
        decision = serializers.DecisionSerializer(data=request.data)
        decision.is_valid(raise_exception=True)
        decide(proposal.pk, self.actor, decision.validated_data["comment"])
        return Response(serializers.ProposalSerializer(self.get_queryset().get(pk=proposal.pk)).data)

    @extend_schema(request=serializers.DecisionSerializer, responses=serializers.ProposalSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):  # noqa: ANN001, ANN201
        """Approve a pending proposal; it is executed at once (409 if it is no longer pending)."""
        return self._decide(request, services.approve)

    @extend_schema(request=serializers.DecisionSerializer, responses=serializers.ProposalSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):  # noqa: ANN001, ANN201
        return self._decide(request, services.reject)

    @extend_schema(request=serializers.BulkDecisionSerializer, responses=serializers.BulkResultSerializer)
    @action(detail=False, methods=["post"])
    def bulk(self, request):  # noqa: ANN001, ANN201
        """Approve or reject several proposals at once. Each is decided on its own, under every rule of one
        decision; `results` says per id whether it went through (`status` 200) or why not (403, 404, 409)."""
        incoming = serializers.BulkDecisionSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        outcomes = services.decide_many(data["ids"], data["verdict"], self.actor, data["comment"])
        return Response(serializers.BulkResultSerializer({"results": outcomes}).data)

    @extend_schema(request=None, responses=serializers.ProposalSerializer)
    @action(detail=True, methods=["post"])
    def execute(self, request, pk=None):  # noqa: ANN001, ANN201
        """Run (or resume) the execution of an approved proposal now; 409 when there is nothing to run."""
        proposal = self.get_object()
        core.check_may_change(request.user, proposal.pool.team, proposal.pool.cluster, Role.OPERATOR)
        if services.execute(proposal.pk) is None:
            current = Proposal.objects.get(pk=proposal.pk)
            raise services.ProposalConflict(current, f"Proposal #{current.pk} is {current.state}: nothing to execute.")
        return Response(serializers.ProposalSerializer(self.get_queryset().get(pk=proposal.pk)).data)
