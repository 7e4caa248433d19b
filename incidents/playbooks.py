"""Playbooks: a team's prepared steps, run inside an incident with each step's outcome recorded.

A step is a checklist item (a person ticks or skips it) or an action. Actions are a registry
(`ACTIONS`): each kind parses its parameters once, starts through the service that owns the change
(a pre-scale is a proposal from scaling/services.py, approved like any other; a shift is
scaling/traffic.py's), and reads its outcome back from that object. Kinds whose service does not
exist yet are registered as unavailable, so a playbook cannot hold a step nobody can run.

Every change to a run step locks the step row, re-checks its state, and writes the outcome and an
audit record in one transaction. Re-running a step that already made its proposal or shift answers
with that object (and the services' idempotency keys make a second one impossible even so).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel, Role
from controlplane.errors import ServiceError
from controlplane.models import Pool, Team
from incidents import rules
from incidents.choices import (
    ACTIVE_INCIDENT_STATES,
    FINISHED_RUN_STEP_STATES,
    STARTABLE_RUN_STEP_STATES,
    AlertTier,
    NotificationKind,
    NotificationState,
    PlaybookStepKind,
    RunStepState,
)
from incidents.models import Channel, Incident, Playbook, PlaybookRun, PlaybookRunStep, PlaybookStep
from scaling import services as scaling, traffic
from scaling.choices import SHIFT_TERMINAL_PHASES, ProposalKind, ProposalState, ShiftPhase
from scaling.models import PlannerMemory, Proposal, ProposalEvent, TrafficShift, TrafficShiftEvent

MAX_STEPS = 30
TITLE_MAX_CHARS = 200


class PlaybookError(ServiceError):
    """Base of the errors a caller turns into an answer (400, 403, 409)."""


class InvalidPlaybook(PlaybookError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def payload(self) -> dict[str, Any]:
        return {self.field: [str(self)]}


class PlaybookForbidden(PlaybookError):
    status_code = 403


class StepConflict(PlaybookError):
    status_code = 409

    def __init__(self, step: PlaybookRunStep, message: str) -> None:
        super().__init__(message)
        self.step = step

    def payload(self) -> dict[str, Any]:
        return {"detail": str(self), "state": self.step.state, "position": self.step.position}


@dataclass(frozen=True)
class StepSpec:
    """A step as written in a form or the API, before it is stored."""

    title: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)


# --- the action registry --------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    state: str
    reason: str


@dataclass(frozen=True)
class Action:
    """What an executable step kind does. `parse` validates params (raising InvalidPlaybook naming the
    field), `start` makes the change through its service and `outcome` reads where it stands."""

    kind: str
    available: bool
    parse: Callable[[dict[str, Any], Team], dict[str, Any]]
    start: Callable[[PlaybookRunStep, Incident, core.Actor, datetime], None] | None = None
    outcome: Callable[[PlaybookRunStep], Outcome | None] | None = None
    unavailable_reason: str = ""


ACTIONS: dict[str, Action] = {}


def register(action: Action) -> Action:
    ACTIONS[action.kind] = action
    return action


def _no_params(params: dict[str, Any], team: Team) -> dict[str, Any]:
    return {}


def _key(step: PlaybookRunStep) -> str:
    """The services' idempotency key for one attempt of a run step: running it again while it stands finds
    the first object; running it again after it failed (a rejected proposal, a rolled-back shift) is a
    new attempt, with a new object."""
    attempt = int(step.data.get("attempt", 1)) if isinstance(step.data, dict) else 1
    return f"playbook-run:{step.run_id}:step:{step.position}" + (f":attempt:{attempt}" if attempt > 1 else "")


# Pre-scale: warm pool + 50 %, a proposal like the planner's.

def _parse_prescale(params: dict[str, Any], team: Team) -> dict[str, Any]:
    buffer = params.get("buffer", 0.5)
    if isinstance(buffer, bool) or not isinstance(buffer, (int, float)) or not 0 < buffer <= 3:
        raise InvalidPlaybook("params.buffer", f"buffer is the fraction added to the warm pool, above 0 and at most 3; got {buffer!r}.")
    return {"buffer": float(buffer)}


def prescale_target(pool: Pool, buffer: float) -> tuple[int, int]:
    """(current, target): the warm pool plus the buffer. The warm pool is the largest of what runs now, the
    planner's warm floor, and the replicas the request rate the loop last read needs at the learned capacity."""
    current = scaling.current_replicas(pool)
    memory = PlannerMemory.objects.filter(pool=pool).only("last_decision", "last_signals").first()
    decision, signals = (memory.last_decision or {}, memory.last_signals or {}) if memory else ({}, {})
    warm_floor = next((term.get("replicas", 0) for term in decision.get("terms", []) if term.get("name") == "WarmFloor"), 0)
    capacity = decision.get("capacity_per_replica_rps") or pool.replica_capacity_rps
    rate = signals.get("request_rate_rps")
    needed = math.ceil(rate / capacity - 1e-9) if isinstance(rate, (int, float)) and capacity else 0
    warm = max(pool.min_replicas, current, warm_floor, needed)
    return current, min(pool.max_replicas, math.ceil(warm * (1 + buffer) - 1e-9))


