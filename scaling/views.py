"""Web UI for proposals: the approvals inbox (pending and history), its live cards, bulk decisions,
the pool page's decisions list and its shift actions; and warm-pool reports. Each live part is one
fragment with two entry points: the page includes it, and the same view returns it alone for htmx's
polling."""
from __future__ import annotations

import json
from collections.abc import Callable

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlplane import permissions, services as core
from controlplane.charts import Series, cost_latency_curve, line_chart, worst_day_chart
from controlplane.choices import Channel, Role
from controlplane.errors import ServiceError
from controlplane.models import Pool
from scaling import explain, fallbacks, report_service, reports, services, traffic
from scaling.choices import ACTIVE_STATES, REPORT_ACTIVE_STATES, PeakBasis, ProposalKind, ProposalState, ReportState
from scaling.models import Proposal, TrafficShift, WarmPoolReport

HISTORY_ROWS = 50
POOL_DECISIONS = 20
POLICY_WHO = "policy"  # the `who` filter's name for decisions made by policy


def visible_proposals(request: HttpRequest) -> QuerySet[Proposal]:
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


def _card_context(request: HttpRequest, proposal: Proposal, selectable: bool = False) -> dict:
    return {
        "proposal": proposal,
        "sentence": explain.sentence(explain.facts_of(proposal)),
        "why_a_person": explain.why_for(proposal) if proposal.state == ProposalState.PENDING else "",
        "chart": evidence_chart(proposal),
        "can_decide": proposal.state == ProposalState.PENDING
        and core.may_act_in(request.user, proposal.pool.team, proposal.pool.cluster, Role.OPERATOR),
        "live": proposal.state in ACTIVE_STATES,
        "selectable": selectable,
    }


# --- the inbox: pending ---------------------------------------------------------------------------


def _pending_context(request: HttpRequest, outcomes: list[services.BulkOutcome] | None = None) -> dict:
    proposals = list(visible_proposals(request).filter(state=ProposalState.PENDING)
                     .prefetch_related("pool__slos").order_by("-created_at", "-id"))
    cards = [_card_context(request, proposal, selectable=True) for proposal in proposals]
    return {"cards": cards, "known": ",".join(str(p.pk) for p in proposals),
            "any_selectable": any(card["can_decide"] for card in cards), "outcomes": outcomes or []}


@login_required
@require_GET
def pending(request: HttpRequest) -> HttpResponse:
    """The pending list alone, for polling. Unchanged since the caller's `known` ids: 204 (htmx keeps
    the page as it is, so a half-typed comment or a ticked box survives); changed: the new list."""
    pending_ids = visible_proposals(request).filter(state=ProposalState.PENDING).order_by("-created_at", "-id") \
        .values_list("pk", flat=True)
    if request.GET.get("known") == ",".join(str(pk) for pk in pending_ids):  # one query, no cards built
        return HttpResponse(status=204)
    return render(request, "scaling/_pending.html", _pending_context(request))


class ProposalIdsField(forms.TypedMultipleChoiceField):
    """Any positive id is a choice: the service answers "not found" for what the user cannot see."""

    def valid_value(self, value: object) -> bool:
        return str(value).isdigit() and 0 < int(str(value)) < 2**31


class CommentForm(forms.Form):
    """A decision's comment (Django's CharField also refuses NUL characters, which PostgreSQL cannot store)."""

    comment = forms.CharField(required=False, max_length=2000)


def form_errors(form: forms.Form) -> str:
    return "; ".join(f"{field}: {' '.join(messages)}" for field, messages in form.errors.items())


class BulkDecisionForm(CommentForm):
    ids = ProposalIdsField(coerce=int, error_messages={"required": "Select at least one proposal."})
    verdict = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])

    def clean_ids(self) -> list[int]:
        ids = self.cleaned_data["ids"]
        if len(ids) > services.BULK_MAX:
            raise forms.ValidationError(f"At most {services.BULK_MAX} proposals at once.")
        return ids


@login_required
@require_POST
def bulk_decide(request: HttpRequest) -> HttpResponse:
    """Approve or reject the ticked proposals; answers the pending list with each one's outcome."""
    form = BulkDecisionForm(request.POST)
    if not form.is_valid():
        return render(request, "scaling/_pending.html", _pending_context(request) | {"error": form_errors(form)}, status=400)
    outcomes = services.decide_many(form.cleaned_data["ids"], form.cleaned_data["verdict"],
                                    core.Actor.from_request(request, Channel.WEB), form.cleaned_data["comment"])
    return render(request, "scaling/_pending.html", _pending_context(request, outcomes))


# --- the inbox: history ---------------------------------------------------------------------------


