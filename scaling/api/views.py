from __future__ import annotations

from django.db.models import Q
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from controlplane import services as core
from controlplane.api.parsers import JSONParser  # the nesting limit every other endpoint has
from controlplane.api.filters import ApiFilterSet, IdFilter, TrueOrFalseFilter
from controlplane.api.views import PoolChildFilter, ScopedViewMixin, TeamScopedViewSet
from controlplane.choices import Channel, Role
from scaling import breakers, fallbacks, report_service, reports, services, traffic
from scaling.api import serializers
from scaling.choices import SHIFT_ACTIVE_PHASES, ReportState
from scaling.models import CircuitBreaker, FallbackActivation, FallbackPolicy, Proposal, TrafficShift, WarmPoolReport


class ProposalFilter(PoolChildFilter):
    class Meta:
        model = Proposal
        fields = ["state", "pool", "kind", "cluster", "team"]


class ProposalViewSet(ScopedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                      viewsets.GenericViewSet):
    """Scaling proposals. Operators create, approve, reject and execute them; viewers read."""

    queryset = Proposal.objects.select_related("pool__cluster", "pool__team", "requested_by", "decided_by") \
        .prefetch_related("events")
    serializer_class = serializers.ProposalSerializer
    filterset_class = ProposalFilter
    action_roles = {"create": Role.OPERATOR, "approve": Role.OPERATOR, "reject": Role.OPERATOR,
                    "execute": Role.OPERATOR, "bulk": Role.OPERATOR}

    def get_serializer_class(self):  # noqa: ANN201
        if self.action == "list":
            return serializers.ProposalListSerializer
        return serializers.ProposalCreateSerializer if self.action == "create" else super().get_serializer_class()

    def get_queryset(self):  # noqa: ANN201
        queryset = super().get_queryset()
        if self.action == "list":  # the list leaves out the JSON snapshots and the events: never read them
            queryset = queryset.defer("signals", "evidence").prefetch_related(None)
        return queryset

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


class TrafficShiftFilter(ApiFilterSet):
    pool = IdFilter(method="filter_pool", label="Shifts to or from this pool")
    active = TrueOrFalseFilter(method="filter_active", label="Only shifts still under way")

    class Meta:
        model = TrafficShift
        fields = ["phase", "cluster", "to_pool", "from_pool", "route_name"]

    def filter_pool(self, queryset, name, value):  # noqa: ANN001, ANN201
        return queryset.filter(Q(to_pool=value) | Q(from_pool=value))

    def filter_active(self, queryset, name, value):  # noqa: ANN001, ANN201
        active = Q(phase__in=list(SHIFT_ACTIVE_PHASES))
        return queryset.filter(active if value else ~active)