def _no_pool(incident: Incident) -> str:
    return f"pool {incident.pool_name} has been deleted" if incident.pool_deleted else "this is a system incident"


def _start_prescale(step: PlaybookRunStep, incident: Incident, actor: core.Actor, now: datetime) -> None:
    if incident.pool is None:
        raise InvalidPlaybook("step", f"A pre-scale needs the incident's pool; {_no_pool(incident)}.")
    current, target = prescale_target(incident.pool, step.params.get("buffer", 0.5))
    if target <= current:
        raise InvalidPlaybook("step", f"{incident.pool} already runs {current} replicas, its maximum "
                                      f"({incident.pool.max_replicas}) or the warm pool plus the buffer.")
    # As the control loop does: a pre-scale already in flight that asks for at least as much answers this step.
    if (covering := scaling.covering_prescale(incident.pool, target)) is not None:
        step.proposal = covering
        return
    reasons = [{"code": "playbook", "detail": f"playbook {step.run.playbook_name}, step {step.position}: {step.title}"}]
    step.proposal = scaling.propose(incident.pool, target, ProposalKind.PRESCALE, actor, current=current,
                                    reasons=reasons, idempotency_key=_key(step), now=now)


PROPOSAL_OUTCOMES = {
    ProposalState.PENDING: RunStepState.WAITING_APPROVAL, ProposalState.APPROVED: RunStepState.RUNNING,
    ProposalState.EXECUTING: RunStepState.RUNNING, ProposalState.SUCCEEDED: RunStepState.DONE,
}


def _prescale_outcome(step: PlaybookRunStep) -> Outcome | None:
    proposal = step.proposal
    if proposal is None:
        return None
    state = PROPOSAL_OUTCOMES.get(proposal.state, RunStepState.FAILED)
    words = {RunStepState.WAITING_APPROVAL: f"waiting for approval #{proposal.pk}",
             RunStepState.RUNNING: f"proposal #{proposal.pk} {proposal.state}",
             RunStepState.DONE: f"proposal #{proposal.pk}: {proposal.target_replicas} replicas ready"}
    if state in words:
        return Outcome(state, words[state])
    # Why it ended: its last error, the person's comment, or the reason its last move gave (superseded by what).
    moved = _last_move(proposal)
    why = proposal.last_error or proposal.decision_comment or (moved.comment if moved else "")
    return Outcome(state, f"proposal #{proposal.pk} {proposal.state}" + (f": {why}" if why else ""))


register(Action(PlaybookStepKind.PRESCALE, True, _parse_prescale, _start_prescale, _prescale_outcome))


# Shift: move the incident pool's traffic on its route to another pool of the team.

