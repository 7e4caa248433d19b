"""REST API for the core inventory: short declarations on top of one scoped base class."""
from __future__ import annotations

import hashlib
import json

import django_filters
from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import APIException, PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from controlplane import audit_view, permissions, services
from controlplane.api import serializers
from controlplane.api.filters import ApiFilterSet, IdFilter
from controlplane.api.pagination import UncountedPagination
from controlplane.choices import AuditAction, Channel, Role
from controlplane.models import SLO, ApiToken, AuditEvent, Cluster, Pool, ScheduleWindow, Team


class ScopedViewMixin:
    """What every API viewset shares: objects scoped to the user's teams, and the API actor for services."""

    def get_queryset(self):  # noqa: ANN201
        return permissions.scoped(super().get_queryset(), self.request.user)

    @property
    def actor(self) -> services.Actor:
        return services.Actor.from_request(self.request, Channel.API)


class PreconditionFailed(APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_code = "precondition_failed"


class ConditionalWriteMixin:
    """`ETag` on an object's answers, and `If-Match` on its writes (docs/api.md, "Concurrent edits").

    The tag is a digest of the fields a client can write, as the API shows them: what the control loop
    writes (read-only fields) does not change it, so a script's tag stays good between its own edits.
    Without `If-Match`, a write is last-write-wins, as before. With it, the row is locked, the tag
    compared, and the write made in one transaction: a stale tag is a `412` with the current one."""

    def etag(self, data: dict) -> str:
        """The tag of an object as a serializer of this view shows it (`data`)."""
        fields = self.get_serializer().fields
        writable = {name for name, field in fields.items() if not field.read_only and not field.write_only}
        shown = {name: value for name, value in data.items() if name in writable} | {"id": data.get("id")}
        digest = hashlib.sha256(json.dumps(shown, sort_keys=True, default=str).encode()).hexdigest()
        return f'"{digest[:32]}"'

    def _tagged(self, response: Response) -> Response:
        if response.status_code < 300 and isinstance(response.data, dict):
            response["ETag"] = self.etag(response.data)
        return response

    def _check_if_match(self) -> None:
        """Call inside the write's transaction: locks the row until the write commits."""
        wanted = self.request.headers.get("If-Match")
        if wanted is None:
            return
        instance = self.get_object()  # 404 and permissions first, as without the header
        type(instance).objects.select_for_update().filter(pk=instance.pk).exists()
        tags = {tag.strip().removeprefix("W/") for tag in wanted.split(",")}
        current = self.etag(self.get_serializer(self.get_object()).data)
        if "*" not in tags and current not in tags:
            raise PreconditionFailed({
                "detail": "The object changed since you read it (If-Match does not match its ETag): "
                          "read it again, reapply your change and retry.",
                "etag": current,
            })

    def retrieve(self, request, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        return self._tagged(super().retrieve(request, *args, **kwargs))

    def create(self, request, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        return self._tagged(super().create(request, *args, **kwargs))

    def update(self, request, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        with transaction.atomic():
            self._check_if_match()
            response = super().update(request, *args, **kwargs)
        return self._tagged(response)

    def destroy(self, request, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        with transaction.atomic():
            self._check_if_match()
            return super().destroy(request, *args, **kwargs)


class TeamScopedViewSet(ScopedViewMixin, ConditionalWriteMixin, viewsets.ModelViewSet):
    """Every inventory viewset: queryset scoped to the user's teams, writes audited, roles checked, and
    `If-Match` honoured on writes (ConditionalWriteMixin)."""

    action_roles: dict[str, str] = {}

    def _check_may_write(self, serializer, role: str = Role.ADMIN) -> None:  # noqa: ANN001
        """The object as it will be (new or changed) must be one the user may write: `role` in its
        team and, for what acts in a cluster, a cluster owned by or shared with that team. Call it
        inside the write's transaction: it keeps the cluster row locked until the write commits."""
        unsaved = serializer.Meta.model(
            **{k: v for k, v in serializer.validated_data.items() if not isinstance(v, list)}
        )
        if serializer.instance is not None:
            for field in serializer.Meta.model._meta.concrete_fields:
                if field.name not in serializer.validated_data:
                    setattr(unsaved, field.attname, getattr(serializer.instance, field.attname))
        permissions.check_may_write(self.request.user, unsaved, role, lock=True)

    def perform_create(self, serializer) -> None:  # noqa: ANN001
        with transaction.atomic():
            self._check_may_write(serializer)
            instance = serializer.save()
            services.record(self.actor, AuditAction.CREATE, instance)

    def perform_update(self, serializer) -> None:  # noqa: ANN001
        before = services.snapshot(serializer.instance)
        with transaction.atomic():
            self._check_may_write(serializer)
            instance = serializer.save()
            services.record(self.actor, AuditAction.UPDATE, instance, before=before)

    def perform_destroy(self, instance) -> None:  # noqa: ANN001
        services.delete_with_audit(self.actor, instance)


class TeamViewSet(TeamScopedViewSet):
    queryset = Team.objects.all()
    serializer_class = serializers.TeamSerializer
    lookup_field = "slug"
    filterset_fields = ["slug"]

    def perform_create(self, serializer) -> None:  # noqa: ANN001
        # A new team has no members yet, so only a superuser can create one.
        if not self.request.user.is_superuser:
            raise PermissionDenied("Only a superuser can create teams.")
        with transaction.atomic():
            services.record(self.actor, AuditAction.CREATE, serializer.save())


class ClusterFilter(ApiFilterSet):
    team = django_filters.CharFilter(field_name="team__slug")

    class Meta:
        model = Cluster
        fields = ["name", "team", "region"]


class ClusterViewSet(TeamScopedViewSet):
    queryset = Cluster.objects.select_related("team").prefetch_related("shared_with")
    serializer_class = serializers.ClusterSerializer
    filterset_class = ClusterFilter


class PoolFilter(ApiFilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    cluster_name = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = Pool
        fields = ["cluster", "cluster_name", "team", "name", "model_name", "gpu_type", "priority"]


class PoolViewSet(TeamScopedViewSet):
    queryset = Pool.objects.select_related("cluster", "team", "status").prefetch_related("slos")
    serializer_class = serializers.PoolSerializer
    filterset_class = PoolFilter


class PoolChildFilter(ApiFilterSet):
    """Filters for objects that belong to a pool: by the pool's cluster (id) and team (slug)."""

    cluster = IdFilter(field_name="pool__cluster")
    team = django_filters.CharFilter(field_name="pool__team__slug")


class SLOFilter(PoolChildFilter):
    class Meta:
        model = SLO
        fields = ["pool", "cluster", "team", "indicator"]


class SLOViewSet(TeamScopedViewSet):
    queryset = SLO.objects.select_related("pool__cluster")
    serializer_class = serializers.SLOSerializer
    filterset_class = SLOFilter


class ScheduleFilter(PoolChildFilter):
    class Meta:
        model = ScheduleWindow
        fields = ["pool", "cluster", "team", "weekday"]


class ScheduleWindowViewSet(TeamScopedViewSet):
    queryset = ScheduleWindow.objects.select_related("pool__cluster")
    serializer_class = serializers.ScheduleWindowSerializer
    filterset_class = ScheduleFilter


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit log: append-only, so read-only here."""

    queryset = AuditEvent.objects.all()
    serializer_class = serializers.AuditEventSerializer
    filterset_class = audit_view.AuditEventFilter  # the same filters as the audit page
    pagination_class = UncountedPagination  # no total, as on the page: counting the log reads all of it

    def get_queryset(self):  # noqa: ANN201
        return services.visible_audit_events(self.request.user)


class ApiTokenViewSet(
    mixins.ListModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet
):
    """The caller's own API tokens. Creating one shows it once; deleting one revokes it."""

    serializer_class = serializers.ApiTokenSerializer
    permission_classes = [IsAuthenticated]

    def get_queryset(self):  # noqa: ANN201
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(responses={201: serializers.IssuedApiTokenSerializer})
    def create(self, request, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, raw = services.issue_token(
            request.user,
            services.Actor.from_request(request, Channel.API),
            name=serializer.validated_data.get("name", ""),
            expires_at=serializer.validated_data.get("expires_at"),
        )
        token.token = raw
        return Response(serializers.IssuedApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance) -> None:  # noqa: ANN001
        services.revoke_token(instance, services.Actor.from_request(self.request, Channel.API))