class TrafficShiftViewSet(ScopedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                          viewsets.GenericViewSet):
    """Traffic shifts: operators start, pause, resume, roll back and approve gated steps; viewers read."""

    queryset = TrafficShift.objects.select_related("cluster", "from_pool__cluster", "to_pool__cluster",
                                                   "to_pool__team", "created_by").prefetch_related("events")
    serializer_class = serializers.TrafficShiftSerializer
    filterset_class = TrafficShiftFilter
    action_roles = {"create": Role.OPERATOR, "pause": Role.OPERATOR, "resume": Role.OPERATOR,
                    "rollback": Role.OPERATOR, "approve": Role.OPERATOR}

    def get_serializer_class(self):  # noqa: ANN201
        return serializers.TrafficShiftCreateSerializer if self.action == "create" else super().get_serializer_class()

    def _answer(self, shift: TrafficShift, code: int = status.HTTP_200_OK) -> Response:
        return Response(serializers.TrafficShiftSerializer(self.get_queryset().get(pk=shift.pk)).data, status=code)

    @extend_schema(request=serializers.TrafficShiftCreateSerializer, responses={201: serializers.TrafficShiftSerializer})
    def create(self, request, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        """Start a shift (pending; the next 15-s tick writes its first step). 400 names the field at fault;
        409 when another shift is moving traffic on the route; 503 when the route cannot be read."""
        incoming = self.get_serializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = dict(incoming.validated_data)
        for field in ("from_pool", "to_pool"):
            pool = data[field]
            core.check_may_change(request.user, pool.team, pool.cluster, Role.OPERATOR, field=field)
        shift = traffic.start(data.pop("from_pool"), data.pop("to_pool"), self.actor, **data)
        return self._answer(shift, status.HTTP_201_CREATED)

    def _act(self, request, act) -> Response:  # noqa: ANN001
        shift = self.get_object()  # 404 when invisible; object permission checks the role
        comment = serializers.ShiftActionSerializer(data=request.data)
        comment.is_valid(raise_exception=True)
        return self._answer(act(shift.pk, self.actor, comment.validated_data["comment"]))

    @extend_schema(request=serializers.ShiftActionSerializer, responses=serializers.TrafficShiftSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):  # noqa: ANN001, ANN201
        """Move no further (the guard still watches and may roll back); 409 unless pending, holding or waiting."""
        return self._act(request, traffic.pause)

    @extend_schema(request=serializers.ShiftActionSerializer, responses=serializers.TrafficShiftSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):  # noqa: ANN001, ANN201
        """Go on from where it paused (the current step's hold starts again); 409 unless paused."""
        return self._act(request, traffic.resume)

    @extend_schema(request=serializers.ShiftActionSerializer, responses=serializers.TrafficShiftSerializer)
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):  # noqa: ANN001, ANN201
        """Restore the weights the shift started from, now; 409 when it has ended."""
        return self._act(request, traffic.rollback)

    @extend_schema(request=serializers.ShiftActionSerializer, responses=serializers.TrafficShiftSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):  # noqa: ANN001, ANN201
        """Approve the gated step the shift waits for; 409 when none waits."""
        return self._act(request, traffic.approve)


class WarmPoolReportFilter(PoolChildFilter):
    class Meta:
        model = WarmPoolReport
        fields = ["state", "pool", "cluster", "team"]


class WarmPoolReportViewSet(ScopedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                            viewsets.GenericViewSet):
    """Warm-pool reports: create one (it runs in a worker), follow its percent done, read its result
    as JSON (the report itself) or its rows as CSV (`csv`). Operators create; viewers read."""

    queryset = WarmPoolReport.objects.select_related("pool__cluster", "pool__team", "requested_by").defer("trace_data")
    serializer_class = serializers.WarmPoolReportSerializer
    filterset_class = WarmPoolReportFilter
    parser_classes = [JSONParser, MultiPartParser, FormParser]
    action_roles = {"create": Role.OPERATOR}

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