def _parse_shift(params: dict[str, Any], team: Team) -> dict[str, Any]:
    to_pool = params.get("to_pool")
    if not isinstance(to_pool, str) or not to_pool.strip():
        raise InvalidPlaybook("params.to_pool", "A shift step names the receiving pool (to_pool, a pool name of the team).")
    if not Pool.objects.filter(team=team, name=to_pool.strip()).exists():
        raise InvalidPlaybook("params.to_pool", f"Team {team} has no pool named {to_pool.strip()!r}.")
    parsed: dict[str, Any] = {"to_pool": to_pool.strip()}
    if "steps" in params:
        steps = params["steps"]
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and not isinstance(s, bool) and 0 < s <= 100 for s in steps):
            raise InvalidPlaybook("params.steps", f"steps are the receiving share in percent, e.g. [80, 95, 100]; got {steps!r}.")
        parsed["steps"] = steps
    if "hold_s" in params:
        hold = params["hold_s"]
        if isinstance(hold, bool) or not isinstance(hold, (int, float)) or not 0 < hold <= 3600:
            raise InvalidPlaybook("params.hold_s", f"hold_s is the seconds each step is held, above 0 and at most 3600; got {hold!r}.")
        parsed["hold_s"] = float(hold)
    return parsed


def _start_shift(step: PlaybookRunStep, incident: Incident, actor: core.Actor, now: datetime) -> None:
    if incident.pool is None:
        raise InvalidPlaybook("step", f"A shift needs the incident's pool; {_no_pool(incident)}.")
    to_pool = Pool.objects.select_related("cluster", "team").filter(
        team=incident.team, cluster=incident.cluster, name=step.params["to_pool"]).first()
    if to_pool is None:
        raise InvalidPlaybook("params.to_pool", f"No pool {step.params['to_pool']!r} in {incident.cluster.name}.")
    try:
        options = {"hold_s": step.params["hold_s"]} if "hold_s" in step.params else {}
        step.shift = traffic.start(incident.pool, to_pool, actor, steps=step.params.get("steps"),
                                   idempotency_key=_key(step), **options)
    except traffic.ShiftError as exc:
        # The shift service's own refusal (a field, a conflict, the route unreadable): the step fails with it.
        raise InvalidPlaybook(getattr(exc, "field", "") or "step", str(exc)) from None


def _shift_outcome(step: PlaybookRunStep) -> Outcome | None:
    shift = step.shift
    if shift is None:
        return None
    if shift.phase == ShiftPhase.COMPLETED:
        return Outcome(RunStepState.DONE, f"shift #{shift.pk} completed: {shift.share_percent} % on {shift.to_backend}")
    if shift.phase in SHIFT_TERMINAL_PHASES:
        return Outcome(RunStepState.FAILED, f"shift #{shift.pk} {shift.phase}: {shift.last_error or shift.last_check.get('detail', '')}".rstrip(": "))
    if shift.phase == ShiftPhase.WAITING_APPROVAL:
        return Outcome(RunStepState.WAITING_APPROVAL, f"shift #{shift.pk} waits for approval of step {shift.step + 1}")
    return Outcome(RunStepState.RUNNING, f"shift #{shift.pk} {shift.phase}, step {shift.step} of {len(shift.steps)}")


register(Action(PlaybookStepKind.SHIFT, True, _parse_shift, _start_shift, _shift_outcome))


# Notify: a message to one of the team's channels, through the outbox like every notification.

def _parse_notify(params: dict[str, Any], team: Team) -> dict[str, Any]:
    name, text = params.get("channel"), params.get("text", "")
    if not isinstance(name, str) or not Channel.objects.filter(team=team, name=name).exists():
        raise InvalidPlaybook("params.channel", f"Team {team} has no channel named {name!r}.")
    if not isinstance(text, str) or len(text) > 2000:
        raise InvalidPlaybook("params.text", "text is the message (at most 2000 characters).")
    return {"channel": name, "text": text}


def _start_notify(step: PlaybookRunStep, incident: Incident, actor: core.Actor, now: datetime) -> None:
    from incidents.services import enqueue  # the outbox; imported here, it imports the transports

    channel = Channel.objects.filter(team=incident.team, name=step.params["channel"]).first()
    if channel is None:
        raise InvalidPlaybook("params.channel", f"The channel {step.params['channel']!r} no longer exists.")
    text = f"[{incident.severity}] {incident.title} (incident #{incident.pk}): {step.params.get('text') or step.title}"
    if not channel.enabled and not incident.is_drill:
        # The outbox sends nothing to a channel that switched itself off: "queued" would be a promise it breaks.
        raise InvalidPlaybook("params.channel", f"Not sent to {channel.name}: the channel is switched off "
                                                f"({channel.disabled_reason or 'no reason recorded'}); an admin "
                                                "switches it back on at /integrations/channels/.")
    if incident.is_drill:
        # A drill never pages anyone: the step says what it would have sent.
        step.data = {"channel": channel.name, "text": text, "drill": True}
        return
    notification = enqueue(channel, None, NotificationKind.MESSAGE, now, text=text)
    if notification is not None and notification.state == NotificationState.SKIPPED:
        raise InvalidPlaybook("params.channel", f"Not sent to {channel.name}: {notification.last_error}.")
    step.data = {"channel": channel.name, "text": text, "notification_id": notification.pk if notification else None}


