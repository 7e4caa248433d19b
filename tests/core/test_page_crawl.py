"""Every page, htmx fragment and API route of the site, GET as anonymous, an outsider, a viewer, an operator, an
admin and a superuser, over one world whose objects sit in odd states: a pool never read from its cluster, proposals
in every state, a shift waiting and one failed, a fallback that failed, a deleted pool's incident, a system incident,
reports pending, failed and done. No answer is a 5xx; an anonymous visitor is sent to the login page (401/403 from
the API); the outsider never sees ML Platform's objects; an id that names nothing is a 404; and every link or poll a
page shows a signed-in person answers them.

The routes come from the resolver itself, so a new one is crawled (or the crawl fails, asking what its parameters
name) without anyone remembering to add it here. The world is built and crawled once per module, in a transaction
rolled back at the end (a module-scoped fixture cannot use the per-test `db` fixture); the tests read the answers.
"""
from __future__ import annotations

import dataclasses
import html
import itertools
import math
import re
import signal
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.core.signals import got_request_exception
from django.db import transaction
from django.db.models import Model
from django.http import HttpResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from django.utils import timezone

from controlplane import permissions, services as core
from controlplane.choices import Channel as ActorChannel, Role, SloIndicator
from controlplane.models import SLO, Cluster, Membership, Pool, ScheduleWindow, Team
from incidents import alerts, incidents, playbooks, services as notify
from incidents.choices import ChannelKind, NotificationKind
from incidents.models import Alert, Channel, Incident, Playbook, PlaybookRun
from scaling import breakers, report_service, services as scaling
from scaling.choices import (
    BreakerScope,
    FallbackPhase,
    ProposalKind,
    ProposalState,
    ReportState,
    ShiftPhase,
)
from scaling.drivers.cluster import DriverError, PremiseChanged, ReplicaStatus, ScaleOutcome, ScalePremise, Workload
from scaling.engine.breakers import WindowCounts
from scaling.models import (
    CircuitBreaker,
    FallbackActivation,
    FallbackEvent,
    FallbackPolicy,
    Proposal,
    SignalSample,
    TrafficShift,
    TrafficShiftEvent,
    WarmPoolReport,
)

from tests.incidents.test_alerts import evaluate
from tests.incidents.test_incidents import fire_ttft_p95

# pytest-django sets up the test database only for a session whose tests ask for it.
pytestmark = pytest.mark.django_db

# --- the world -------------------------------------------------------------------------------------

ML_CLUSTER = "gpu-us-east"  # in the text of nearly every ML Platform object: the outsider must never read it


def _pool(cluster: Cluster, team: Team, name: str, **fields: object) -> Pool:
    pool = Pool.objects.create(cluster=cluster, team=team, name=name, namespace="inference", deployment=f"vllm-{name}",
                               model_name=f"model-{name}", gpu_type="H100", min_replicas=1, max_replicas=8,
                               route_name="chat", route_backend=f"vllm-{name}", **fields)
    SLO.objects.create(pool=pool, indicator=SloIndicator.TTFT_P95, threshold=1000, objective=0.99)
    return pool


@dataclasses.dataclass
class _ScriptedDriver:
    """A cluster that accepts or refuses a write as told, then reports `ready` replicas."""

    ready: int = 0
    refuse: Exception | None = None

    def generation(self, workload: Workload) -> int | None:
        return 1

    def scale(self, workload: Workload, replicas: int, premise: ScalePremise | None = None) -> ScaleOutcome:
        if self.refuse is not None:
            raise self.refuse
        return ScaleOutcome(previous=premise.decided_from if premise else 1, target=replicas, wrote=True)

    def status(self, workload: Workload) -> ReplicaStatus:
        return ReplicaStatus(desired=8, ready=self.ready)

    def added_pods_ready_at(self, workload: Workload, since: datetime, count: int) -> datetime | None:
        return None


def _proposals(pool: Pool, never_read: Pool, alice: User, now: datetime) -> None:
    """One proposal in every state, each made and moved by the services (the executions by a scripted cluster)."""
    by_alice = core.Actor(alice, ActorChannel.WEB)

    def propose(target: int, kind: str = ProposalKind.MANUAL, **options: object) -> Proposal:
        return scaling.propose(pool, target, kind, by_alice, current=2,
                               reasons=[{"code": "manual", "detail": f"crawl: {target} replicas"}], **options)

    def executed(target: int, driver: _ScriptedDriver) -> None:
        scaling.approve(propose(target).pk, by_alice)
        scaling.execute(Proposal.objects.get(pool=pool, state=ProposalState.APPROVED).pk, driver)

    propose(3)  # superseded by the next one
    scaling.reject(propose(4).pk, by_alice, "not now")
    propose(5, now=now - timedelta(hours=1))
    assert scaling.expire_due(now) == 1
    executed(3, _ScriptedDriver(refuse=DriverError("deployments.apps is forbidden", permanent=True, status=403)))
    executed(4, _ScriptedDriver(refuse=PremiseChanged(live=6, reason="someone scaled it to 6 meanwhile")))
    executed(5, _ScriptedDriver(ready=5))  # succeeded
    executed(6, _ScriptedDriver(ready=2))  # executing: written, waiting for its replicas to be Ready
    scaling.approve(propose(7).pk, by_alice)  # approved: its execution is queued on a commit that never comes
    evidence = {"forecast_p90": [40, 120, 310], "capacity": [90], "window": "in the next 30 min"}
    propose(8, ProposalKind.PRESCALE, evidence=evidence)  # pending
    # A pool Headroom never read: its proposal starts from the pool's minimum.
    scaling.propose(never_read, 3, ProposalKind.MANUAL, by_alice)
    states = set(Proposal.objects.values_list("state", flat=True))
    assert states == set(ProposalState.values), sorted(set(ProposalState.values) - states)


