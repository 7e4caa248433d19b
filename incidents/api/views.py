"""REST API for notification channels, their outbox (read-only), alerts (read-only) and silences.
Scoped to the caller's teams."""
from __future__ import annotations

import django_filters
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane import permissions, services as core
from controlplane.api.views import TrueOrFalseFilter
from controlplane.choices import Channel as ActorChannel, Role
from incidents import alerts, services
from incidents.api import serializers
from incidents.choices import ACTIVE_ALERT_STATES
from incidents.models import Alert, Channel, Notification, Silence


class ChannelFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    enabled = TrueOrFalseFilter()

    class Meta:
        model = Channel
        fields = ["team", "kind", "enabled"]


class NotificationFilter(django_filters.FilterSet):
    class Meta:
        model = Notification
        fields = ["channel", "proposal", "alert", "kind", "state"]


class ChannelViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                     mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Notification channels. Team admins add, switch back on and remove them; members read them."""

    queryset = Channel.objects.select_related("team")
    serializer_class = serializers.ChannelSerializer
    filterset_class = ChannelFilter
    action_roles = {"create": Role.ADMIN, "destroy": Role.ADMIN, "enable": Role.ADMIN}

    def get_queryset(self):  # noqa: ANN201
        return permissions.scoped(super().get_queryset(), self.request.user)

    @property
    def actor(self) -> core.Actor:
        return core.Actor.from_request(self.request, ActorChannel.API)

    def create(self, request: Request, *args, **kwargs) -> Response:  # noqa: ANN002, ANN003
        incoming = self.get_serializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        if not core.has_role(request.user, data["team"], Role.ADMIN):
            raise PermissionDenied(f"Adding a channel needs the admin role in team {data['team']}.")
        channel = services.create_channel(data["team"], data["name"], data["kind"], data["settings"], self.actor)
        return Response(self.get_serializer(channel).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: Channel) -> None:
        services.delete_channel(instance, self.actor)

    @extend_schema(request=None, responses=serializers.ChannelSerializer)
    @action(detail=True, methods=["post"])
    def enable(self, request: Request, pk: str | None = None) -> Response:
        """Switch a channel back on after a permanent failure was fixed."""
        channel = self.get_object()
        services.enable_channel(channel, self.actor)
        return Response(self.get_serializer(self.get_queryset().get(pk=channel.pk)).data)


class NotificationViewSet(viewsets.ReadOnlyModelViewSet):
    """The outbox: every notification with its attempts, next attempt and last error."""

    queryset = Notification.objects.all()
    serializer_class = serializers.NotificationSerializer
    filterset_class = NotificationFilter

    def get_queryset(self):  # noqa: ANN201
        return permissions.scoped(super().get_queryset(), self.request.user)


class AlertFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    active = TrueOrFalseFilter(method="filter_active", label="Pending or firing")

    class Meta:
        model = Alert
        fields = ["team", "cluster", "pool", "rule", "tier", "state", "fingerprint"]

    def filter_active(self, queryset, name: str, value: bool):  # noqa: ANN001, ANN201
        return queryset.filter(state__in=ACTIVE_ALERT_STATES) if value else queryset.exclude(state__in=ACTIVE_ALERT_STATES)


class AlertViewSet(viewsets.ReadOnlyModelViewSet):
    """Alerts as the rules raised them: state, numbers, and what holds them back (silence, warming scale-up)."""

    queryset = Alert.objects.select_related("team")
    serializer_class = serializers.AlertSerializer
    filterset_class = AlertFilter

    def get_queryset(self):  # noqa: ANN201
        return permissions.scoped(super().get_queryset(), self.request.user)


class SilenceFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    active = TrueOrFalseFilter(method="filter_active", label="Not yet ended")

    class Meta:
        model = Silence
        fields = ["team"]

    def filter_active(self, queryset, name: str, value: bool):  # noqa: ANN001, ANN201
        now = timezone.now()
        return queryset.filter(ends_at__gt=now) if value else queryset.filter(ends_at__lte=now)


class SilenceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                     viewsets.GenericViewSet):
    """Silences mute a team's matching alerts until they end. Operators of the team add and end them."""

    queryset = Silence.objects.select_related("team", "created_by", "expired_by")
    serializer_class = serializers.SilenceSerializer
    filterset_class = SilenceFilter
    action_roles = {"create": Role.OPERATOR, "expire": Role.OPERATOR}

    def get_queryset(self):  # noqa: ANN201
        return permissions.scoped(super().get_queryset(), self.request.user)

    @property
    def actor(self) -> core.Actor:
        return core.Actor.from_request(self.request, ActorChannel.API)

    def create(self, request: Request, *args, **kwargs) -> Response:  # noqa: ANN002, ANN003
        incoming = self.get_serializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        if not core.has_role(request.user, data["team"], Role.OPERATOR):
            raise PermissionDenied(f"Adding a silence needs the operator role in team {data['team']}.")
        silence = alerts.create_silence(data["team"], data["matchers"], data["ends_at"], self.actor,
                                        comment=data.get("comment", ""), starts_at=data.get("starts_at"))
        return Response(self.get_serializer(silence).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=serializers.SilenceSerializer)
    @action(detail=True, methods=["post"])
    def expire(self, request: Request, pk: str | None = None) -> Response:
        """End a silence now; its alerts notify again from the next evaluation. Ending it twice changes nothing."""
        silence = self.get_object()
        alerts.expire_silence(silence, self.actor)
        return Response(self.get_serializer(self.get_queryset().get(pk=silence.pk)).data)
