"""Web views: Slack's interaction endpoint, the channels page, a user's Slack link, and the alerts list."""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from controlplane import permissions, services as core
from controlplane.choices import Channel as ActorChannel, Role
from incidents import services, slack
from incidents.forms import ChannelForm, SlackLinkForm
from incidents.choices import ACTIVE_ALERT_STATES, AlertState
from incidents.models import Alert, Channel, Notification, Silence, SlackIdentity


@csrf_exempt
@require_POST
def slack_interactions(request: HttpRequest) -> HttpResponse:
    """Slack's button clicks. Answers at once (Slack waits 3 s); replies and edits follow from Celery."""
    if not settings.SLACK_ENABLED:
        return HttpResponse("Slack is not enabled here.", status=404, content_type="text/plain")
    problem = slack.signature_problem(
        request.body, request.headers.get("X-Slack-Request-Timestamp"), request.headers.get("X-Slack-Signature"),
        timezone.now(),
    )
    if problem:
        return HttpResponse(f"Refused: {problem}.", status=401, content_type="text/plain")
    click = slack.parse_click(request.POST.get("payload", ""))
    if click is not None:
        slack.handle_click(click, request_id=getattr(request, "request_id", ""))
    return HttpResponse(status=200)


def _visible_channels(request: HttpRequest):  # noqa: ANN202
    return permissions.scoped(Channel.objects.select_related("team"), request.user)


@login_required
def channels(request: HttpRequest) -> HttpResponse:
    """Each channel with its state, why it is off, and its latest deliveries."""
    visible = list(_visible_channels(request))
    outbox = Notification.objects.filter(channel__in=visible).select_related("channel", "proposal__pool")[:50]
    rows = [{"channel": channel, "can_admin": core.has_role(request.user, channel.team, Role.ADMIN)} for channel in visible]
    return render(request, "incidents/channels.html", {"rows": rows, "outbox": outbox,
                                                       "slack_enabled": settings.SLACK_ENABLED,
                                                       "webhooks_enabled": settings.WEBHOOKS_ENABLED})


@login_required
def channel_create(request: HttpRequest) -> HttpResponse:
    form = ChannelForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            services.create_channel(data["team"], data["name"], data["kind"], form.raw_settings(),
                                    core.Actor.from_request(request, ActorChannel.WEB))
        except services.NotificationError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("incidents:channels")
    return render(request, "incidents/channel_form.html", {"form": form})


@login_required
@require_POST
def channel_enable(request: HttpRequest, pk: int) -> HttpResponse:
    channel = get_object_or_404(_visible_channels(request), pk=pk)
    if not core.has_role(request.user, channel.team, Role.ADMIN):
        raise PermissionDenied("Switching a channel back on needs the admin role in its team.")
    services.enable_channel(channel, core.Actor.from_request(request, ActorChannel.WEB))
    return redirect("incidents:channels")


@login_required
def user_settings(request: HttpRequest) -> HttpResponse:
    """The user's own settings: which Slack user they are, so their clicks in Slack count as theirs."""
    actor = core.Actor.from_request(request, ActorChannel.WEB)
    form = SlackLinkForm(request.POST or None)
    if request.method == "POST" and request.POST.get("unlink"):
        services.unlink_slack_user(request.user, actor)
        return redirect("incidents:user-settings")
    if request.method == "POST" and form.is_valid():
        try:
            services.link_slack_user(request.user, form.cleaned_data["slack_user_id"], actor)
        except services.NotificationError as exc:
            form.add_error("slack_user_id", str(exc))
        else:
            return redirect("incidents:user-settings")
    identity = SlackIdentity.objects.filter(user=request.user).first()
    return render(request, "incidents/user_settings.html", {"form": form, "identity": identity})


@login_required
def alerts(request: HttpRequest) -> HttpResponse:
    """Active alerts grouped per pool (the loop's heartbeat per cluster), then the latest resolved ones."""
    visible = permissions.scoped(Alert.objects.select_related("pool", "cluster", "silenced_by", "inhibited_by"),
                                 request.user)
    active = list(visible.filter(state__in=ACTIVE_ALERT_STATES).order_by("cluster__name", "pool__name", "tier", "rule"))
    groups: dict[str, list[Alert]] = {}
    for alert in active:
        groups.setdefault(str(alert.pool) if alert.pool_id else f"{alert.cluster.name} (control loop)", []).append(alert)
    recent = visible.filter(state=AlertState.RESOLVED).order_by("-resolved_at")[:30]
    silences = permissions.scoped(Silence.objects.select_related("team", "created_by"), request.user) \
        .filter(ends_at__gt=timezone.now())
    return render(request, "incidents/alerts.html", {"groups": groups, "recent": recent, "silences": silences})