def _notify_outcome(step: PlaybookRunStep) -> Outcome | None:
    if "channel" not in step.data:
        return None
    if step.data.get("drill"):
        return Outcome(RunStepState.DONE, f"drill: not sent to {step.data['channel']}")
    return Outcome(RunStepState.DONE, f"message queued for {step.data['channel']}")


register(Action(PlaybookStepKind.NOTIFY, True, _parse_notify, _start_notify, _notify_outcome))
register(Action(PlaybookStepKind.CHECKLIST, True, _no_params))
for _kind in (PlaybookStepKind.FALLBACK, PlaybookStepKind.BREAKER):
    register(Action(_kind, False, _no_params, unavailable_reason="not yet available (issue #13 items 3 and 4)"))


def step_kinds() -> list[dict[str, Any]]:
    """Every kind with whether it can be used now: what the form and the API list."""
    return [{"kind": kind.value, "label": kind.label, "available": ACTIONS[kind].available,
             "unavailable_reason": ACTIONS[kind].unavailable_reason} for kind in PlaybookStepKind]


# --- writing playbooks ----------------------------------------------------------------------------


def _check_may_edit(actor: core.Actor, team: Team) -> None:
    if actor.user is None or not core.has_role(actor.user, team, Role.OPERATOR):
        raise PlaybookForbidden(f"Editing playbooks needs the operator role in team {team}.")


def clean(team: Team, name: str, alert_rules: list[Any], severities: list[Any], steps: list[StepSpec]) -> list[StepSpec]:
    """Validate a whole playbook before anything is written; returns the steps with parsed params."""
    if not (name or "").strip() or len(name) > 100:
        raise InvalidPlaybook("name", "A playbook needs a name of at most 100 characters.")
    unknown_rules = [rule for rule in alert_rules if not isinstance(rule, str) or rule not in rules.RULES]
    if unknown_rules:
        raise InvalidPlaybook("alert_rules", f"Unknown alert rules: {unknown_rules}; see GET /api/v1/alerts/ for rule keys.")
    tiers = {tier.value for tier in AlertTier}
    if bad := [tier for tier in severities if tier not in tiers]:
        raise InvalidPlaybook("severities", f"Severities are {sorted(tiers)}; got {bad}.")
    if not steps:
        raise InvalidPlaybook("steps", "A playbook needs at least one step.")
    if len(steps) > MAX_STEPS:
        raise InvalidPlaybook("steps", f"At most {MAX_STEPS} steps; got {len(steps)}.")
    cleaned = []
    for number, step in enumerate(steps, start=1):
        if step.kind not in ACTIONS:
            raise InvalidPlaybook(f"steps[{number}].kind", f"Unknown step kind {step.kind!r}; kinds: {sorted(ACTIONS)}.")
        action = ACTIONS[step.kind]
        if not action.available:
            raise InvalidPlaybook(f"steps[{number}].kind", f"{step.kind}: {action.unavailable_reason}.")
        title = (step.title or "").strip()
        if not title or len(title) > TITLE_MAX_CHARS:
            raise InvalidPlaybook(f"steps[{number}].title", f"Each step needs a title of at most {TITLE_MAX_CHARS} characters.")
        if not isinstance(step.params, dict):
            raise InvalidPlaybook(f"steps[{number}].params", "params is an object.")
        try:
            params = action.parse(step.params, team)
        except InvalidPlaybook as exc:
            raise InvalidPlaybook(f"steps[{number}].{exc.field}", str(exc)) from None
        cleaned.append(StepSpec(title, step.kind, params))
    return cleaned


