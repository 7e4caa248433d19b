"""Web views: Slack's interaction endpoint, the channels page, a user's Slack link, the alerts list, and the
incident pages (list, live view, actions, postmortem download)."""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from controlplane import permissions, services as core
from controlplane.choices import Channel as ActorChannel, Role
from incidents import incidents, live, playbooks, postmortem, services, slack, timeline
from incidents.forms import ChannelForm, PlaybookForm, SlackLinkForm
from incidents.choices import ACTIVE_ALERT_STATES, ACTIVE_INCIDENT_STATES, AlertState, IncidentState
from incidents.models import Alert, Channel, Incident, Notification, Playbook, PlaybookRun, Silence, SlackIdentity
from scaling import report_service
from scaling.choices import REPORT_ACTIVE_STATES, ProposalState


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
                                                       "can_create": core.holds_role_somewhere(request.user, Role.ADMIN),
                                                       "slack_enabled": settings.SLACK_ENABLED,
                                                       "webhooks_enabled": settings.WEBHOOKS_ENABLED})


@login_required
def channel_create(request: HttpRequest) -> HttpResponse:
    form = ChannelForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        raw = form.raw_settings()
        try:
            channel = services.create_channel(data["team"], data["name"], data["kind"], raw,
                                              core.Actor.from_request(request, ActorChannel.WEB))
        except services.NotificationError as exc:
            form.add_error("name" if isinstance(exc, services.ChannelNameTaken) else None, str(exc))
        else:
            if services.generates_secret(data["kind"], raw):  # shown once: the receiver needs it to verify
                return render(request, "incidents/channel_created.html", {"channel": channel,
                                                                          "secret": channel.settings["secret"]})
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



# --- incidents -------------------------------------------------------------------------------------


def _visible_incidents(request: HttpRequest):  # noqa: ANN202
    queryset = Incident.objects.select_related("team", "cluster", "pool", "commander").prefetch_related("pool__slos")
    return permissions.scoped(queryset, request.user)


@login_required
def incident_list(request: HttpRequest) -> HttpResponse:
    """Active incidents first (most severe, then newest), then the latest resolved ones."""
    visible = _visible_incidents(request)
    active = visible.filter(state__in=ACTIVE_INCIDENT_STATES).order_by("severity", "-opened_at")
    recent = visible.filter(state=IncidentState.RESOLVED).order_by("-resolved_at")[:30]
    return render(request, "incidents/incident_list.html", {"active": active, "recent": recent, "now": timezone.now()})


def _live_context(request: HttpRequest, incident: Incident, error: str = "") -> dict:
    now = timezone.now()
    entries = timeline.timeline(incident, now)
    return {
        "incident": incident, "live": live.live_view(incident, entries, now), "entries": entries[::-1], "now": now,
        "can_act": core.may_act_in(request.user, incident.team, incident.cluster, Role.OPERATOR), "error": error,
    }


@login_required
def incident_detail(request: HttpRequest, pk: int) -> HttpResponse:
    incident = get_object_or_404(_visible_incidents(request), pk=pk)
    context = (_live_context(request, incident) | _approvals_context(request, incident)
               | _playbooks_context(request, incident) | _what_if_context(request, incident))
    return render(request, "incidents/incident_detail.html", context)


@login_required
def incident_live(request: HttpRequest, pk: int) -> HttpResponse:
    """The part of the incident page that htmx refreshes: header, verdict, charts, timeline."""
    incident = get_object_or_404(_visible_incidents(request), pk=pk)
    return render(request, "incidents/_incident_live.html", _live_context(request, incident))


@login_required
def incident_approvals(request: HttpRequest, pk: int) -> HttpResponse:
    """The pool's proposals waiting for a person, with the inbox's approve and reject buttons."""
    incident = get_object_or_404(_visible_incidents(request), pk=pk)
    return render(request, "incidents/_incident_approvals.html", _approvals_context(request, incident))


def _approvals_context(request: HttpRequest, incident: Incident) -> dict:
    from scaling.views import _card_context, visible_proposals  # the inbox's cards, as the inbox shows them

    pending = visible_proposals(request).filter(pool_id=incident.pool_id, state=ProposalState.PENDING) \
        .order_by("created_at") if incident.pool_id else []
    return {"incident": incident, "cards": [_card_context(request, proposal) for proposal in pending]}


