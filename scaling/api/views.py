from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response

from controlplane import permissions, services as core
from controlplane.api.views import PoolChildFilter
from controlplane.choices import Channel, Role
from scaling import report_service, reports, services
from scaling.api import serializers
from scaling.choices import ReportState
from scaling.models import Proposal, WarmPoolReport


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
                    "execute": Role.OPERATOR}

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


class WarmPoolReportFilter(PoolChildFilter):
    class Meta:
        model = WarmPoolReport
        fields = ["state", "pool", "cluster", "team"]


class WarmPoolReportViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                            viewsets.GenericViewSet):
    """Warm-pool reports: create one (it runs in a worker), follow its percent done, read its result
    as JSON (the report itself) or its rows as CSV (`csv`). Operators create; viewers read."""

    queryset = WarmPoolReport.objects.select_related("pool__cluster", "pool__team", "requested_by").defer("trace_data")
    serializer_class = serializers.WarmPoolReportSerializer
    filterset_class = WarmPoolReportFilter
    parser_classes = [JSONParser, MultiPartParser, FormParser]
    action_roles = {"create": Role.OPERATOR}

    def get_queryset(self):  # noqa: ANN201
        return permissions.scoped(super().get_queryset(), self.request.user)

    def get_serializer_class(self):  # noqa: ANN201
        if self.action == "create":
            return serializers.WarmPoolReportCreateSerializer
        return serializers.WarmPoolReportListSerializer if self.action == "list" else super().get_serializer_class()

    @extend_schema(request=serializers.WarmPoolReportCreateSerializer, responses={201: serializers.WarmPoolReportSerializer})
    def create(self, request, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        incoming = self.get_serializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        pool = data["pool"]
        if not core.has_role(request.user, pool.team, Role.OPERATOR):
            raise PermissionDenied(f"Reports need the operator role in team {pool.team}.")
        upload = data.get("trace")
        try:
            report = report_service.request_report(
                pool, core.Actor.from_request(request, Channel.API), days=data["days"],
                sizes_pct=tuple(data.get("sizes_pct") or reports.DEFAULT_SIZES_PCT),
                trace_name=upload.name if upload else "", trace_data=upload.read() if upload else None,
                rate_scale=data["rate_scale"], peak_basis=data["peak_basis"])
        except report_service.ReportRequestError as exc:
            raise ValidationError({exc.field: [str(exc)]}) from None
        report = self.get_queryset().get(pk=report.pk)
        return Response(serializers.WarmPoolReportSerializer(report).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={(200, "text/csv"): str})
    @action(detail=True, methods=["get"])
    def csv(self, request, pk=None):  # noqa: ANN001, ANN201
        """The rows as CSV, one line per warm-pool size (409 until the report is done)."""
        report = self.get_object()
        if report.state != ReportState.SUCCEEDED:
            return Response({"detail": f"The report is {report.state}; the CSV exists once it is done."},
                            status=status.HTTP_409_CONFLICT)
        response = HttpResponse(reports.rows_csv(report.result), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="warm-pool-report-{report.pk}.csv"'
        return response