def save(actor: core.Actor, team: Team, name: str, *, description: str = "", alert_rules: list[Any] | None = None,
         severities: list[Any] | None = None, steps: list[StepSpec], playbook: Playbook | None = None) -> Playbook:
    """Create a playbook, or replace an existing one's fields and steps (runs keep the steps they copied)."""
    _check_may_edit(actor, playbook.team if playbook else team)
    if playbook is not None and playbook.team_id != team.pk:
        raise InvalidPlaybook("team", "A playbook stays in its team.")
    alert_rules, severities = list(alert_rules or []), list(severities or [])
    cleaned = clean(team, name, alert_rules, severities, steps)
    try:
        with transaction.atomic():
            before = core.snapshot(playbook) if playbook else None
            if playbook is None:
                playbook = Playbook(team=team)
            else:
                playbook = Playbook.objects.select_for_update().get(pk=playbook.pk)
            playbook.name, playbook.description = name.strip(), description
            playbook.alert_rules, playbook.severities = alert_rules, severities
            playbook.save()
            playbook.steps.all().delete()
            PlaybookStep.objects.bulk_create([PlaybookStep(playbook=playbook, position=number, title=step.title,
                                                           kind=step.kind, params=step.params)
                                              for number, step in enumerate(cleaned, start=1)])
            core.record(actor, "update" if before else "create", playbook, before=before,
                        after={"name": playbook.name, "steps": [s.kind for s in cleaned]}, team=team)
    except IntegrityError:
        raise InvalidPlaybook("name", f"Team {team} already has a playbook named {name.strip()!r}.") from None
    return playbook


SURGE_PLAYBOOK = "surge"
SURGE_STEPS = (
    StepSpec("Acknowledge the incident and take command", PlaybookStepKind.CHECKLIST),
    StepSpec("Pre-scale to warm pool + 50 %", PlaybookStepKind.PRESCALE, {"buffer": 0.5}),
    StepSpec("Check that the queue drains and TTFT p95 is back under the SLO, then mark it mitigated",
             PlaybookStepKind.CHECKLIST),
)


def seed_surge_playbook(team: Team, actor: core.Actor) -> Playbook:
    """The default surge playbook, attached to the P1 latency and queue rules (idempotent: `seed_demo`)."""
    with transaction.atomic():
        playbook, created = Playbook.objects.get_or_create(team=team, name=SURGE_PLAYBOOK, defaults={
            "description": "A surge: take command, add capacity ahead of the queue, confirm it drained.",
            "alert_rules": [rules.TTFT_P95.key, rules.QUEUE_GROWTH.key]})
        if created:
            PlaybookStep.objects.bulk_create([PlaybookStep(playbook=playbook, position=number, title=step.title,
                                                           kind=step.kind, params=step.params)
                                              for number, step in enumerate(SURGE_STEPS, start=1)])
            core.record(actor, "create", playbook, after={"name": playbook.name}, team=team)
    return playbook


def delete(actor: core.Actor, playbook: Playbook) -> None:
    _check_may_edit(actor, playbook.team)
    with transaction.atomic():
        core.record(actor, "delete", playbook, before=core.snapshot(playbook), team=playbook.team)
        playbook.delete()


def offered_for(incident: Incident) -> list[Playbook]:
    """The team's playbooks attached to one of the incident's alert rules or to its severity."""
    fired = set(incident.alerts.values_list("rule", flat=True))
    return [playbook for playbook in Playbook.objects.filter(team=incident.team).prefetch_related("steps")
            if fired & set(playbook.alert_rules) or incident.severity in playbook.severities]


# --- running them in an incident ------------------------------------------------------------------


def _check_may_run(incident: Incident, actor: core.Actor) -> None:
    """Operators of the incident's team, in a cluster the team may act in (as for approvals)."""
    if actor.channel == ActorChannel.AUTO:
        return
    try:
        core.check_may_change(actor.user, incident.team, incident.cluster, Role.OPERATOR)
    except ServiceError as exc:
        raise PlaybookForbidden(str(exc)) from None


