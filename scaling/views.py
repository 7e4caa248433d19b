"""Web UI for proposals (the approvals inbox and its live cards) and for warm-pool reports."""
from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Case, IntegerField, Value, When
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane import permissions, services as core
from controlplane.charts import Series, cost_latency_curve, line_chart, worst_day_chart
from controlplane.choices import Channel, Role
from controlplane.models import Pool
from scaling import report_service, reports, services
from scaling.choices import ACTIVE_STATES, REPORT_ACTIVE_STATES, PeakBasis, ProposalState, ReportState
from scaling.models import Proposal, WarmPoolReport


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


# ---------------------------------------------------------------------------- warm-pool reports


def _visible_reports(request: HttpRequest):  # noqa: ANN201
    return permissions.scoped(WarmPoolReport.objects.select_related("pool__cluster", "pool__team", "requested_by")
                              .defer("trace_data"), request.user)


def _report_context(report: WarmPoolReport) -> dict:
    result = report.result or {}
    context: dict = {"report": report, "live": report.state in REPORT_ACTIVE_STATES, "result": result}
    if report.state == ReportState.SUCCEEDED and result:
        context["curve"] = cost_latency_curve(result["rows"], result["slo"]["objective"])
        context["worst_day"] = worst_day_chart(result["worst_day"], result["slo"]["ttft_ms"])
    return context


@login_required
def pool_reports(request: HttpRequest, pk: int) -> HttpResponse:
    """A pool's warm-pool reports, newest first, and the form that asks for a new one."""
    pool = get_object_or_404(permissions.scoped(Pool.objects.select_related("cluster", "team"), request.user), pk=pk)
    can_run = core.has_role(request.user, pool.team, Role.OPERATOR)
    error, status = "", 200
    if request.method == "POST":
        if not can_run:
            raise PermissionDenied("Reports need the operator role in this pool's team.")
        try:
            sizes = reports.parse_sizes(request.POST.get("sizes", "") or "0,10,20,30,40,50,60")
            days = float(request.POST.get("days", "") or reports.DEFAULT_DAYS)
            report = report_service.request_report(
                pool, core.Actor.from_request(request, Channel.WEB), days=days, sizes_pct=sizes,
                peak_basis=request.POST.get("peak_basis", PeakBasis.FORECAST))
        except ValueError as exc:  # ReportRequestError, ReportInputError, a days that is no number
            error, status = str(exc), 400
        else:
            return redirect("warm-pool-report", pk=report.pk)
    listed = _visible_reports(request).filter(pool=pool)[:30]
    return render(request, "scaling/pool_reports.html", {
        "pool": pool, "reports": listed, "can_run": can_run, "error": error, "bases": PeakBasis.choices,
        "default_sizes": ",".join(f"{size:g}" for size in reports.DEFAULT_SIZES_PCT)}, status=status)


@login_required
def report_detail(request: HttpRequest, pk: int) -> HttpResponse:
    report = get_object_or_404(_visible_reports(request), pk=pk)
    return render(request, "scaling/report.html", _report_context(report))


@login_required
def report_body(request: HttpRequest, pk: int) -> HttpResponse:
    """The report's body alone: what the page polls while the report runs."""
    report = get_object_or_404(_visible_reports(request), pk=pk)
    return render(request, "scaling/_report_body.html", _report_context(report))


REPORT_FILES = {"curve.svg": "image/svg+xml", "worst-day.svg": "image/svg+xml", "csv": "text/csv",
                "json": "application/json"}


@login_required
def report_file(request: HttpRequest, pk: int, name: str) -> HttpResponse:
    """Downloads: the two charts as SVG, the rows as CSV, the whole report as JSON."""
    report = get_object_or_404(_visible_reports(request), pk=pk)
    if report.state != ReportState.SUCCEEDED or name not in REPORT_FILES:
        raise Http404("The report is not done, or there is no such file.")
    context = _report_context(report)
    body = {"curve.svg": lambda: str(context["curve"]), "worst-day.svg": lambda: str(context["worst_day"]),
            "csv": lambda: reports.rows_csv(report.result), "json": lambda: json.dumps(report.result, indent=1)}[name]()
    response = HttpResponse(body, content_type=REPORT_FILES[name])
    filename = f"warm-pool-report-{report.pk}" + (f"-{name}" if name.endswith(".svg") else f".{name}")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