class HistoryFilter(forms.Form):
    pool = forms.ModelChoiceField(queryset=Pool.objects.none(), required=False, empty_label="any pool")
    kind = forms.ChoiceField(choices=[("", "any kind"), *ProposalKind.choices], required=False)
    state = forms.ChoiceField(choices=[("", "any state"), *ProposalState.choices], required=False)
    who = forms.CharField(required=False, max_length=150,
                          help_text=f"who asked or decided (a user name, or '{POLICY_WHO}')")

    def __init__(self, request: HttpRequest, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.fields["pool"].queryset = permissions.scoped(Pool.objects.select_related("cluster"), request.user)

    def apply(self, proposals: QuerySet[Proposal]) -> QuerySet[Proposal]:
        data = self.cleaned_data
        if data.get("pool"):
            proposals = proposals.filter(pool=data["pool"])
        if data.get("kind"):
            proposals = proposals.filter(kind=data["kind"])
        if data.get("state"):
            proposals = proposals.filter(state=data["state"])
        if who := data.get("who", "").strip():
            proposals = proposals.filter(decided_channel=Channel.AUTO) if who == POLICY_WHO else proposals.filter(
                Q(requested_by__username__iexact=who) | Q(decided_by__username__iexact=who))
        return proposals


def _history_context(request: HttpRequest) -> tuple[dict, int]:
    form = HistoryFilter(request, request.GET or None)
    history = visible_proposals(request).exclude(state=ProposalState.PENDING).order_by("-created_at")
    status = 200
    if form.is_bound and not form.is_valid():
        history, status = history.none(), 400
    elif form.is_bound:
        history = form.apply(history)
    return {"filter": form, "history": history[:HISTORY_ROWS], "query": request.GET.urlencode()}, status


@login_required
@require_GET
def history(request: HttpRequest) -> HttpResponse:
    """The decided proposals, filtered; polled with the filter's current values."""
    context, status = _history_context(request)
    return render(request, "scaling/_history.html", context, status=status)


@login_required
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    """Pending proposals (live, with bulk decisions), then the history with its filters."""
    history_context, status = _history_context(request)
    return render(request, "scaling/inbox.html", _pending_context(request) | history_context, status=status)


# --- one card -------------------------------------------------------------------------------------


@login_required
def card(request: HttpRequest, pk: int) -> HttpResponse:
    """The card alone for htmx; a page around it for a link followed (from the history or the audit log)."""
    proposal = get_object_or_404(visible_proposals(request), pk=pk)
    template = "scaling/_proposal_card.html" if request.htmx else "scaling/proposal.html"
    return render(request, template, _card_context(request, proposal))


def _act(request: HttpRequest, action: Callable[[core.Actor, str], object], refusals: type[ServiceError]) -> tuple[str, int]:
    """A person's action from a page, with the form's comment: the sentence to show and the status to answer with
    ("" and 200 when it was done; a 400 for the comment; the service's refusal as it is)."""
    form = CommentForm(request.POST)
    if not form.is_valid():
        return form_errors(form), 400
    try:
        action(core.Actor.from_request(request, Channel.WEB), form.cleaned_data["comment"])
    except refusals as exc:
        return str(exc), exc.status_code
    return "", 200


@login_required
@require_POST
def decide(request: HttpRequest, pk: int, verdict: str) -> HttpResponse:
    """One decision. Answers the card, or the pool page's decisions list when that is what htmx swaps."""
    proposal = get_object_or_404(visible_proposals(request), pk=pk)
    decide_with = services.approve if verdict == "approve" else services.reject
    # 403 not allowed, 409 already decided
    error, status = _act(request, lambda actor, comment: decide_with(proposal.pk, actor, comment), services.ProposalError)
    if request.htmx and request.htmx.target == DECISIONS_ID:
        context = decisions_context(request, proposal.pool) | {"error": error}
        return render(request, "scaling/_decisions.html", context, status=status)
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
    # 403 not allowed, 409 not in a phase that allows it
    error, status = _act(request, lambda actor, comment: SHIFT_ACTIONS[verb](shift.pk, actor, comment), traffic.ShiftError)
    return render(request, "scaling/_shift_card.html", {"shift": shifts.get(pk=pk), "error": error}, status=status)


FALLBACK_ACTIONS = {"restore": fallbacks.restore, "approve": fallbacks.approve}


@login_required
@require_POST
def fallback_act(request: HttpRequest, pk: int, verb: str) -> HttpResponse:
    """Restore the pool's fallback (or reject its waiting entry), or approve the entry, from the pool page; answers
    the fallback's card. The same services as the API's `fallbacks/restore/` and `fallbacks/approve/`."""
    pool = get_object_or_404(permissions.scoped(Pool.objects.select_related("cluster", "team", "fallback_pool"),
                                                request.user), pk=pk)
    # The fallbacks' errors are the shifts': 403 not allowed, 409 nothing open or waiting.
    error, status = _act(request, lambda actor, comment: FALLBACK_ACTIONS[verb](pool, actor, comment), traffic.ShiftError)
    return render(request, "scaling/_fallback_card.html", {"pool": pool, "error": error}, status=status)


# --- the pool page's decisions ----------------------------------------------------------------------

DECISIONS_ID = "pool-decisions"


def decisions_context(request: HttpRequest, pool: Pool) -> dict:
    """The pool's latest decisions, each pending one with its buttons for those who may decide."""
    proposals = pool.proposals.select_related("requested_by", "decided_by")[:POOL_DECISIONS]
    return {"pool": pool, "proposals": proposals,
            "can_decide": core.may_act_in(request.user, pool.team, pool.cluster, Role.OPERATOR)}


@login_required
@require_GET
def pool_decisions(request: HttpRequest, pk: int) -> HttpResponse:
    pool = get_object_or_404(permissions.scoped(Pool.objects.select_related("cluster", "team"), request.user), pk=pk)
    return render(request, "scaling/_decisions.html", decisions_context(request, pool))


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


def _days_from(text: str) -> float:
    """The form's days (blank: the default); a word is refused naming the field, as the API does."""
    try:
        return float(text) if text.strip() else reports.DEFAULT_DAYS
    except ValueError:
        raise ValueError(f"days: {text!r} is not a number") from None


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
            days = _days_from(request.POST.get("days", ""))
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