def start_run(incident: Incident, playbook: Playbook, actor: core.Actor, now: datetime | None = None) -> PlaybookRun:
    """Start `playbook` in `incident` (its steps copied, all pending). Starting it again answers the first run."""
    now = now or timezone.now()
    _check_may_run(incident, actor)
    if playbook.team_id != incident.team_id:
        raise InvalidPlaybook("playbook", f"Playbook {playbook} belongs to another team than incident #{incident.pk}.")
    if existing := PlaybookRun.objects.filter(incident=incident, playbook=playbook).first():
        return existing
    if incident.state not in ACTIVE_INCIDENT_STATES:
        raise InvalidPlaybook("incident", f"Incident #{incident.pk} is {incident.state}; playbooks run in active incidents.")
    try:
        with transaction.atomic():
            run = PlaybookRun.objects.create(incident=incident, playbook=playbook, playbook_name=playbook.name,
                                             started_by=actor.user, started_channel=actor.channel, started_at=now)
            PlaybookRunStep.objects.bulk_create([
                PlaybookRunStep(run=run, position=step.position, title=step.title, kind=step.kind, params=step.params)
                for step in playbook.steps.all()])
            core.record(actor, "start_playbook", run, after={"playbook": playbook.name, "incident": incident.pk},
                        team=incident.team)
    except IntegrityError:  # a concurrent start won
        return PlaybookRun.objects.get(incident=incident, playbook=playbook)
    return run


def _locked_step(run_id: int, position: int) -> PlaybookRunStep:
    step = PlaybookRunStep.objects.select_for_update(of=("self",)).select_related(
        "run__incident__team", "run__incident__cluster", "run__incident__pool__cluster", "run__incident__pool__team",
        "proposal", "shift").filter(run_id=run_id, position=position).first()
    if step is None:
        raise InvalidPlaybook("position", f"Run #{run_id} has no step {position}.")
    return step


def _settle(step: PlaybookRunStep, state: str, reason: str, actor: core.Actor, now: datetime) -> None:
    before = {"state": step.state, "reason": step.reason}
    step.state, step.reason = state, reason[:2000]
    step.actor_name, step.channel, step.updated_at = actor.name, actor.channel, now
    step.save()
    core.record(actor, f"playbook-step-{state}", step.run, before=before,
                after={"position": step.position, "state": state, "reason": step.reason}, team=step.run.incident.team)


def complete(run_id: int, position: int, actor: core.Actor, now: datetime | None = None) -> PlaybookRunStep:
    """Tick a checklist item. Ticking it twice changes nothing."""
    now = now or timezone.now()
    with transaction.atomic():
        step = _refreshed(_locked_step(run_id, position), now)
        _check_may_run(step.run.incident, actor)
        if step.kind != PlaybookStepKind.CHECKLIST:
            raise StepConflict(step, f"Step {position} is an action ({step.kind}); run it instead.")
        if step.state == RunStepState.DONE:
            return step
        if step.state != RunStepState.PENDING:
            raise StepConflict(step, f"Step {position} is {step.state}.")
        _settle(step, RunStepState.DONE, "", actor, now)
    return step


def skip(run_id: int, position: int, actor: core.Actor, reason: str = "", now: datetime | None = None) -> PlaybookRunStep:
    """Skip a step that has not started (or failed), with the reason."""
    now = now or timezone.now()
    with transaction.atomic():
        step = _refreshed(_locked_step(run_id, position), now)  # a rejected proposal fails it: skippable now
        _check_may_run(step.run.incident, actor)
        if step.state == RunStepState.SKIPPED:
            return step
        if step.state not in STARTABLE_RUN_STEP_STATES:
            raise StepConflict(step, f"Step {position} is {step.state}; only a pending or failed step is skipped.")
        # NUL characters dropped as in incident notes: PostgreSQL's text cannot hold them.
        _settle(step, RunStepState.SKIPPED, (reason or "").replace("\x00", "").strip()[:2000], actor, now)
    return step