def _traffic(pool: Pool, never_read: Pool, alice: User, now: datetime) -> None:
    """Shifts and a fallback as the services leave them; written as rows, since starting them reads a live route."""
    weights = lambda giving, taking: {pool.route_backend: giving, never_read.route_backend: taking}  # noqa: E731
    common = {"cluster": pool.cluster, "from_pool": pool, "to_pool": never_read, "route_namespace": "inference",
              "route_name": "chat", "from_backend": pool.route_backend, "to_backend": never_read.route_backend,
              "steps": [80, 95, 100], "hold_s": 60, "max_p95_s": 1.0, "max_error_rate": 0.01, "failure_threshold": 3,
              "no_data_deadline_s": 120, "start_weights": weights(100, 0),
              "planned_weights": [weights(20, 80), weights(5, 95), weights(0, 100)], "created_by": alice,
              "created_channel": ActorChannel.API}
    waiting = TrafficShift.objects.create(**common, phase=ShiftPhase.WAITING_APPROVAL, step=1, good_step=1,
                                          gated_steps=[2], step_since=now, current_weights=weights(20, 80),
                                          idempotency_key="crawl-waiting")
    failed = TrafficShift.objects.create(**common, phase=ShiftPhase.FAILED, step=2, good_step=1, failed_checks=3,
                                         current_weights=weights(7, 93), finished_at=now - timedelta(hours=2),
                                         last_error="the route's weights changed under the shift",
                                         idempotency_key="crawl-failed")
    for shift, phases in ((waiting, ["pending", "stepping", "holding", "waiting_approval"]),
                          (failed, ["pending", "stepping", "holding", "stepping", "failed"])):
        TrafficShiftEvent.objects.bulk_create(
            TrafficShiftEvent(shift=shift, from_phase=before, to_phase=after, actor_name="auto:system",
                              channel=ActorChannel.AUTO, step=shift.step)
            for before, after in zip(["", *phases], phases))
    FallbackPolicy.objects.create(pool=pool, requires_approval=True)
    ended = FallbackActivation.objects.create(
        pool=pool, fallback_pool=never_read, route_namespace="inference", route_name="chat",
        primary_backend=pool.route_backend, fallback_backend=never_read.route_backend, phase=FallbackPhase.FAILED,
        trigger="auto", share=0.4, target_percent=40, route_percent=25, start_weights=weights(100, 0),
        reasons=[{"code": "overload", "detail": "TTFT p95 2.1 s over the SLO for 15 s"}],
        last_error="someone else changed the route's weights", created_channel=ActorChannel.AUTO,
        finished_at=now - timedelta(hours=3))
    FallbackEvent.objects.bulk_create(
        FallbackEvent(activation=ended, kind=kind, from_phase=before, to_phase=after, actor_name="auto:system",
                      channel=ActorChannel.AUTO, share=0.4)
        for kind, before, after in (("entered", "", "active"), ("failed", "active", "failed")))


def _breakers(pool: Pool, alice: User, now: datetime) -> None:
    endpoint = CircuitBreaker.objects.create(scope=BreakerScope.ENDPOINT, pool=pool, endpoint="vllm-chat-8b-7d9f-x2",
                                             since=now, failure_ratio=0.05, min_requests=20, open_for_s=30)
    breakers.force(endpoint.pk, "open", core.Actor(alice, ActorChannel.API), "drain the pod")
    breakers.evaluate_system(WindowCounts(requests=10_000, failures=900), now)  # no team's: only a superuser reads it


