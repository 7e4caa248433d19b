"""Web UI: thin views over the scoped querysets and the audited save/delete services."""
from __future__ import annotations

import hmac
import logging

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied
from django.core.paginator import Paginator
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from controlplane import audit_view, forms, permissions, services
from controlplane import metrics as headroom_metrics
from controlplane.charts import Line, time_chart
from controlplane.choices import Channel, Role
from controlplane.errors import ServiceError
from controlplane.models import SLO, Cluster, Pool, ScheduleWindow

logger = logging.getLogger(__name__)

FORMS = {
    "cluster": (Cluster, forms.ClusterForm),
    "pool": (Pool, forms.PoolForm),
    "slo": (SLO, forms.SLOForm),
    "schedule": (ScheduleWindow, forms.ScheduleWindowForm),
}


class LoginView(auth_views.LoginView):
    """The login page; a throttled login answers 429 with the reason (see controlplane.login_throttle)."""

    authentication_form = forms.LoginForm

    def form_invalid(self, form: forms.LoginForm) -> HttpResponse:
        response = super().form_invalid(form)
        if form.has_error(NON_FIELD_ERRORS, "throttled"):
            response.status_code = 429
            response["Retry-After"] = str(settings.LOGIN_THROTTLE_WINDOW_S)
        return response


def _is_admin(request: HttpRequest) -> bool:
    try:  # the session lives in the database that may be down
        return bool(request.user.is_authenticated and (request.user.is_superuser or request.user.is_staff))
    except Exception:  # noqa: BLE001 - any failure: treat as anonymous
        return False


@require_GET
def livez(request: HttpRequest) -> JsonResponse:
    """Liveness: this process answers requests. It reads neither the database nor Redis on purpose: a restart
    cannot bring them back, and restarting every pod while PostgreSQL is down only adds a storm to the outage."""
    return JsonResponse({"status": "ok"})


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database answers, so this pod can serve. The error text (host names, users) goes to the
    log and to signed-in staff only; an outage is expected here, so one warning line, no traceback."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database failure means "not ready"
        logger.warning("healthz: the database is unreachable: %s: %s", type(exc).__name__, exc)
        answer = {"status": "error", "database": "unreachable"}
        if _is_admin(request):
            answer["detail"] = str(exc)
        return JsonResponse(answer, status=503)
    return JsonResponse({"status": "ok"})


