"""The audit log as people read it: filters, human names, links to live objects, one row per decision.

The log stores `app.model` labels and ids, and one event per step. A reader at 2 AM wants "Proposal #12
(chat-8b 4 → 10)" with a link, and the proposal's propose / approved / executing / executed steps as one
row that opens, not five rows among others. The web page and the API share the filters below.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import django_filters
from django import forms
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import connection, models, transaction
from django.db.models import CharField, Exists, OuterRef, Q
from django.db.models.functions import Cast
from django.http import QueryDict
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from controlplane import permissions, services
from controlplane.choices import AuditAction, Channel
from controlplane.models import AuditEvent, Pool, Team


@dataclass(frozen=True)
class ObjectKind:
    """How the audit log shows one kind of object: its name, where it lives, and which pool it is about."""

    name: str
    url: Callable[[Any], str | None] | None = None
    pool_fields: tuple[str, ...] = ()


def _pool_page(pool_id: int | None, anchor: str = "") -> str | None:
    return reverse("pool-detail", args=[pool_id]) + anchor if pool_id else None


# Kinds the log records, by label. A label not here is named by its model's verbose_name, without a link.
KINDS: dict[str, ObjectKind] = {
    "controlplane.pool": ObjectKind("Pool", lambda pool: _pool_page(pool.pk)),
    "controlplane.cluster": ObjectKind("Cluster", lambda cluster: reverse("clusters")),
    "controlplane.slo": ObjectKind("SLO", lambda slo: _pool_page(slo.pool_id), ("pool",)),
    "controlplane.schedulewindow": ObjectKind("Schedule window", lambda window: _pool_page(window.pool_id), ("pool",)),
    "controlplane.apitoken": ObjectKind("API token"),
    "scaling.proposal": ObjectKind("Proposal", lambda proposal: reverse("proposal-card", args=[proposal.pk]), ("pool",)),
    "scaling.trafficshift": ObjectKind("Traffic shift", lambda shift: _pool_page(shift.to_pool_id, f"#shift-{shift.pk}"),
                                       ("from_pool", "to_pool")),
    "scaling.fallbackactivation": ObjectKind("Fallback", lambda fallback: _pool_page(fallback.pool_id, "#fallback"),
                                             ("pool",)),
    "scaling.fallbackpolicy": ObjectKind("Fallback policy", lambda policy: _pool_page(policy.pool_id, "#fallback"),
                                         ("pool",)),
    "scaling.circuitbreaker": ObjectKind("Circuit breaker", lambda breaker: _pool_page(breaker.pool_id, "#breakers"),
                                         ("pool",)),
    "scaling.warmpoolreport": ObjectKind("Warm-pool report", lambda report: reverse("warm-pool-report", args=[report.pk]),
                                         ("pool",)),
    "incidents.incident": ObjectKind("Incident", lambda incident: reverse("incidents:incident-view", args=[incident.pk]),
                                     ("pool",)),
    "incidents.playbookrun": ObjectKind(
        "Playbook run", lambda run: reverse("incidents:incident-view", args=[run.incident_id]) + "#playbooks"),
    # The playbooks page, which the whole team reads (its edit form is for operators), as a save lands there.
    "incidents.playbook": ObjectKind("Playbook",
                                     lambda playbook: reverse("incidents:playbooks") + f"#playbook-{playbook.pk}"),
    "incidents.channel": ObjectKind("Notification channel", lambda channel: reverse("incidents:channels")),
    "incidents.silence": ObjectKind("Silence", lambda silence: reverse("incidents:alerts")),
    "incidents.slackidentity": ObjectKind("Slack link", lambda identity: reverse("incidents:user-settings")),
}

# One decision, several steps: these objects' events fold into one row.
FOLDED_TYPES = ("scaling.proposal", "scaling.trafficshift", "scaling.fallbackactivation", "incidents.playbookrun")

ACTION_NAMES = dict(AuditAction.choices) | {
    "propose": "Proposed", "scale-intent": "About to scale", "scale": "Scaled", "shift-start": "Shift started",
    "open_incident": "Opened incident", "open_drill": "Opened drill", "note": "Note",
}


def type_name(label: str) -> str:
    """'scaling.proposal' → 'Proposal'; a model no longer in the code keeps its label."""
    if label in KINDS:
        return KINDS[label].name
    try:
        verbose = str(apps.get_model(label)._meta.verbose_name)
    except (LookupError, ValueError):
        return label
    return verbose[:1].upper() + verbose[1:]


def action_name(action: str) -> str:
    """'issue_token' → 'Issued API token', 'breaker-open' → 'Breaker open', 'approved' → 'Approved'."""
    if action in ACTION_NAMES:
        return str(ACTION_NAMES[action])
    words = action.replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:]


# Recorded often, though without a page of their own: listed first in the type filter with KINDS.
COMMON_TYPES = ("auth.user", "controlplane.team", "controlplane.membership")


def object_type_choices() -> list[tuple[str, list[tuple[str, str]]]]:
    """Every model of the project's apps (and users) by human name, what is commonly recorded first:
    what the type filter accepts. (The log never records itself or Django's permissions.)"""
    labels = {model._meta.label_lower for model in apps.get_models()
              if model._meta.app_label in ("controlplane", "scaling", "incidents", "auth")}
    labels -= {"controlplane.auditevent", "auth.permission"}
    common = labels & (set(KINDS) | set(COMMON_TYPES))

    def by_name(group: set[str]) -> list[tuple[str, str]]:
        return sorted(((label, type_name(label)) for label in group), key=lambda choice: (choice[1], choice[0]))

    return [("Decisions and configuration", by_name(common)), ("Other records", by_name(labels - common))]


# --- filters ------------------------------------------------------------------------------------------


def about_pool(pool_id: int) -> Q:
    """Events about a pool: the pool itself, and the objects that belong to it, live (by their pool) or
    deleted (by the pool named in the snapshot the event kept)."""
    owned_types = [label for label, kind in KINDS.items() if kind.pool_fields]
    recorded = Q()
    for field in sorted({field for label in owned_types for field in KINDS[label].pool_fields}):
        recorded |= Q(**{f"after__{field}": pool_id}) | Q(**{f"before__{field}": pool_id})
    condition = Q(object_type="controlplane.pool", object_id=str(pool_id)) | Q(recorded, object_type__in=owned_types)
    for label in owned_types:
        owned = Q()
        for field in KINDS[label].pool_fields:
            owned |= Q(**{field: pool_id})
        ids = apps.get_model(label).objects.filter(owned).annotate(id_text=Cast("pk", CharField())).values("id_text")
        condition |= Q(object_type=label, object_id__in=ids)
    return condition


def search(text: str) -> Q:
    """Free text: who, what, which object, the request id, and the recorded before/after values."""
    condition = Q()
    for field in ("actor_name", "action", "object_type", "object_id", "object_repr", "request_id",
                  "before_text", "after_text"):
        condition |= Q(**{f"{field}__icontains": text})
    return condition


WITHIN = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "6h": timedelta(hours=6),
          "24h": timedelta(hours=24), "7d": timedelta(days=7)}