def run_step(run_id: int, position: int, actor: core.Actor, now: datetime | None = None) -> PlaybookRunStep:
    """Run an action step through its service. Running it again while its proposal or shift exists makes
    nothing new; a refusal of the service fails the step with the reason (it may be run again)."""
    now = now or timezone.now()
    with transaction.atomic():
        step = _refreshed(_locked_step(run_id, position), now)  # a rejected proposal fails it: run again now
        incident = step.run.incident
        _check_may_run(incident, actor)
        action = ACTIONS[step.kind]
        if step.kind == PlaybookStepKind.CHECKLIST:
            raise StepConflict(step, f"Step {position} is a checklist item; complete or skip it.")
        if not action.available or action.start is None:
            raise StepConflict(step, f"Step {position} ({step.kind}) is {action.unavailable_reason}.")
        if step.state not in STARTABLE_RUN_STEP_STATES:
            return step  # already running, waiting or finished: answer where it stands
        if incident.state not in ACTIVE_INCIDENT_STATES:
            raise StepConflict(step, f"Incident #{incident.pk} is {incident.state}; its playbook no longer acts.")
        step.proposal, step.shift = None, None
        if step.state == RunStepState.FAILED:
            step.data = {"attempt": int(step.data.get("attempt", 1)) + 1}
        try:
            with transaction.atomic():  # the service's writes and the step's outcome commit together
                action.start(step, incident, actor, now)
                outcome = action.outcome(step) if action.outcome else None  # type: ignore[misc]
                _settle(step, outcome.state if outcome else RunStepState.DONE, outcome.reason if outcome else "", actor, now)
        except (PlaybookError, scaling.ProposalError) as exc:
            step.proposal, step.shift = None, None  # rolled back with the savepoint
            _settle(step, RunStepState.FAILED, str(exc), actor, now)
    return step


def _refreshed(step: PlaybookRunStep, now: datetime) -> PlaybookRunStep:
    """Bring a locked running or waiting step up to date with its proposal or shift. Every change re-checks
    the state this gives, not the one last mirrored: a proposal rejected from Slack fails its step at once."""
    action = ACTIONS[step.kind]
    if step.state in FINISHED_RUN_STEP_STATES or action.outcome is None:
        return step
    if step.proposal_id:
        step.proposal = Proposal.objects.get(pk=step.proposal_id)
    if step.shift_id:
        step.shift = TrafficShift.objects.get(pk=step.shift_id)
    outcome = action.outcome(step)
    if outcome is None or (outcome.state, outcome.reason) == (step.state, step.reason):
        return step
    before = {"state": step.state, "reason": step.reason}
    step.state, step.reason, step.updated_at = outcome.state, outcome.reason[:2000], now
    cause = _cause(step)
    if cause is not None:  # the step moved when, and because, its proposal or shift did: not when it was read
        step.updated_at, step.actor_name, step.channel = cause.at, cause.actor_name, cause.channel
    step.save(update_fields=["state", "reason", "updated_at", "actor_name", "channel"])
    if step.state != before["state"]:
        mirrors = f"proposal #{step.proposal_id}" if step.proposal_id else f"shift #{step.shift_id}"
        core.record(core.Actor(None, ActorChannel.AUTO), f"playbook-step-{step.state}", step.run, before=before, team=step.run.incident.team, after={
            "position": step.position, "state": step.state, "reason": step.reason, "mirrors": mirrors,
            "by": cause.actor_name if cause else "", "channel": cause.channel if cause else ""})
    return step


def _last_move(changed: Proposal | TrafficShift) -> ProposalEvent | TrafficShiftEvent | None:
    """The event that moved a proposal or shift to where it stands (notes, which move nothing, aside)."""
    if isinstance(changed, Proposal):
        events = changed.events.filter(to_state=changed.state).exclude(from_state=F("to_state"))
    else:
        events = changed.events.filter(to_phase=changed.phase).exclude(from_phase=F("to_phase"))
    return events.order_by("-pk").first()


def _cause(step: PlaybookRunStep) -> ProposalEvent | TrafficShiftEvent | None:
    changed = step.proposal or step.shift
    return _last_move(changed) if changed is not None else None


def refresh(run: PlaybookRun, now: datetime | None = None) -> PlaybookRun:
    """Update the run's waiting and running steps from their proposals and shifts (on reading: the
    objects own their state, the run mirrors it)."""
    now = now or timezone.now()
    live = [RunStepState.WAITING_APPROVAL, RunStepState.RUNNING]
    for position in run.steps.filter(state__in=live).values_list("position", flat=True):
        with transaction.atomic():
            _refreshed(_locked_step(run.pk, position), now)
    return run


__all__ = ["ACTIONS", "Action", "InvalidPlaybook", "PlaybookError", "PlaybookForbidden", "StepConflict", "StepSpec",
           "complete", "delete", "offered_for", "refresh", "run_step", "save", "skip", "start_run", "step_kinds"]