def _incidents(pool: Pool, gone: Pool, alice: User, now: datetime) -> None:
    """A resolved incident and an open one on `pool`, a resolved one whose pool was deleted since, and the
    cluster's system incident (the control loop stopped ticking)."""
    by_alice = core.Actor(alice, ActorChannel.WEB)
    playbook = playbooks.save(by_alice, pool.team, "surge", alert_rules=["ttft_p95"], severities=["P0"], steps=[
        playbooks.StepSpec("Take command", "checklist"),
        playbooks.StepSpec("Pre-scale to warm pool + 50 %", "prescale", {"buffer": 0.5}),
        playbooks.StepSpec("Confirm the queue drained", "checklist")])

    fire_ttft_p95(pool, now - timedelta(hours=3))
    resolved = Incident.objects.get(pool=pool)
    for minute in range(5, 12):  # healthy again: the alert resolves after its hold
        evaluate(pool, now - timedelta(hours=3) + timedelta(minutes=minute))
    incidents.add_note(resolved.pk, by_alice, "raise the warm pool before the launch", follow_up=True)
    incidents.resolve(resolved.pk, by_alice, "capacity back")

    fire_ttft_p95(gone, now - timedelta(hours=2))
    deleted = Incident.objects.get(pool=gone)
    run = playbooks.start_run(deleted, playbook, by_alice)
    playbooks.run_step(run.pk, 2, by_alice)  # its proposal goes with the pool
    incidents.resolve(deleted.pk, by_alice, "pool retired")
    core.delete_with_audit(core.Actor(None, ActorChannel.CLI), gone)

    fire_ttft_p95(pool, now - timedelta(minutes=20))
    open_ = Incident.objects.get(pool=pool, state="open")
    run = playbooks.start_run(open_, playbook, by_alice)
    playbooks.complete(run.pk, 1, by_alice)
    playbooks.skip(run.pk, 3, by_alice, "the queue is still long")
    report_service.request_what_if(open_, by_alice, enqueue=False)

    alerts.evaluate_heartbeats(now)  # the last tick was 17 minutes ago
    system = Incident.objects.get(cluster=pool.cluster, pool__isnull=True, pool_name="")
    playbooks.start_run(system, playbook, by_alice)  # a pre-scale step in an incident without a pool


def _history(pool: Pool, now: datetime, hours: float) -> None:
    """Stored samples a report replays: a rate rising and falling between 20 and 80 req/s, every 15 s."""
    SignalSample.objects.bulk_create(
        SignalSample(pool=pool, at=now - timedelta(hours=hours - tick / 240), ttft_p95_s=0.3, ready_replicas=5,
                     request_rate_rps=50 + 30 * math.sin(tick / 90))
        for tick in range(int(hours * 240)))


def _reports(pool: Pool, never_read: Pool, alice: User, now: datetime) -> None:
    by_alice = core.Actor(alice, ActorChannel.API)
    ask = lambda target, **options: report_service.request_report(  # noqa: E731
        target, by_alice, days=0.1, sizes_pct=(0, 40), enqueue=False, **options)
    ask(pool)  # pending
    failed = report_service.run(ask(never_read).pk)  # no history at all
    assert failed.state == ReportState.FAILED, failed.state
    _history(pool, now, hours=2.5)
    done = report_service.run(ask(pool, peak_basis="day-peak").pk)
    assert done.state == ReportState.SUCCEEDED, done.error


def _notifications(team: Team, alice: User, now: datetime) -> None:
    by_alice = core.Actor(alice, ActorChannel.WEB)
    slack = notify.create_channel(team, "on-call", ChannelKind.SLACK,
                                  {"webhook_url": "https://hooks.slack.com/services/T1/B1/secret-part"}, by_alice)
    hook = notify.create_channel(team, "pager", ChannelKind.WEBHOOK, {"url": "https://hooks.example.com/headroom"},
                                 by_alice)
    pending = Proposal.objects.filter(pool__team=team, state=ProposalState.PENDING).first()
    firing = Alert.objects.filter(team=team, state="firing").first()
    for channel in (slack, hook):
        notify.enqueue(channel, pending, NotificationKind.POST, now)
        notify.enqueue(channel, None, NotificationKind.ALERT_FIRING, now, alert=firing)
    notify.disable_channel(hook, "410 Gone: the receiver said this address no longer exists")
    notify.link_slack_user(alice, "U0ALICE1", by_alice)
    first_pool = Pool.objects.filter(team=team).first()
    alerts.create_silence(team, [{"label": "pool", "value": str(first_pool.pk)}], now + timedelta(hours=2), by_alice,
                          comment="maintenance")


def _member(username: str, team: Team, role: str) -> User:
    user = User.objects.create_user(username=username)  # no password: the crawl logs in with force_login
    Membership.objects.create(user=user, team=team, role=role)
    return user