def _visible_teams(request: Any) -> models.QuerySet:
    team_ids = services.visible_team_ids(request.user) if request is not None else Team.objects.none().values("id")
    return Team.objects.all() if team_ids is None else Team.objects.filter(id__in=team_ids)


def _visible_pools(request: Any) -> models.QuerySet:
    if request is None:
        return Pool.objects.none()
    return permissions.scoped(Pool.objects.select_related("cluster"), request.user)


@extend_schema_field(OpenApiTypes.INT)
class PoolFilter(django_filters.ModelChoiceFilter):
    """A pool by id (one the user may see); the schema says so (it cannot tell from a method)."""


class _ClockInput(forms.DateTimeInput):
    input_type = "datetime-local"


# Filters whose schema has a type or a list of values, so that an empty one is a mistake (the page leaves
# out the fields left blank before it asks, see without_blanks).
TYPED_FILTERS = ("team", "pool", "object_type", "channel", "within", "since", "until")


def without_blanks(query: QueryDict) -> QueryDict:
    """A form's query without the fields left blank: an HTML form sends every field."""
    kept = query.copy()
    for name in [name for name, value in kept.items() if value == ""]:
        del kept[name]
    return kept


class AuditFilterForm(forms.Form):
    def clean(self) -> dict[str, Any]:
        data = super().clean()
        for name in TYPED_FILTERS:
            if self.data.get(name, None) == "":
                self.add_error(name, "Give a value, or leave this filter out.")
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            raise ValidationError({"until": "Must be after From."})
        return data