@csrf_exempt  # nothing is there to protect; a POST should hear "not found", not "CSRF"
def api_not_found(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"detail": "Not found."}, status=404)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Headroom's own metrics (controlplane/metrics.py) for Prometheus: with `Authorization: Bearer
    <METRICS_TOKEN>`, or to signed-in staff. Anyone else gets a 401 (they describe the whole fleet)."""
    if not (_metrics_token_matches(request) or _is_admin(request)):
        response = HttpResponse("metrics need the bearer token (METRICS_TOKEN) or a staff login\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(headroom_metrics.exposition(), content_type=CONTENT_TYPE_LATEST)


def _metrics_token_matches(request: HttpRequest) -> bool:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    expected = settings.METRICS_TOKEN
    return bool(expected) and scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())


def _visible_pools(request: HttpRequest):  # noqa: ANN202
    pools = Pool.objects.select_related("cluster", "team", "status", "planner").prefetch_related("slos")
    return permissions.scoped(pools, request.user)


FLEET_PAGE_SIZE = 50  # pools a fleet page shows (and its htmx refresh re-renders every 15 s)
# The fleet never reads the planner's forecaster state (tens of KB a pool) nor what it last read.
FLEET_DEFERRED = ("planner__state", "planner__seasonal_forecast", "planner__last_signals")


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """Every pool the user can see, a page at a time. The table is a fragment that htmx refreshes in place."""
    pools = _visible_pools(request).defer(*FLEET_DEFERRED)
    # Pools Headroom has never read from their cluster are inventory only: listed apart, said plainly.
    read = Paginator(pools.filter(status__isnull=False), FLEET_PAGE_SIZE).get_page(request.GET.get("page"))
    inventory = Paginator(pools.filter(status__isnull=True), FLEET_PAGE_SIZE) \
        .get_page(request.GET.get("inventory_page"))
    context = {"pools": read, "inventory": inventory,
               "refresh_query": f"?page={read.number}&inventory_page={inventory.number}"}
    if request.htmx:
        return render(request, "controlplane/_fleet_table.html", context)
    context["can_create"] = services.holds_role_somewhere(request.user, Role.ADMIN)  # the pool form offers admin teams
    return render(request, "controlplane/fleet.html", context)


def _live_context(pool: Pool) -> dict:
    """What the pool page polls: replicas, the planner's latest answer, the last 30 minutes charted."""
    samples = list(pool.samples.order_by("-at")[:120])[::-1]
    planner = getattr(pool, "planner", None)
    # Effective capacity: the planner's per-replica capacity corrected by observed latency, else the profile's.
    per_replica = ((planner.last_decision or {}).get("capacity_per_replica_rps") if planner else None) \
        or pool.replica_capacity_rps
    capacity = [(s.at, s.ready_replicas * per_replica if s.ready_replicas is not None else None) for s in samples]
    tz = pool.cluster.tz
    chart = time_chart("Demand against effective capacity, last 30 min", "req/s", [
        Line("arriving requests", [(s.at, s.request_rate_rps) for s in samples], "blue"),
        Line("capacity of ready replicas", capacity, "green"),
    ], tz=tz, note=f"capacity = ready replicas × {per_replica:.2f} req/s (the planner's corrected capacity)") \
        if samples else None
    queue_chart = time_chart("Requests waiting in the queue", "req",
                             [Line("waiting requests", [(s.at, s.queue_depth) for s in samples], "orange")],
                             tz=tz, height=150) if samples else None
    return {"pool": pool, "status": getattr(pool, "status", None), "decision": planner.last_decision if planner else None,
            "latest": samples[-1] if samples else None, "chart": chart, "queue_chart": queue_chart}


@login_required
def pool_live(request: HttpRequest, pk: int) -> HttpResponse:
    pool = get_object_or_404(_visible_pools(request), pk=pk)
    return render(request, "controlplane/_pool_live.html", _live_context(pool))


POOL_AUDIT_ROWS = 20


def _pool_audit_rows(request: HttpRequest, pool: Pool) -> list[audit_view.AuditRow]:
    """The latest changes to the pool and what belongs to it, one row per decision."""
    visible = services.visible_audit_events(request.user)
    return audit_view.page_of(visible.filter(audit_view.about_pool(pool.pk)), visible, 1, POOL_AUDIT_ROWS).rows


@login_required
def pool_detail(request: HttpRequest, pk: int) -> HttpResponse:
    pool = get_object_or_404(_visible_pools(request).prefetch_related("schedules"), pk=pk)
    context = _live_context(pool) | {
        "proposals": pool.proposals.select_related("requested_by", "decided_by")[:20],
        "can_configure": services.has_role(request.user, pool.team, Role.ADMIN),
        "can_decide": services.may_act_in(request.user, pool.team, pool.cluster, Role.OPERATOR),
        "audit_rows": _pool_audit_rows(request, pool),
        "now": timezone.now(),
    }
    return render(request, "controlplane/pool_detail.html", context)


@login_required
def clusters(request: HttpRequest) -> HttpResponse:
    """The clusters the user can see; edit links only where they may edit (admins of the owning team)."""
    queryset = permissions.scoped(Cluster.objects.select_related("team"), request.user)
    admin_teams = services.team_ids_where(request.user, Role.ADMIN)
    rows = [{"cluster": cluster, "can_edit": admin_teams is None or cluster.team_id in admin_teams}
            for cluster in queryset]
    return render(request, "controlplane/clusters.html",
                  {"rows": rows, "can_create": admin_teams is None or bool(admin_teams)})


@login_required
def edit_object(request: HttpRequest, kind: str, pk: int | None = None) -> HttpResponse:
    """Create or edit a cluster, pool, SLO or schedule; errors are shown inline, nothing half-saved."""
    model, form_class = FORMS[kind]
    instance = get_object_or_404(permissions.scoped(model.objects.all(), request.user), pk=pk) if pk else None
    if instance is not None and not services.has_role(request.user, permissions.owning_team(instance), Role.ADMIN):
        raise PermissionDenied("You need the admin role in this team to change it.")
    # Taken before the form is bound: validating writes the submitted values into the instance.
    before = services.snapshot(instance) if request.method == "POST" else None
    initial = {key: value for key, value in request.GET.items() if key in form_class._meta.fields}
    form = form_class(request.POST or None, instance=instance, initial=initial, user=request.user)
    if request.method == "POST" and form.is_valid():
        obj = form.save(commit=False)
        try:
            with transaction.atomic():
                permissions.check_may_write(request.user, obj, Role.ADMIN, lock=True)
                services.save_with_audit(services.Actor.from_request(request, Channel.WEB), obj, before=before,
                                         save_related=form.save_m2m)
        except ServiceError as exc:  # a refusal (a role, an open fallback under the pool), on its field if it names one
            field = getattr(exc, "field", None)
            form.add_error(field if field in form.fields else None, str(exc))
        except IntegrityError:
            # Validation passed but a concurrent change took the name or the Deployment first.
            form.add_error(None, "Another change claimed the same name or Deployment a moment ago; reload and retry.")
        else:
            target = obj.pool if isinstance(obj, (SLO, ScheduleWindow)) else obj
            url = reverse("pool-detail", args=[target.pk]) if isinstance(target, Pool) else reverse("clusters")
            if request.htmx:
                response = HttpResponse(status=204)
                response["HX-Redirect"] = url
                return response
            return redirect(url)
    context = {"form": form, "kind": kind, "instance": instance}
    template = "controlplane/_form.html" if request.htmx else "controlplane/edit.html"
    return render(request, template, context)


@login_required
def delete_object(request: HttpRequest, kind: str, pk: int) -> HttpResponse:
    model, _ = FORMS[kind]
    instance = get_object_or_404(permissions.scoped(model.objects.all(), request.user), pk=pk)
    if not services.has_role(request.user, permissions.owning_team(instance), Role.ADMIN):
        raise PermissionDenied("You need the admin role in this team to delete it.")
    back = reverse("pool-detail", args=[instance.pool_id]) if kind in ("slo", "schedule") else reverse("fleet")
    if request.method != "POST":
        return render(request, "controlplane/confirm_delete.html", {"object": instance, "kind": kind, "back": back})
    try:
        services.delete_with_audit(services.Actor.from_request(request, Channel.WEB), instance)
    except ServiceError as exc:  # a refusal that says why (a pool with an open incident), as the API says it
        context = {"object": instance, "kind": kind, "back": back, "error": str(exc)}
        return render(request, "controlplane/confirm_delete.html", context, status=exc.status_code)
    except ProtectedError as exc:
        blockers = ", ".join(sorted({str(obj) for obj in exc.protected_objects}))
        context = {"object": instance, "kind": kind, "back": back, "error": f"Still used by {blockers}; remove those first."}
        return render(request, "controlplane/confirm_delete.html", context, status=409)
    return redirect(back)


AUDIT_ROWS_PER_PAGE = 50


@login_required
@require_GET
def audit_log(request: HttpRequest) -> HttpResponse:
    """The audit log, filtered and searched, one row per decision (see controlplane.audit_view)."""
    visible = services.visible_audit_events(request.user)
    query = audit_view.without_blanks(request.GET)
    query.pop("page", None)
    filters = audit_view.AuditEventFilter(query, queryset=visible, request=request)
    valid = filters.is_valid()
    page = audit_view.page_of(filters.qs if valid else visible.none(), visible, request.GET.get("page"),
                              AUDIT_ROWS_PER_PAGE)
    context = {"page": page, "rows": page.rows,
               "filter": filters, "query": query.urlencode(), "now": timezone.now(),
               "fields": [filters.form[name] for name in filters.PAGE_FIELDS],
               "hidden": [field for field in filters.form if field.name not in filters.PAGE_FIELDS and field.value()]}
    return render(request, "controlplane/audit.html", context, status=200 if valid else 400)