def build_world() -> dict[str, User | None]:
    """ML Platform's objects in every state worth a page, a pool of Search's; the personas, by name."""
    now = timezone.now()
    ml_team = Team.objects.create(name="ML Platform", slug="ml-platform")
    search_team = Team.objects.create(name="Search", slug="search")
    users: dict[str, User | None] = {
        "anonymous": None,
        "outsider": _member("charlie", search_team, Role.ADMIN),
        "viewer": _member("dave", ml_team, Role.VIEWER),
        "operator": _member("alice", ml_team, Role.OPERATOR),
        "admin": _member("bob", ml_team, Role.ADMIN),
        "superuser": User.objects.create_superuser("root", "root@example.com", None),
    }
    alice = users["operator"]
    cluster = Cluster.objects.create(name=ML_CLUSTER, team=ml_team, kube_api_url="http://127.0.0.1:6443",
                                     gpu_prices={"H100": {"on_demand": 4.0, "spot": 1.9}})
    never_read = _pool(cluster, ml_team, "embed")
    pool = _pool(cluster, ml_team, "chat-8b", fallback_pool=never_read)
    gone = _pool(cluster, ml_team, "old-chat")
    ScheduleWindow.objects.create(pool=pool, name="mornings", weekday=0, start="09:00", end="11:00")
    scaling.record_status(pool, ReplicaStatus(desired=2, ready=2, batch_slots=64), now)
    search_cluster = Cluster.objects.create(name="gpu-eu", team=search_team, kube_api_url="http://127.0.0.1:6444")
    _pool(search_cluster, search_team, "rerank")
    core.issue_token(alice, core.Actor(alice, ActorChannel.WEB), name="laptop")

    _incidents(pool, gone, alice, now)
    _proposals(pool, never_read, alice, now)
    _traffic(pool, never_read, alice, now)
    _breakers(pool, alice, now)
    _reports(pool, never_read, alice, now)
    _notifications(ml_team, alice, now)
    return users


# --- the routes ------------------------------------------------------------------------------------

MAX_OBJECTS = 12  # of one kind: all of them but the audit log's events, whose pages are all alike
MISSING_ID = "987654321"  # no object has it
HUGE_ID = str(2**64)  # past any integer column: still "no such object"
MISSING_SLUG = "no-such-team"
PATH_HOLE = re.compile(r"<(?:(\w+):)?(\w+)>")
NAMED_GROUP = re.compile(r"\(\?P<(\w+)>")
WORDS = re.compile(r"[\w\\.-]+(\|[\w\\.-]+)*")  # a group that spells out its values: cluster|pool|slo|schedule


@dataclasses.dataclass(frozen=True)
class Route:
    name: str  # namespaced ("incidents:incident-view"), or the pattern of an unnamed route
    template: str  # the path with a {hole} per parameter
    choices: dict[str, tuple[str, ...]]  # parameters the pattern spells out
    params: tuple[str, ...]  # parameters that name an object
    callback: object = dataclasses.field(compare=False)

    @property
    def api(self) -> bool:
        return self.template.startswith("/api/") and self.name != "api-docs"  # Swagger UI is a page for people

    @property
    def admin(self) -> bool:
        return self.template.startswith("/admin/")


def _regex_holes(regex: str) -> tuple[str, dict[str, tuple[str, ...]], list[str]]:
    """A regex pattern as a path template: each named group becomes a {hole}."""
    regex = regex.removeprefix("^").removesuffix("$")
    parts, choices, params, start = [], {}, [], 0
    while match := NAMED_GROUP.search(regex, start):
        depth, end = 1, match.end()
        while depth:  # to the group's closing parenthesis
            char = regex[end]
            depth += {"(": 1, ")": -1}.get(char, 0)
            end += 2 if char == "\\" else 1
        body, name = regex[match.end():end - 1], match.group(1)
        if WORDS.fullmatch(body):
            choices[name] = tuple(word.replace("\\", "") for word in body.split("|"))
        else:
            params.append(name)
        parts += [regex[start:match.start()], "{" + name + "}"]
        start = end
    parts.append(regex[start:])
    return "".join(parts).replace("\\.", ".").replace("/?", ""), choices, params


def _routes(resolver: URLResolver | None = None, prefix: str = "/",
            namespaces: tuple[str, ...] = ()) -> Iterator[Route]:
    """Every URL pattern of the site, found by walking the resolver."""
    for entry in (resolver or get_resolver()).url_patterns:
        pattern = entry.pattern
        if hasattr(pattern, "_route"):  # path("pools/<int:pk>/")
            template = PATH_HOLE.sub(r"{\2}", pattern._route)
            choices, params = {}, list(pattern.converters)
        else:  # re_path(...)
            template, choices, params = _regex_holes(pattern._regex)
            if not pattern._regex.endswith("$") and isinstance(entry, URLPattern):
                template += "no-such-page/"  # a catch-all (`^api/`): any address below it
        if isinstance(entry, URLResolver):
            inner = namespaces + ((entry.namespace,) if entry.namespace else ())
            for route in _routes(entry, prefix + template, inner):
                yield Route(route.name, route.template, choices | route.choices, (*params, *route.params),
                            route.callback)
        else:
            name = ":".join((*namespaces, entry.name)) if entry.name else prefix + template
            yield Route(name, prefix + template, choices, tuple(params), entry.callback)