class AuditEventFilter(django_filters.FilterSet):
    """The audit log's filters, for the page and for /api/v1/audit/. A value that is not valid is an
    error naming the filter (400), never an empty answer that looks like "nothing happened"."""

    team = django_filters.ModelChoiceFilter(queryset=_visible_teams, to_field_name="slug", empty_label="any team",
                                            help_text="A team's slug (one of yours).")
    pool = PoolFilter(queryset=_visible_pools, method="filter_pool", empty_label="any pool", label="Pool",
                                            help_text="A pool's id: the pool and what belongs to it.")
    actor = django_filters.CharFilter(field_name="actor_name", lookup_expr="iexact", label="Who",
                                      help_text="A user name, or e.g. 'auto:system' for Headroom itself.")
    action = django_filters.CharFilter(help_text="An action as recorded, e.g. 'approved' or 'update'.")
    object_type = django_filters.ChoiceFilter(choices=object_type_choices, empty_label="any kind", label="Kind",
                                              help_text="An object kind as `app.model`, e.g. 'scaling.proposal'.")
    channel = django_filters.ChoiceFilter(choices=Channel.choices, empty_label="any channel")
    within = django_filters.ChoiceFilter(choices=[(key, f"last {key}") for key in WITHIN], method="filter_within",
                                         empty_label="any time", label="Within", help_text="Only the last 15m, 1h, 6h, 24h or 7d.")
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte", label="From",
                                             widget=_ClockInput, help_text="ISO 8601; UTC when no offset is given.")
    until = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lte", label="Until",
                                             widget=_ClockInput, help_text="ISO 8601; UTC when no offset is given.")
    q = django_filters.CharFilter(method="filter_search", label="Search", max_length=200,
                                  help_text="Text in who, what, the object's name or id, the request id, or the values.")
    object_id = django_filters.CharFilter()
    actor_name = django_filters.CharFilter()
    request_id = django_filters.CharFilter()

    class Meta:
        model = AuditEvent
        fields: list[str] = []
        form = AuditFilterForm

    # What the page shows as a form; the API also takes the exact-match ones after it.
    PAGE_FIELDS = ("q", "team", "pool", "object_type", "actor", "action", "channel", "within", "since", "until")

    def filter_pool(self, queryset: models.QuerySet, name: str, pool: Pool | None) -> models.QuerySet:
        return queryset.filter(about_pool(pool.pk)) if pool else queryset

    def filter_within(self, queryset: models.QuerySet, name: str, value: str) -> models.QuerySet:
        return queryset.filter(at__gte=timezone.now() - WITHIN[value]) if value else queryset

    def filter_search(self, queryset: models.QuerySet, name: str, value: str) -> models.QuerySet:
        if not value.strip():
            return queryset
        return queryset.annotate(before_text=Cast("before", models.TextField()),
                                 after_text=Cast("after", models.TextField())).filter(search(value.strip()))


# --- rows -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditRow:
    """One line of the log: a single event, or a decision's events (oldest first) folded together."""

    kind: str
    object_type: str
    object_id: str
    name: str
    url: str | None
    events: tuple[AuditEvent, ...]

    @property
    def latest(self) -> AuditEvent:
        return self.events[-1]

    @property
    def folded(self) -> bool:
        return len(self.events) > 1

    @property
    def steps(self) -> list[str]:
        """The actions in order, a repeated one (three 'scale-intent' retries) once."""
        names: list[str] = []
        for event in self.events:
            name = action_name(event.action)
            if not names or names[-1] != name:
                names.append(name)
        return names

    @property
    def timeline(self) -> list[tuple[AuditEvent, str]]:
        """Each event with its action's human name, oldest first (the folded row's details)."""
        return [(event, action_name(event.action)) for event in self.events]

    @property
    def deleted(self) -> bool:
        return self.latest.action == AuditAction.DELETE

    @property
    def actors(self) -> list[str]:
        return list(dict.fromkeys(event.actor_name for event in self.events))

    @property
    def channels(self) -> list[str]:
        return list(dict.fromkeys(event.channel for event in self.events))


def row_heads(events: models.QuerySet) -> models.QuerySet:
    """One event per row, newest first: a decision's latest event among `events`, any other event itself.

    No GROUP BY over the whole log: the newest page reads the newest events by the `at` index and asks,
    for each decision's event, whether a later one of the same decision is among `events` (an index probe
    on type and id). A page costs what it shows, not what the log holds."""
    later = events.filter(object_type=OuterRef("object_type"), object_id=OuterRef("object_id")).filter(
        Q(at__gt=OuterRef("at")) | Q(at=OuterRef("at"), pk__gt=OuterRef("pk")))
    return events.filter(~Q(object_type__in=FOLDED_TYPES) | ~Exists(later)).order_by("-at", "-id")