def _answer(request: HttpRequest, incident: Incident, error: str = "", status: int = 200,
            reset_note: bool = False) -> HttpResponse:
    """htmx gets the refreshed fragment (errors shown in it); a plain form post goes back to the page."""
    incident.refresh_from_db()
    if request.htmx:
        context = _live_context(request, incident, error) | {"reset_note": reset_note}
        return render(request, "incidents/_incident_live.html", context)
    if error:
        return HttpResponse(error, status=status, content_type="text/plain")
    return redirect("incidents:incident-view", pk=incident.pk)


@login_required
@require_POST
def incident_act(request: HttpRequest, pk: int, verb: str) -> HttpResponse:
    """Acknowledge, mitigate or resolve from the browser."""
    incident = get_object_or_404(_visible_incidents(request), pk=pk)
    move = {"acknowledge": incidents.acknowledge, "mitigate": incidents.mitigate, "resolve": incidents.resolve}[verb]
    try:
        move(incident.pk, core.Actor.from_request(request, ActorChannel.WEB), request.POST.get("text", ""))
    except (incidents.IncidentError, core.AccessDenied) as exc:
        return _answer(request, incident, str(exc), exc.status_code)
    return _answer(request, incident)


@login_required
@require_POST
def incident_note(request: HttpRequest, pk: int) -> HttpResponse:
    incident = get_object_or_404(_visible_incidents(request), pk=pk)
    try:
        incidents.add_note(incident.pk, core.Actor.from_request(request, ActorChannel.WEB), request.POST.get("text", ""),
                           follow_up=bool(request.POST.get("follow_up")))
    except (incidents.IncidentError, core.AccessDenied) as exc:
        return _answer(request, incident, str(exc), exc.status_code)
    return _answer(request, incident, reset_note=True)


