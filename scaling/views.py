"""Web UI for proposals (the approvals inbox and its live cards) and the pool page's shift actions."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Case, IntegerField, Value, When
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST

from controlplane import permissions, services as core
from controlplane.charts import Series, line_chart
from controlplane.choices import Channel, Role
from scaling import services, traffic
from scaling.choices import ACTIVE_STATES, ProposalState
from scaling.models import Proposal, TrafficShift


def visible_proposals(request: HttpRequest):  # noqa: ANN201
    queryset = Proposal.objects.select_related("pool__cluster", "pool__team", "requested_by", "decided_by")
    return permissions.scoped(queryset, request.user)


def evidence_chart(proposal: Proposal):  # noqa: ANN201
    """Forecast against capacity, from the series the planner stored with the proposal."""
    evidence = proposal.evidence or {}
    series = [
        Series("expected req/s", evidence.get("forecast_expected", []), "expected"),
        Series("p90 req/s", evidence.get("forecast_p90", []), "upper"),
        Series("capacity req/s", evidence.get("capacity", []), "capacity"),
    ]
    if not any(line.values for line in series):
        return None
    return line_chart([line for line in series if line.values], y_label=evidence.get("window", ""))


def _card_context(request: HttpRequest, proposal: Proposal) -> dict:
    return {
        "proposal": proposal,
        "chart": evidence_chart(proposal),
        "can_decide": proposal.state == ProposalState.PENDING
        and core.may_act_in(request.user, proposal.pool.team, proposal.pool.cluster, Role.OPERATOR),
        "live": proposal.state in ACTIVE_STATES,
    }


@login_required
def inbox(request: HttpRequest) -> HttpResponse:
    """Pending proposals first, then the rest, newest first."""
    pending_first = Case(When(state=ProposalState.PENDING, then=Value(0)), default=Value(1), output_field=IntegerField())
    proposals = visible_proposals(request).order_by(pending_first, "-created_at")[:50]
    cards = [_card_context(request, proposal) for proposal in proposals]
    return render(request, "scaling/inbox.html", {"cards": cards})


@login_required
def card(request: HttpRequest, pk: int) -> HttpResponse:
    proposal = get_object_or_404(visible_proposals(request), pk=pk)
    return render(request, "scaling/_proposal_card.html", _card_context(request, proposal))


@login_required
@require_POST
def decide(request: HttpRequest, pk: int, verdict: str) -> HttpResponse:
    proposal = get_object_or_404(visible_proposals(request), pk=pk)
    decide_with = services.approve if verdict == "approve" else services.reject
    error, status = "", 200
    try:
        decide_with(proposal.pk, core.Actor.from_request(request, Channel.WEB), request.POST.get("comment", "")[:2000])
    except services.ProposalError as exc:
        error, status = str(exc), exc.status_code  # 403 not allowed, 409 already decided
    proposal = visible_proposals(request).get(pk=pk)
    context = _card_context(request, proposal) | {"error": error}
    return render(request, "scaling/_proposal_card.html", context, status=status)


SHIFT_ACTIONS = {"pause": traffic.pause, "resume": traffic.resume, "rollback": traffic.rollback,
                 "approve": traffic.approve}


@login_required
@require_POST
def shift_act(request: HttpRequest, pk: int, verb: str) -> HttpResponse:
    """Pause, resume, roll back or approve a gated step from the pool page; answers the shift's card."""
    shifts = permissions.scoped(TrafficShift.objects.select_related("from_pool__team", "to_pool__team"), request.user)
    shift = get_object_or_404(shifts, pk=pk)
    error, status = "", 200
    try:
        SHIFT_ACTIONS[verb](shift.pk, core.Actor.from_request(request, Channel.WEB), request.POST.get("comment", "")[:2000])
    except traffic.ShiftError as exc:
        error, status = str(exc), exc.status_code  # 403 not allowed, 409 not in a phase that allows it
    return render(request, "scaling/_shift_card.html", {"shift": shifts.get(pk=pk), "error": error}, status=status)