@dataclass(frozen=True)
class RowPage:
    """A page of rows, newer and older; no total, which would cost a count of the whole log."""

    number: int
    rows: list[AuditRow]
    has_next: bool

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def previous_page_number(self) -> int:
        return self.number - 1

    @property
    def next_page_number(self) -> int:
        return self.number + 1


# Far past any real log (an empty page there), and small enough that the OFFSET fits PostgreSQL's bigint.
MAX_PAGE = 10**9


def page_of(events: models.QuerySet, visible: models.QuerySet, number: str | int | None, per_page: int) -> RowPage:
    """Page `number` (1 when it is not a whole number ≥ 1, at most MAX_PAGE) of the rows of `events`."""
    try:
        page = min(max(1, int(number or 1)), MAX_PAGE)
    except ValueError:
        page = 1
    start = (page - 1) * per_page
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # The planner prices the per-row probe as if the page read the whole log (it stops after a
            # page), so with a selective filter it JIT-compiles the query: 0.3-1 s of compiling for a
            # query that then runs in a millisecond (measured on 100,000 events, docs/api.md).
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL jit = off")
        heads = list(row_heads(events)[start:start + per_page + 1])
    return RowPage(number=page, rows=rows_for(heads[:per_page], visible), has_next=len(heads) > per_page)


def _key(event: AuditEvent) -> tuple[str, str]:
    """Which row an event belongs to: its decision's, or its own."""
    return (event.object_type, event.object_id) if event.object_type in FOLDED_TYPES else ("#", str(event.pk))


def rows_for(heads: Iterable[AuditEvent], visible: models.QuerySet) -> list[AuditRow]:
    """The rows whose latest events are `heads`. A decision shows all its steps the reader may see, not
    only the ones that matched the filters: the filter finds the decision, the row tells its whole story."""
    heads = list(heads)
    if not heads:
        return []
    by_key: dict[tuple[str, str], list[AuditEvent]] = {_key(head): [] for head in heads}
    decisions = Q()
    for object_type, object_id in by_key:
        if object_type != "#":
            decisions |= Q(object_type=object_type, object_id=object_id)
    for event in visible.filter(decisions).order_by("at", "id") if decisions else []:
        by_key[_key(event)].append(event)
    for head in heads:  # a single event is its own row
        by_key[_key(head)] = by_key[_key(head)] or [head]
    return build_rows([tuple(by_key[_key(head)]) for head in heads])


def build_rows(groups: list[tuple[AuditEvent, ...]]) -> list[AuditRow]:
    """Name each group and link it to its object where that object still exists (one query a kind)."""
    urls = live_urls({(group[-1].object_type, group[-1].object_id) for group in groups})
    return [
        AuditRow(kind=type_name(group[-1].object_type), object_type=group[-1].object_type,
                 object_id=group[-1].object_id, name=_name(group), url=urls.get((group[-1].object_type, group[-1].object_id)),
                 events=group)
        for group in groups
    ]


def _name(group: tuple[AuditEvent, ...]) -> str:
    """The object's name as last recorded (a deletion records none, so the one before it)."""
    return next((event.object_repr for event in reversed(group) if event.object_repr), group[-1].object_id)


def live_urls(objects: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Where each (label, id) can be seen now; objects deleted since, or with no page, have none."""
    ids_by_label: dict[str, set[str]] = {}
    for label, object_id in objects:
        if KINDS.get(label, ObjectKind("")).url is not None and object_id:
            ids_by_label.setdefault(label, set()).add(object_id)
    urls: dict[tuple[str, str], str] = {}
    for label, ids in ids_by_label.items():
        model = apps.get_model(label)
        pks = []
        for object_id in ids:
            try:
                pks.append(model._meta.pk.to_python(object_id))
            except ValidationError:
                continue  # an id recorded in another form than the model's key: shown, not linked
        for obj in model.objects.filter(pk__in=pks):
            url = KINDS[label].url(obj)  # type: ignore[misc]
            if url:
                urls[(label, str(obj.pk))] = url
    return urls