# --- what each path parameter names --------------------------------------------------------------------

Values = tuple[str, ...]
ParamSpec = type[Model] | Values | Callable[[dict[str, str]], "type[Model] | Values"]
KINDS: dict[str, type[Model]] = {"cluster": Cluster, "pool": Pool, "slo": SLO, "schedule": ScheduleWindow}
# The pages' parameters; the API's come from its viewsets, the admin's from the model in its path.
PAGE_PARAMS: dict[str, dict[str, ParamSpec]] = {
    **dict.fromkeys(("pool-detail", "pool-live", "pool-decisions", "pool-reports", "fallback-act"), {"pk": Pool}),
    **dict.fromkeys(("object-edit", "object-delete"), {"pk": lambda kwargs: KINDS[kwargs["kind"]]}),
    **dict.fromkeys(("proposal-card", "proposal-decide"), {"pk": Proposal}),
    "shift-act": {"pk": TrafficShift},
    **dict.fromkeys(("warm-pool-report", "warm-pool-report-body", "warm-pool-report-file"), {"pk": WarmPoolReport}),
    "incidents:channel-enable": {"pk": Channel},
    **dict.fromkeys((f"incidents:incident-{page}" for page in (
        "view", "live", "approvals", "postmortem", "note", "what-if", "act", "playbooks")), {"pk": Incident}),
    "incidents:playbook-start": {"pk": Incident, "playbook_pk": Playbook},
    "incidents:playbook-step": {"pk": Incident, "run_pk": PlaybookRun, "position": ("1", "2", "3")},
    "incidents:playbook-edit": {"pk": Playbook},
    "admin:view_on_site": {"content_type_id": lambda kwargs: (str(ContentType.objects.get_for_model(Pool).pk),),
                           "object_id": Pool},
    "admin:auth_user_password_change": {"id": User},
}
# Parameters that name no object: the admin's catch-all's tail, DRF's format suffix (`.json` after a name, the whole
# `.json` after the API's root).
PLAIN_PARAMS: dict[str, Callable[[Route], str]] = {
    "url": lambda route: "no-such-page/",
    "format": lambda route: ".json" if route.template.endswith("/{format}") else "json",
}

# Routes that cannot be a GET (a form's or a button's POST, or a token's DELETE): each answers a signed-in GET
# with 405, which the crawl checks, and is crawled with one object of each kind only (the method is refused before
# any object is read).
NOT_GET = {
    "approvals-bulk", "proposal-decide", "shift-act", "fallback-act", "logout",
    "incidents:slack-interactions", "incidents:channel-enable", "incidents:incident-note", "incidents:incident-act",
    "incidents:playbook-start", "incidents:playbook-step",
    *(f"incidents:api:{name}" for name in (
        "channel-enable", "silence-expire", "incident-acknowledge", "incident-mitigate", "incident-notes",
        "incident-resolve", "incident-what-if", "playbookrun-complete", "playbookrun-run", "playbookrun-skip")),
    *(f"api:{name}" for name in (
        "apitoken-detail", "proposal-bulk", "proposal-approve", "proposal-execute", "proposal-reject",
        "trafficshift-approve", "trafficshift-pause", "trafficshift-resume", "trafficshift-rollback",
        "fallbackactivation-activate", "fallbackactivation-approve", "fallbackactivation-restore",
        "circuitbreaker-close", "circuitbreaker-open", "circuitbreaker-release")),
    "admin:logout",
}