class FallbackViewSet(ScopedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Fallback activations: viewers read; operators activate, restore and approve a pool's fallback."""

    queryset = FallbackActivation.objects.select_related("pool__cluster", "fallback_pool__cluster", "pool__team",
                                                         "created_by").prefetch_related("events")
    serializer_class = serializers.FallbackActivationSerializer
    filterset_fields = ["pool", "phase", "fallback_pool"]
    action_roles = {"activate": Role.OPERATOR, "restore": Role.OPERATOR, "approve": Role.OPERATOR}

    def get_serializer_class(self):  # noqa: ANN201
        if self.action in self.action_roles:
            return serializers.FallbackActionSerializer
        return super().get_serializer_class()

    def _act(self, request, act) -> Response:  # noqa: ANN001
        incoming = self.get_serializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        pool = data["pool"]
        core.check_may_change(request.user, pool.team, pool.cluster, Role.OPERATOR, field="pool")
        actor = core.Actor.from_request(request, Channel.API)
        activation = act(pool, actor, data)
        return Response(serializers.FallbackActivationSerializer(self.get_queryset().get(pk=activation.pk)).data)

    @extend_schema(request=serializers.FallbackActionSerializer, responses=serializers.FallbackActivationSerializer)
    @action(detail=False, methods=["post"])
    def activate(self, request):  # noqa: ANN001, ANN201
        """Send `share` of the pool's eligible traffic to its fallback pool now; it holds until restored.
        400 when the pool has no fallback or route; 409 while a traffic shift writes the route."""
        return self._act(request, lambda pool, actor, data: fallbacks.activate(
            pool, data.get("share", 1.0), actor, data["comment"]))

    @extend_schema(request=serializers.FallbackActionSerializer, responses=serializers.FallbackActivationSerializer)
    @action(detail=False, methods=["post"])
    def restore(self, request):  # noqa: ANN001, ANN201
        """All the pool's traffic back to it now (or reject an entry waiting for approval); 409 when none is open."""
        return self._act(request, lambda pool, actor, data: fallbacks.restore(pool, actor, data["comment"]))

    @extend_schema(request=serializers.FallbackActionSerializer, responses=serializers.FallbackActivationSerializer)
    @action(detail=False, methods=["post"])
    def approve(self, request):  # noqa: ANN001, ANN201
        """Approve the entry the pool's policy waits for; 409 when none waits."""
        return self._act(request, lambda pool, actor, data: fallbacks.approve(pool, actor, data["comment"]))


class CircuitBreakerViewSet(ScopedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Circuit breakers: viewers read; operators force one open or closed, and release it to the evaluation."""

    queryset = CircuitBreaker.objects.select_related("pool__team", "pool__cluster").prefetch_related("transitions")
    serializer_class = serializers.CircuitBreakerSerializer
    filterset_fields = ["pool", "scope", "state", "endpoint", "forced"]
    action_roles = {"open": Role.OPERATOR, "close": Role.OPERATOR, "release": Role.OPERATOR}

    def _force(self, request, state: str) -> Response:  # noqa: ANN001
        breaker = self.get_object()  # 404 when invisible; object permission checks the role
        comment = serializers.BreakerActionSerializer(data=request.data)
        comment.is_valid(raise_exception=True)
        breakers.force(breaker.pk, state, core.Actor.from_request(request, Channel.API),
                       comment.validated_data["comment"])
        return Response(serializers.CircuitBreakerSerializer(self.get_queryset().get(pk=breaker.pk)).data)

    @extend_schema(request=serializers.BreakerActionSerializer, responses=serializers.CircuitBreakerSerializer)
    @action(detail=True, methods=["post"])
    def open(self, request, pk=None):  # noqa: ANN001, ANN201
        """Force the breaker open (an endpoint leaves the route) and hold it there."""
        return self._force(request, "open")

    @extend_schema(request=serializers.BreakerActionSerializer, responses=serializers.CircuitBreakerSerializer)
    @action(detail=True, methods=["post"])
    def close(self, request, pk=None):  # noqa: ANN001, ANN201
        """Force the breaker closed (an endpoint is re-admitted) and hold it there."""
        return self._force(request, "closed")

    @extend_schema(request=serializers.BreakerActionSerializer, responses=serializers.CircuitBreakerSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request, pk=None):  # noqa: ANN001, ANN201
        """Hand a forced breaker back to the evaluation; 409 when it is not forced."""
        return self._force(request, "release")


class FallbackPolicyViewSet(TeamScopedViewSet):
    """A pool's fallback policy (keyed by the pool): team admins create, change and delete it (not while a fallback
    of the pool is open: 409); viewers read."""

    queryset = FallbackPolicy.objects.select_related("pool__cluster", "pool__team")
    serializer_class = serializers.FallbackPolicySerializer
    filterset_fields = ["enabled", "requires_approval"]

    def perform_destroy(self, instance: FallbackPolicy) -> None:
        """409 while a fallback of the pool is open (restore it first)."""
        fallbacks.delete_policy(instance, self.actor)
