"""REST API for notification channels, their outbox (read-only), alerts (read-only), silences and
incidents (read, plus the acknowledge, mitigate, resolve and notes actions and the postmortem).
Scoped to the caller's teams."""
from __future__ import annotations

import django_filters
from django.utils import timezone
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane import permissions, services as core
from controlplane.api.filters import ApiFilterSet, TrueOrFalseFilter
from controlplane.api.views import ScopedViewMixin
from controlplane.choices import Role
from incidents import alerts, incidents, playbooks, postmortem, services
from incidents.api import serializers
from incidents.choices import ACTIVE_ALERT_STATES, ACTIVE_INCIDENT_STATES, RunStepState
from incidents.models import Alert, Channel, Incident, Notification, Playbook, PlaybookRun, Silence
from scaling import report_service
from scaling.api.serializers import WarmPoolReportSerializer


class ChannelFilter(ApiFilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    enabled = TrueOrFalseFilter()

    class Meta:
        model = Channel
        fields = ["team", "kind", "enabled"]


class NotificationFilter(ApiFilterSet):
    class Meta:
        model = Notification
        fields = ["channel", "proposal", "alert", "kind", "state"]


class ChannelViewSet(ScopedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                     mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Notification channels. Team admins add, switch back on and remove them; members read them."""

    queryset = Channel.objects.select_related("team")
    serializer_class = serializers.ChannelSerializer
    filterset_class = ChannelFilter
    action_roles = {"create": Role.ADMIN, "destroy": Role.ADMIN, "enable": Role.ADMIN}

    @extend_schema(request=serializers.ChannelSerializer, responses={201: serializers.CreatedChannelSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:  # noqa: ANN002, ANN003
        incoming = self.get_serializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        if not core.has_role(request.user, data["team"], Role.ADMIN):
            raise PermissionDenied(f"Adding a channel needs the admin role in team {data['team']}.")
        channel = services.create_channel(data["team"], data["name"], data["kind"], data["settings"], self.actor)
        body = self.get_serializer(channel).data
        if services.generates_secret(data["kind"], data["settings"]):
            body["generated_secret"] = channel.settings["secret"]
        return Response(body, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: Channel) -> None:
        services.delete_channel(instance, self.actor)

    @extend_schema(request=None, responses=serializers.ChannelSerializer)
    @action(detail=True, methods=["post"])
    def enable(self, request: Request, pk: str | None = None) -> Response:
        """Switch a channel back on after a permanent failure was fixed."""
        channel = self.get_object()
        services.enable_channel(channel, self.actor)
        return Response(self.get_serializer(self.get_queryset().get(pk=channel.pk)).data)


class NotificationViewSet(ScopedViewMixin, viewsets.ReadOnlyModelViewSet):
    """The outbox: every notification with its attempts, next attempt and last error."""

    queryset = Notification.objects.all()
    serializer_class = serializers.NotificationSerializer
    filterset_class = NotificationFilter


class AlertFilter(ApiFilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    active = TrueOrFalseFilter(method="filter_active", label="Pending or firing")

    class Meta:
        model = Alert
        fields = ["team", "cluster", "pool", "rule", "tier", "state", "fingerprint"]

    def filter_active(self, queryset, name: str, value: bool):  # noqa: ANN001, ANN201
        return queryset.filter(state__in=ACTIVE_ALERT_STATES) if value else queryset.exclude(state__in=ACTIVE_ALERT_STATES)


class AlertViewSet(ScopedViewMixin, viewsets.ReadOnlyModelViewSet):
    """Alerts as the rules raised them: state, numbers, and what holds them back (silence, warming scale-up)."""

    queryset = Alert.objects.select_related("team")
    serializer_class = serializers.AlertSerializer
    filterset_class = AlertFilter


class SilenceFilter(ApiFilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    active = TrueOrFalseFilter(method="filter_active", label="Not yet ended")

    class Meta:
        model = Silence
        fields = ["team"]

    def filter_active(self, queryset, name: str, value: bool):  # noqa: ANN001, ANN201
        now = timezone.now()
        return queryset.filter(ends_at__gt=now) if value else queryset.filter(ends_at__lte=now)


class SilenceViewSet(ScopedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                     viewsets.GenericViewSet):
    """Silences mute a team's matching alerts until they end. Operators of the team add and end them."""

    queryset = Silence.objects.select_related("team", "created_by", "expired_by")
    serializer_class = serializers.SilenceSerializer
    filterset_class = SilenceFilter
    action_roles = {"create": Role.OPERATOR, "expire": Role.OPERATOR}

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


class IncidentFilter(ApiFilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    active = TrueOrFalseFilter(method="filter_active", label="Open, acknowledged or mitigated")

    class Meta:
        model = Incident
        # `pool_name` also finds a deleted pool's incidents (their `pool` is null).
        fields = ["team", "cluster", "pool", "pool_name", "severity", "state", "commander"]

    def filter_active(self, queryset, name: str, value: bool):  # noqa: ANN001, ANN201
        return queryset.filter(state__in=ACTIVE_INCIDENT_STATES) if value else queryset.exclude(state__in=ACTIVE_INCIDENT_STATES)


ACTION_RESPONSES = {200: serializers.IncidentSerializer, 400: OpenApiResponse(description="Bad input, naming the field."),
                    403: OpenApiResponse(description="Not an operator of the incident's team."),
                    409: OpenApiResponse(description="The incident's state does not allow this move.")}


class IncidentViewSet(ScopedViewMixin, viewsets.ReadOnlyModelViewSet):
    """Incidents opened by P0/P1 alerts. Team members read them (the detail holds the timeline);
    operators acknowledge, mitigate, resolve and add notes."""

    queryset = Incident.objects.select_related("team", "commander").prefetch_related("alerts")
    serializer_class = serializers.IncidentSerializer
    filterset_class = IncidentFilter
    action_roles = {"acknowledge": Role.OPERATOR, "mitigate": Role.OPERATOR, "resolve": Role.OPERATOR,
                    "notes": Role.OPERATOR, "what_if": Role.OPERATOR}

    def get_serializer_class(self):  # noqa: ANN201
        return serializers.IncidentDetailSerializer if self.action == "retrieve" else serializers.IncidentSerializer

    def _move(self, move, request: Request) -> Response:  # noqa: ANN001
        incident = self.get_object()
        incoming = serializers.IncidentActionSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        move(incident.pk, self.actor, incoming.validated_data.get("text", ""))
        return Response(serializers.IncidentSerializer(self.get_queryset().get(pk=incident.pk)).data)

    @extend_schema(request=serializers.IncidentActionSerializer, responses=ACTION_RESPONSES)
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str | None = None) -> Response:
        """open → acknowledged; the caller becomes commander if there is none. Repeating your own is a no-op."""
        return self._move(incidents.acknowledge, request)

    @extend_schema(request=serializers.IncidentActionSerializer, responses=ACTION_RESPONSES)
    @action(detail=True, methods=["post"])
    def mitigate(self, request: Request, pk: str | None = None) -> Response:
        """open or acknowledged → mitigated: the impact has stopped."""
        return self._move(incidents.mitigate, request)

    @extend_schema(request=serializers.IncidentActionSerializer, responses=ACTION_RESPONSES)
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, pk: str | None = None) -> Response:
        """Any active state → resolved (final)."""
        return self._move(incidents.resolve, request)

    @extend_schema(request=serializers.IncidentNoteSerializer,
                   responses={201: serializers.IncidentEventSerializer, **{k: v for k, v in ACTION_RESPONSES.items() if k != 200}})
    @action(detail=True, methods=["post"])
    def notes(self, request: Request, pk: str | None = None) -> Response:
        """Add a note to the timeline (also after resolving); `follow_up` lists it in the postmortem."""
        incident = self.get_object()
        incoming = serializers.IncidentNoteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        event = incidents.add_note(incident.pk, self.actor, incoming.validated_data["text"],
                                   follow_up=incoming.validated_data["follow_up"])
        return Response(serializers.IncidentEventSerializer(event).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=serializers.IncidentWhatIfSerializer,
                   responses={200: WarmPoolReportSerializer, 201: WarmPoolReportSerializer,
                              **{k: v for k, v in ACTION_RESPONSES.items() if k != 200}})
    @action(detail=True, methods=["post"], url_path="what-if")
    def what_if(self, request: Request, pk: str | None = None) -> Response:
        """Replay the incident's window at other warm-pool settings (and with the fallback model): a
        warm-pool report, run by a worker; follow it at `/api/v1/reports/{id}/` (its `result.what_if`).
        `201` for a new replay, `200` with the one still running."""
        incident = self.get_object()
        incoming = serializers.IncidentWhatIfSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        before = incident.what_if_id
        try:
            report = report_service.request_what_if(
                incident, self.actor, sizes_pct=tuple(data.get("sizes_pct") or report_service.WHAT_IF_DEFAULT_SIZES_PCT),
                peak_basis=data["peak_basis"])
        except report_service.ReportRequestError as exc:
            raise ValidationError({exc.field: [str(exc)]}) from None
        # 200: the replay already running for this incident; 201: a new one.
        return Response(WarmPoolReportSerializer(report).data,
                        status=status.HTTP_200_OK if report.pk == before else status.HTTP_201_CREATED)

    @extend_schema(responses={(200, "text/markdown"): OpenApiResponse(description="The postmortem as Markdown.")})
    @action(detail=True, methods=["get"])
    def postmortem(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The postmortem: summary, impact in SLO minutes and requests, timeline, decisions, follow-ups."""
        incident = self.get_object()
        return HttpResponse(postmortem.render(incident), content_type="text/markdown; charset=utf-8")


class PlaybookFilter(ApiFilterSet):
    team = django_filters.CharFilter(field_name="team__slug")

    class Meta:
        model = Playbook
        fields = ["team", "name"]


def _step_specs(data: dict) -> list[playbooks.StepSpec]:
    return [playbooks.StepSpec(step.get("title", ""), step.get("kind", ""), step.get("params") or {})
            for step in data.get("steps", [])]


class PlaybookViewSet(ScopedViewMixin, viewsets.ModelViewSet):
    """Playbooks: ordered steps offered in incidents of their alert rules or severities. Team members read
    them; operators of the team write them. `kinds` lists the step kinds and which can be used now."""

    queryset = Playbook.objects.select_related("team").prefetch_related("steps")
    serializer_class = serializers.PlaybookSerializer
    filterset_class = PlaybookFilter
    action_roles = {"create": Role.OPERATOR, "update": Role.OPERATOR, "partial_update": Role.OPERATOR,
                    "destroy": Role.OPERATOR}
    http_method_names = ["get", "post", "put", "delete", "head", "options"]

    def _save(self, request: Request, playbook: Playbook | None) -> Playbook:
        incoming = self.get_serializer(playbook, data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        return playbooks.save(self.actor, data["team"], data["name"], description=data.get("description", ""),
                              alert_rules=data.get("alert_rules"), severities=data.get("severities"),
                              steps=_step_specs(data), playbook=playbook)

    def create(self, request: Request, *args, **kwargs) -> Response:  # noqa: ANN002, ANN003
        playbook = self._save(request, None)
        return Response(self.get_serializer(self.get_queryset().get(pk=playbook.pk)).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args, **kwargs) -> Response:  # noqa: ANN002, ANN003
        playbook = self._save(request, self.get_object())
        return Response(self.get_serializer(self.get_queryset().get(pk=playbook.pk)).data)

    def perform_destroy(self, instance: Playbook) -> None:
        playbooks.delete(self.actor, instance)

    @extend_schema(responses={200: OpenApiResponse(description="[{kind, label, available, unavailable_reason}]")})
    @action(detail=False, methods=["get"])
    def kinds(self, request: Request) -> Response:
        """The step kinds: the executable ones and those not yet available."""
        return Response(playbooks.step_kinds())


RUN_RESPONSES = {200: serializers.PlaybookRunSerializer, 400: OpenApiResponse(description="Bad input, naming the field."),
                 403: OpenApiResponse(description="Not an operator of the incident's team."),
                 409: OpenApiResponse(description="The step's state does not allow this.")}


class PlaybookRunViewSet(ScopedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Playbook runs inside incidents. POST starts one (again: the same run); `complete` ticks a checklist
    step, `skip` skips a step, `run` runs an action step through its service (idempotent)."""

    queryset = PlaybookRun.objects.select_related("incident__team", "started_by").prefetch_related("steps")
    serializer_class = serializers.PlaybookRunSerializer
    filterset_fields = ["incident", "playbook"]
    action_roles = {"create": Role.OPERATOR, "complete": Role.OPERATOR, "skip": Role.OPERATOR, "run": Role.OPERATOR}

    def _answer(self, run: PlaybookRun, code: int = status.HTTP_200_OK) -> Response:
        playbooks.refresh(run)
        return Response(self.get_serializer(self.get_queryset().get(pk=run.pk)).data, status=code)

    def retrieve(self, request: Request, *args, **kwargs) -> Response:  # noqa: ANN002, ANN003
        return self._answer(self.get_object())

    def list(self, request: Request, *args, **kwargs) -> Response:  # noqa: ANN002, ANN003
        # Reading is when waiting and running steps mirror their proposal or shift (as the detail does).
        live = self.filter_queryset(self.get_queryset()).filter(
            steps__state__in=[RunStepState.WAITING_APPROVAL, RunStepState.RUNNING]).values("pk")
        for run in PlaybookRun.objects.filter(pk__in=live):
            playbooks.refresh(run)
        return super().list(request, *args, **kwargs)

    @extend_schema(request=serializers.PlaybookRunStartSerializer, responses={201: serializers.PlaybookRunSerializer, **RUN_RESPONSES})
    def create(self, request: Request, *args, **kwargs) -> Response:  # noqa: ANN002, ANN003
        incoming = serializers.PlaybookRunStartSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        incident = permissions.scoped(Incident.objects.select_related("team", "cluster", "pool"), request.user) \
            .filter(pk=incoming.validated_data["incident"]).first()
        if incident is None:
            return Response({"incident": ["No such incident in your teams."]}, status=status.HTTP_400_BAD_REQUEST)
        playbook = permissions.scoped(Playbook.objects.all(), request.user).filter(pk=incoming.validated_data["playbook"]).first()
        if playbook is None:
            return Response({"playbook": ["No such playbook in your teams."]}, status=status.HTTP_400_BAD_REQUEST)
        run = playbooks.start_run(incident, playbook, self.actor)
        return self._answer(run, status.HTTP_201_CREATED)

    def _step(self, request: Request, verb) -> Response:  # noqa: ANN001
        run = self.get_object()
        incoming = serializers.PlaybookRunStepActionSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        position = incoming.validated_data["position"]
        if verb is playbooks.skip:
            verb(run.pk, position, self.actor, incoming.validated_data.get("reason", ""))
        else:
            verb(run.pk, position, self.actor)
        return self._answer(run)

    @extend_schema(request=serializers.PlaybookRunStepActionSerializer, responses=RUN_RESPONSES)
    @action(detail=True, methods=["post"])
    def complete(self, request: Request, pk: str | None = None) -> Response:
        """Tick a checklist step (ticking it again changes nothing)."""
        return self._step(request, playbooks.complete)

    @extend_schema(request=serializers.PlaybookRunStepActionSerializer, responses=RUN_RESPONSES)
    @action(detail=True, methods=["post"])
    def skip(self, request: Request, pk: str | None = None) -> Response:
        """Skip a pending or failed step, with the reason."""
        return self._step(request, playbooks.skip)

    @extend_schema(request=serializers.PlaybookRunStepActionSerializer, responses=RUN_RESPONSES)
    @action(detail=True, methods=["post"])
    def run(self, request: Request, pk: str | None = None) -> Response:
        """Run an action step through its service: a pre-scale proposes (and waits for approval), a shift
        starts, a message is queued. Running it again answers the object it made."""
        return self._step(request, playbooks.run_step)