def _param_spec(route: Route, param: str) -> tuple[ParamSpec, str]:
    """What a parameter names, and the field its value is read from."""
    view = getattr(route.callback, "cls", None)
    if view is not None and param == (getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", "")):
        # The tokens' viewset has no queryset (it builds one per user): its serializer's model.
        model = view.queryset.model if view.queryset is not None else view.serializer_class.Meta.model
        return model, view.lookup_field
    if route.name in PAGE_PARAMS and param in PAGE_PARAMS[route.name]:
        return PAGE_PARAMS[route.name][param], "pk"
    if route.admin and param == "object_id":
        app_label, model_name = route.template.split("/")[2:4]
        return apps.get_model(app_label, model_name), "pk"
    raise LookupError(f"{route.template}: what does {param!r} name? Say so in PAGE_PARAMS or PLAIN_PARAMS.")


def _teams(obj: Model) -> frozenset[str]:
    """The slugs of the teams that own an object, read along its model's `team_lookups` (empty: no team's)."""
    if isinstance(obj, Team):
        return frozenset({obj.slug})
    owners: set[str] = set()
    for lookup in permissions.team_lookups(type(obj)):
        value: object = obj
        for attribute in lookup.split("__"):
            value = getattr(value, attribute, None)
        if isinstance(value, Team):
            owners.add(value.slug)
        elif value is not None:  # a many-to-many: the teams a cluster is shared with
            owners |= set(value.values_list("slug", flat=True))
    return frozenset(owners)


@dataclasses.dataclass(frozen=True)
class Target:
    route: Route
    path: str
    missing: bool  # an id in it names nothing
    owners: tuple[frozenset[str], ...]  # per object it names, the slugs of the teams that own it

    def owned_by(self, team: str) -> bool:
        """Names objects, all of them the team's."""
        return bool(self.owners) and all(team in teams for teams in self.owners)

    @property
    def foreign(self) -> bool:
        """Names an object the outsider's team (Search) does not own."""
        return any("search" not in teams for teams in self.owners)


def _options(route: Route, param: str, kwargs: dict[str, str], light: bool) -> list[tuple[str, Model | None]]:
    """The values tried for one parameter, each with the object it names (None: none, or not an id)."""
    if param in PLAIN_PARAMS:
        return [(PLAIN_PARAMS[param](route), None)]
    spec, attribute = _param_spec(route, param)
    if callable(spec) and not isinstance(spec, type):
        spec = spec(kwargs)
    if isinstance(spec, tuple):
        return [(value, None) for value in (spec[:1] if light else spec)]
    objects = list(spec._default_manager.all()[:1 if light else MAX_OBJECTS])
    missing = [MISSING_ID] + ([] if light else [HUGE_ID]) if attribute == "pk" else [MISSING_SLUG]
    return [(str(getattr(obj, attribute)), obj) for obj in objects] + [(value, None) for value in missing]


def _targets(route: Route) -> Iterator[Target]:
    """The route with its parameters filled: each choice it spells out, each object of the kind it names, and
    ids that name nothing."""
    light = route.name in NOT_GET or route.admin or "format" in route.params

    def fill(kwargs: dict[str, str], params: list[str], named: tuple[Model, ...]) -> Iterator[Target]:
        if not params:
            path = re.sub(r"\{(\w+)\}", lambda hole: kwargs[hole.group(1)], route.template)
            missing = bool({MISSING_ID, HUGE_ID, MISSING_SLUG} & set(kwargs.values()))
            yield Target(route, path, missing, tuple(_teams(obj) for obj in named))
            return
        for value, obj in _options(route, params[0], kwargs, light):
            yield from fill(kwargs | {params[0]: value}, params[1:], named + ((obj,) if obj is not None else ()))

    for chosen in itertools.product(*([(name, value) for value in values] for name, values in route.choices.items())):
        yield from fill(dict(chosen), list(route.params), ())


# --- the crawl -------------------------------------------------------------------------------------------

PERSONAS = ("anonymous", "outsider", "viewer", "operator", "admin", "superuser")
ADMIN_PERSONAS = ("anonymous", "superuser")  # the others are no staff: the admin sends them to its own login page
PLAIN, HTMX, BROWSER = "plain", "htmx", "browser"
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # what Firefox asks for
REQUEST_LIMIT_S = 10  # nothing streams today; an answer that never ends would fail here instead of hanging the suite
# What ML Platform's objects and the team itself are called: the outsider must read neither anywhere, except the
# team in a cluster's forms, which offer every team to share the cluster with (its `shared_with`).
OBJECT_MARKERS, TEAM_MARKERS = (ML_CLUSTER, "chat-8b"), ("ML Platform", "ml-platform")
SHARING_FORMS = ("/cluster/", "/api/v1/clusters/")


@dataclasses.dataclass(frozen=True)
class Answer:
    target: Target
    persona: str
    asked: str  # how: a plain GET, as htmx asks for a fragment, or as a browser asks the API (its HTML pages)
    status: int
    redirect: str  # Location, or htmx's HX-Redirect
    leak: str  # a marker of ML Platform's objects in what the outsider was shown
    error: str  # the exception the view raised, if any
    source: str = ""  # for a link followed: the page that showed it

    def __str__(self) -> str:
        how = self.persona + (f" ({self.asked})" if self.asked != PLAIN else "")
        where = f" → {self.redirect}" if self.redirect else ""
        found = f" (a link on {self.source})" if self.source else ""
        return f"{how} GET {self.target.path} [{self.target.route.name}]{found}: {self.status}{where}{self.error}"


@contextmanager
def _limited_and_recorded() -> Iterator[list[str]]:
    """Each request answers within REQUEST_LIMIT_S; the exceptions views raise are kept for the failure messages."""
    errors: list[str] = []

    def record(sender: object, **kwargs: object) -> None:
        errors.append(traceback.format_exc(limit=-3))

    def too_slow(signum: int, frame: object) -> None:
        raise TimeoutError(f"no answer within {REQUEST_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    got_request_exception.connect(record, weak=False)
    try:
        yield errors
    finally:
        got_request_exception.disconnect(record)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


LINK = re.compile(r'\b(href|hx-get)="(/[^/"#][^"#]*)')


def _links(response: HttpResponse) -> set[tuple[str, str]]:
    """The site's own addresses a page links to or polls: (address, how it is asked for)."""
    if response.status_code != 200 or not response.get("Content-Type", "").startswith("text/html"):
        return set()
    body = response.content.decode(errors="replace")
    return {(html.unescape(address), HTMX if kind == "hx-get" else PLAIN) for kind, address in LINK.findall(body)
            if not address.startswith(settings.STATIC_URL)}


def _get(client: Client, target: Target, persona: str, asked: str, errors: list[str],
         source: str = "") -> tuple[Answer, HttpResponse]:
    headers = {PLAIN: {}, BROWSER: {"HTTP_ACCEPT": BROWSER_ACCEPT},
               HTMX: {"HTTP_HX_REQUEST": "true", "HTTP_HX_CURRENT_URL": f"http://testserver{source or target.path}"}}
    errors.clear()
    with transaction.atomic():  # what a GET writes is undone: every persona meets the same world
        signal.setitimer(signal.ITIMER_REAL, REQUEST_LIMIT_S)
        try:
            response = client.get(target.path, **headers[asked])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        transaction.set_rollback(True)
    leak = ""
    if persona == "outsider" and response.status_code == 200:
        body = b"".join(response.streaming_content) if response.streaming else response.content
        markers = OBJECT_MARKERS + (() if target.path.startswith(SHARING_FORMS) else TEAM_MARKERS)
        leak = next((marker for marker in markers if marker in body.decode(errors="replace")), "")
    error = f"\n    {errors[-1].strip().splitlines()[-1]}" if errors else ""
    answer = Answer(target, persona, asked, response.status_code,
                    response.get("HX-Redirect", "") or response.get("Location", ""), leak, error, source)
    return answer, response


def _ways(route: Route, persona: str) -> tuple[str, ...]:
    """How a route is asked for: pages also by htmx; the API also by a browser (DRF's HTML pages, with their
    forms), as the operator, who is offered the most, and the outsider, who must be offered nothing of others'."""
    if route.admin:
        return (PLAIN,)
    if route.api:
        return (PLAIN, BROWSER) if persona in ("operator", "outsider") else (PLAIN,)
    return (PLAIN, HTMX)


def crawl(users: dict[str, User | None]) -> list[Answer]:
    """Every route filled every way, as every persona (pages also as htmx asks for them, the API also as a browser
    does); then every link and poll those pages showed a signed-in persona, as that persona."""
    clients = {}
    for persona in PERSONAS:
        clients[persona] = Client(raise_request_exception=False)
        if users[persona] is not None:
            clients[persona].force_login(users[persona])
    answers, links = {}, {}
    with _limited_and_recorded() as errors:
        for route in _routes():
            for target in _targets(route):
                for persona in ADMIN_PERSONAS if route.admin else PERSONAS:
                    for asked in _ways(route, persona):
                        answer, response = _get(clients[persona], target, persona, asked, errors)
                        answers[persona, target.path, asked] = answer
                        if persona != "anonymous" and not (route.admin or route.api):  # their links are Django's, DRF's
                            for link in _links(response):
                                links.setdefault((persona, *link), target.path)
        followed = []
        for (persona, address, asked), source in sorted(links.items()):
            if (persona, address, asked) in answers:  # asked for already: the same answer
                followed.append(dataclasses.replace(answers[persona, address, asked], source=source))
                continue
            link = Target(Route("a link", address, {}, (), None), address, missing=False, owners=())
            followed.append(_get(clients[persona], link, persona, asked, errors, source)[0])
    return [*answers.values(), *followed]


@pytest.fixture(scope="module")
def answers(django_db_setup: None, django_db_blocker) -> list[Answer]:  # noqa: ANN001
    """The world built and crawled once, in a transaction rolled back at the end."""
    with django_db_blocker.unblock(), transaction.atomic():
        crawled = crawl(build_world())
        transaction.set_rollback(True)
    return crawled


def _crawled(answers: list[Answer]) -> list[Answer]:
    """The answers to the routes themselves (not to the links followed)."""
    return [answer for answer in answers if not answer.source]


def _failures(found: list[Answer], what: str) -> str:
    listed = "\n".join(str(answer) for answer in found[:40])
    more = f"\n... and {len(found) - 40} more" if len(found) > 40 else ""
    return f"{len(found)} {what}:\n{listed}{more}"


# --- what every answer must be ----------------------------------------------------------------------


def test_no_page_or_api_get_answers_a_server_error(answers: list[Answer]) -> None:
    broken = [answer for answer in answers if answer.status >= 500]
    assert not broken, _failures(broken, "server errors")


# Who may GET these without a login, and what they hear.
PUBLIC = {"login": 200, "healthz": 200, "livez": 200, "/favicon.ico": 301, "metrics": 401, "logout": 405, "admin:login": 200,
          "admin:logout": 302, "incidents:slack-interactions": 405, "/api/no-such-page/": 404}


def _sent_to_login(answer: Answer) -> bool:
    login = "/admin/login/" if answer.target.route.admin else "/login/"
    if answer.asked == HTMX:  # htmx is sent to the login page as a whole page (controlplane.middleware)
        return answer.status == 204 and answer.redirect.startswith(login + "?next=")
    return answer.status == 302 and answer.redirect.startswith(login + "?next=")


def test_an_anonymous_visitor_is_sent_to_the_login_page_or_refused_by_the_api(answers: list[Answer]) -> None:
    wrong = []
    for answer in (answer for answer in _crawled(answers) if answer.persona == "anonymous"):
        route = answer.target.route
        if route.name in PUBLIC:
            expected = answer.status == PUBLIC[route.name]
        elif route.api:
            expected = answer.status in (401, 403)
        else:
            expected = _sent_to_login(answer)
        if not expected:
            wrong.append(answer)
    assert not wrong, _failures(wrong, "answers to an anonymous visitor that are neither the login page nor a refusal")


def test_the_outsider_never_sees_another_teams_object(answers: list[Answer]) -> None:
    seen = [answer for answer in _crawled(answers) if answer.persona == "outsider" and answer.target.foreign
            and not answer.target.missing and answer.status not in (403, 404, 405)]
    leaked = [answer for answer in answers if answer.leak]
    assert not seen, _failures(seen, "answers that show the outsider an object of another team")
    assert not leaked, _failures(leaked, "pages that name ML Platform's objects to the outsider")


# What a viewer may not open of their own team's objects: the forms that change them (admins; playbooks: operators),
# and the files of a report that is not done.
VIEWER_REFUSED = {"object-edit": {403}, "object-delete": {403}, "incidents:playbook-edit": {403},
                  "warm-pool-report-file": {200, 404}, "api:warmpoolreport-csv": {200, 409}}


def test_a_viewer_reads_every_page_of_their_teams_objects_whatever_their_state(answers: list[Answer]) -> None:
    wrong = [answer for answer in _crawled(answers) if answer.persona == "viewer"
             and answer.target.owned_by("ml-platform") and not answer.target.missing
             and answer.target.route.name not in NOT_GET
             and answer.status not in VIEWER_REFUSED.get(answer.target.route.name, {200})]
    assert not wrong, _failures(wrong, "pages of the viewer's own team's objects they could not read")


def test_an_id_that_names_nothing_is_a_404(answers: list[Answer]) -> None:
    """Django's admin is left out: it sends a missing object to its index with a message, by design."""
    wrong = [answer for answer in _crawled(answers) if answer.target.missing and answer.persona != "anonymous"
             and not answer.target.route.admin and answer.target.route.name not in NOT_GET and answer.status != 404]
    assert not wrong, _failures(wrong, "answers to an id that names nothing that are not a 404")


def test_what_cannot_be_a_get_answers_405(answers: list[Answer]) -> None:
    wrong = [answer for answer in _crawled(answers) if answer.target.route.name in NOT_GET
             and answer.persona != "anonymous" and answer.status != 405]
    assert not wrong, _failures(wrong, "GETs of a route that cannot be a GET that are not a 405")


def test_every_link_and_poll_a_page_shows_answers(answers: list[Answer]) -> None:
    """What a page offers a signed-in person to follow (href) or polls (hx-get) is there for them: no 4xx."""
    broken = [answer for answer in answers if answer.source and answer.status >= 400]
    assert not broken, _failures(broken, "links or polls that fail the person shown them")


def test_each_url_name_leads_to_its_own_route(answers: list[Answer]) -> None:
    """{% url %} and reverse() give back the route a name was given to: two routes under one name would send a
    page's links and polls to the other one."""
    one_each = {answer.target.route.template: answer.target for answer in _crawled(answers)}
    named = [target for target in one_each.values() if not target.route.name.startswith("/")]
    wrong = [f"{target.route.name}: {target.path} reverses to {address}" for target in named
             if resolve(address := reverse(target.route.name, kwargs=resolve(target.path).kwargs)).route
             != resolve(target.path).route]
    assert not wrong, "\n".join(wrong)


def test_the_crawl_reaches_every_route(answers: list[Answer]) -> None:
    """Each route that can be a GET answered 200 to someone: a crawl of refusals alone would prove nothing.
    Django's admin is only crawled for server errors."""
    statuses: dict[str, set[int]] = {}
    routes = {answer.target.route.template: answer.target.route for answer in _crawled(answers)}
    for answer in _crawled(answers):
        statuses.setdefault(answer.target.route.template, set()).add(answer.status)
    unread = [f"{template} {sorted(seen)}" for template, seen in statuses.items() if 200 not in seen
              and not routes[template].admin and routes[template].name not in NOT_GET | PUBLIC.keys()]
    assert not unread, "routes no one could read: " + ", ".join(unread)