@login_required
def incident_postmortem(request: HttpRequest, pk: int) -> HttpResponse:
    """The postmortem as a Markdown download."""
    incident = get_object_or_404(_visible_incidents(request), pk=pk)
    response = HttpResponse(postmortem.render(incident), content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="incident-{incident.pk}-postmortem.md"'
    return response


# --- what if: the incident's window replayed at other warm-pool settings ----------------------------


def _what_if_context(request: HttpRequest, incident: Incident, error: str = "") -> dict:
    report = incident.what_if
    return {"incident": incident, "error": error,
            "what_if_live": report is not None and report.state in REPORT_ACTIVE_STATES,
            "can_act": core.may_act_in(request.user, incident.team, incident.cluster, Role.OPERATOR)}


@login_required
def incident_what_if(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the what-if section (polled while its replay runs); POST: replay the window again."""
    incident = get_object_or_404(_visible_incidents(request).select_related("what_if"), pk=pk)
    if request.method == "POST":
        try:
            if not core.may_act_in(request.user, incident.team, incident.cluster, Role.OPERATOR):
                raise core.AccessDenied(f"Replays need the operator role in team {incident.team}.")
            report_service.request_what_if(incident, core.Actor.from_request(request, ActorChannel.WEB))
        except report_service.ReportRequestError as exc:
            return _what_if_answer(request, incident, str(exc), 400)
        except core.AccessDenied as exc:
            return _what_if_answer(request, incident, str(exc), exc.status_code)
        incident = get_object_or_404(_visible_incidents(request).select_related("what_if"), pk=pk)
        return _what_if_answer(request, incident)
    return render(request, "incidents/_incident_what_if.html", _what_if_context(request, incident))


def _what_if_answer(request: HttpRequest, incident: Incident, error: str = "", status: int = 200) -> HttpResponse:
    if request.htmx:
        return render(request, "incidents/_incident_what_if.html", _what_if_context(request, incident, error),
                      status=status if error else 200)
    if error:
        return HttpResponse(error, status=status, content_type="text/plain")
    return redirect(reverse("incidents:incident-view", args=[incident.pk]) + "#what-if")


# --- playbooks in the incident page ----------------------------------------------------------------


def _playbooks_context(request: HttpRequest, incident: Incident, error: str = "") -> dict:
    runs = list(incident.playbook_runs.all())
    for run in runs:
        playbooks.refresh(run)
    running = {run.playbook_id for run in runs}
    return {
        "incident": incident, "error": error,
        "runs": PlaybookRun.objects.filter(incident=incident).prefetch_related("steps", "steps__proposal"),
        "offered": [playbook for playbook in playbooks.offered_for(incident) if playbook.pk not in running],
        "can_act": core.may_act_in(request.user, incident.team, incident.cluster, Role.OPERATOR),
        "is_drill": incident.is_drill,
    }


def _playbooks_answer(request: HttpRequest, incident: Incident, error: str = "", status: int = 200) -> HttpResponse:
    if request.htmx:
        return render(request, "incidents/_incident_playbooks.html", _playbooks_context(request, incident, error),
                      status=status if error else 200)
    if error:
        return HttpResponse(error, status=status, content_type="text/plain")
    return redirect(reverse("incidents:incident-view", args=[incident.pk]) + "#playbooks")


@login_required
def incident_playbooks(request: HttpRequest, pk: int) -> HttpResponse:
    """The playbook checklist: runs with each step's outcome, and the playbooks this incident offers."""
    incident = get_object_or_404(_visible_incidents(request), pk=pk)
    return render(request, "incidents/_incident_playbooks.html", _playbooks_context(request, incident))


@login_required
@require_POST
def playbook_start(request: HttpRequest, pk: int, playbook_pk: int) -> HttpResponse:
    incident = get_object_or_404(_visible_incidents(request), pk=pk)
    playbook = get_object_or_404(permissions.scoped(Playbook.objects.all(), request.user), pk=playbook_pk)
    try:
        playbooks.start_run(incident, playbook, core.Actor.from_request(request, ActorChannel.WEB))
    except playbooks.PlaybookError as exc:
        return _playbooks_answer(request, incident, str(exc), exc.status_code)
    return _playbooks_answer(request, incident)


@login_required
@require_POST
def playbook_step(request: HttpRequest, pk: int, run_pk: int, position: int, verb: str) -> HttpResponse:
    """Complete, skip or run one step of a run in this incident."""
    incident = get_object_or_404(_visible_incidents(request), pk=pk)
    run = get_object_or_404(PlaybookRun, pk=run_pk, incident=incident)
    actor = core.Actor.from_request(request, ActorChannel.WEB)
    try:
        if verb == "skip":
            playbooks.skip(run.pk, position, actor, request.POST.get("reason", ""))
        else:
            {"complete": playbooks.complete, "run": playbooks.run_step}[verb](run.pk, position, actor)
    except (playbooks.PlaybookError, core.AccessDenied) as exc:
        return _playbooks_answer(request, incident, str(exc), exc.status_code)
    return _playbooks_answer(request, incident)


# --- the playbook pages ----------------------------------------------------------------------------


@login_required
def playbook_list(request: HttpRequest) -> HttpResponse:
    """Every playbook the user can see; edit links only in teams where they may change playbooks."""
    visible = permissions.scoped(Playbook.objects.select_related("team").prefetch_related("steps"), request.user)
    operator_teams = core.team_ids_where(request.user, Role.OPERATOR)
    rows = [{"playbook": playbook, "can_edit": operator_teams is None or playbook.team_id in operator_teams}
            for playbook in visible]
    return render(request, "incidents/playbooks.html", {
        "rows": rows, "can_create": operator_teams is None or bool(operator_teams), "kinds": playbooks.step_kinds()})


def _forbidden(reason: str) -> HttpResponse:
    """A 403 that says which role is missing (Django's own 403 page names nothing)."""
    return HttpResponse(reason, status=403, content_type="text/plain; charset=utf-8")


@login_required
def playbook_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    """Create or edit a playbook on one form; the service validates every step and names what is wrong."""
    playbook = get_object_or_404(permissions.scoped(Playbook.objects.select_related("team"), request.user), pk=pk) \
        if pk else None
    # Refused up front: the form's team list holds only the user's operator teams, so a viewer would
    # otherwise meet an unrelated "Select a valid choice" on save.
    if playbook is not None and not core.has_role(request.user, playbook.team, Role.OPERATOR):
        return _forbidden(f"Changing a playbook needs the operator role in team {playbook.team.name}.")
    if playbook is None and not core.holds_role_somewhere(request.user, Role.OPERATOR):
        return _forbidden("New playbooks need the operator role in a team.")
    form = PlaybookForm(request.POST or None, user=request.user,
                        initial=PlaybookForm.initial_for(playbook) if playbook else None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        steps = [playbooks.StepSpec(title, kind, params) for kind, title, params in data["steps"]]
        try:
            saved = playbooks.save(core.Actor.from_request(request, ActorChannel.WEB), data["team"], data["name"],
                                   description=data["description"], alert_rules=data["alert_rules"],
                                   severities=data["severities"], steps=steps, playbook=playbook)
        except (playbooks.PlaybookError, core.AccessDenied) as exc:
            form.add_error(None, f"{getattr(exc, 'field', '')}: {exc}".lstrip(": "))
        else:
            return redirect(reverse("incidents:playbooks") + f"#playbook-{saved.pk}")
    return render(request, "incidents/playbook_form.html", {"form": form, "playbook": playbook,
                                                             "kinds": playbooks.step_kinds()})
