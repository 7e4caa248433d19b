"""REST API for notification channels and their outbox (read-only). Scoped to the caller's teams."""
from __future__ import annotations

import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane import permissions, services as core
from controlplane.choices import Channel as ActorChannel, Role
from incidents import services
from incidents.api import serializers
from incidents.models import Channel, Notification


class ChannelFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")

    class Meta:
        model = Channel
        fields = ["team", "kind", "enabled"]


class NotificationFilter(django_filters.FilterSet):
    class Meta:
        model = Notification
        fields = ["channel", "proposal", "kind", "state"]


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
