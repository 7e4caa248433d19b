"""Traffic shift workflows: start, tick (one step of the state machine), pause, resume, roll back, approve.

Every transition locks the shift row, re-checks the phase, and appends a TrafficShiftEvent and an
audit record in the same transaction. A weight write is made outside the lock, after the intended
step (or the rollback) was committed as the shift's phase: a worker killed before, during or after
the write leaves a row that says which weights to write, and the router's premise makes the re-run
write nothing when the weights are already there. So a restart never skips or repeats a step.
The decisions themselves are pure (scaling/engine/shifting.py); guard signals are those the control
loop stored for the receiving pool at its last tick (PlannerMemory), aged like any signal.
"""
from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import replace
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from controlplane import services as core
from controlplane.choices import Channel, Role
from controlplane.errors import ServiceError
from controlplane.models import Pool
from scaling.choices import SHIFT_ACTIVE_PHASES, SHIFT_TERMINAL_PHASES, ShiftPhase, can_shift
from scaling.drivers.cluster import DriverError
from scaling.drivers.registry import route_router
from scaling.drivers.routing import RoutePremiseChanged, RouteRef, Router, WeightPremise
from scaling.engine import shifting
from scaling.engine.signals import STALE_AFTER_S
from scaling.models import PlannerMemory, PoolStatus, RouteWriteIntent, TrafficShift, TrafficShiftEvent

logger = logging.getLogger(__name__)
AUTO = core.Actor(user=None, channel=Channel.AUTO)


class ShiftError(ServiceError):
    """Base of the errors a caller turns into an answer (400, 403, 409, 503)."""


class InvalidShift(ShiftError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def payload(self) -> dict[str, Any]:
        return {self.field: [str(self)]}


class ShiftForbidden(ShiftError):
    status_code = 403


class ShiftConflict(ShiftError):
    status_code = 409

    def __init__(self, message: str, shift: TrafficShift | None = None, field: str = "") -> None:
        super().__init__(message)
        self.shift, self.field = shift, field

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"detail": str(self)}
        if self.field:
            body[self.field] = [str(self)]
        if self.shift is not None:
            body.update(id=self.shift.pk, phase=self.shift.phase)
        return body


class RouteUnavailable(ShiftError):
    status_code = 503


# --- reading ------------------------------------------------------------------------------------


def spec_of(shift: TrafficShift) -> shifting.ShiftSpec:
    return shifting.ShiftSpec(
        steps=tuple(shift.steps), hold_s=shift.hold_s, max_p95_s=shift.max_p95_s, max_error_rate=shift.max_error_rate,
        failure_threshold=shift.failure_threshold, no_data_deadline_s=shift.no_data_deadline_s,
        gates=frozenset(number - 1 for number in shift.gated_steps),
    )


def _seconds(at: datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


def _at(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, tz=dt_timezone.utc) if seconds is not None else None


def progress_of(shift: TrafficShift) -> shifting.Progress:
    """The row's counters in the engine's terms (its steps count from 0, -1 being the start)."""
    return shifting.Progress(
        step=shift.step - 1, good_step=shift.good_step - 1, step_since_s=_seconds(shift.step_since),
        failed_checks=shift.failed_checks, no_data_since_s=_seconds(shift.no_data_since),
        approved_step=shift.approved_step - 1,
    )


def _store_progress(shift: TrafficShift, progress: shifting.Progress) -> None:
    shift.good_step, shift.failed_checks = progress.good_step + 1, progress.failed_checks
    shift.no_data_since = _at(progress.no_data_since_s)
    if progress.step_since_s != _seconds(shift.step_since):  # a hold the guard could not see is held again
        shift.step_since = _at(progress.step_since_s)


def _last_signals(pool: Pool, now: datetime) -> dict[str, Any]:
    """What the control loop read for `pool` at its last tick, or {} when that is older than a signal may be."""
    memory = PlannerMemory.objects.filter(pool=pool).only("last_signals", "last_decision").first()
    read_at = parse_datetime((memory.last_decision or {}).get("at", "")) if memory else None
    if read_at is None or not 0 <= (now - read_at).total_seconds() <= STALE_AFTER_S:
        return {}
    return memory.last_signals or {}


def guard_reading(shift: TrafficShift, now: datetime) -> shifting.GuardReading:
    """The receiving pool's guard signals and ready replicas, and what the route serves in all.

    Signals are per pool (the loop selects each pool's series by its served model), so the route's
    rate is the two pools' rates added: a shift moves requests between them, it does not change it.
    """
    receiving, giving = _last_signals(shift.to_pool, now), _last_signals(shift.from_pool, now)
    rates = [receiving.get("request_rate_rps"), giving.get("request_rate_rps")]
    status = PoolStatus.objects.filter(pool=shift.to_pool).first()
    ready = status.ready_replicas if status and (now - status.observed_at).total_seconds() <= STALE_AFTER_S else None
    memory = PlannerMemory.objects.filter(pool=shift.to_pool).only("last_decision").first()
    learned = (memory.last_decision or {}).get("capacity_per_replica_rps") if memory else None
    return shifting.GuardReading(
        p95_s=receiving.get("ttft_p95_s"), error_rate=receiving.get("error_rate"), ready_replicas=ready,
        route_rps=sum(rates) if None not in rates else None,  # type: ignore[arg-type]
        replica_capacity_rps=learned or shift.to_pool.replica_capacity_rps, max_replicas=shift.to_pool.max_replicas,
    )


def giving_shift(pool: Pool) -> TrafficShift | None:
    """The active shift that moves traffic away from `pool`: it must keep the capacity to take it back."""
    return TrafficShift.objects.filter(from_pool=pool, phase__in=list(SHIFT_ACTIVE_PHASES)).first()


# --- events and transitions -----------------------------------------------------------------------


def _event(shift: TrafficShift, source: str, actor: core.Actor, comment: str = "", **data: Any) -> None:
    TrafficShiftEvent.objects.create(shift=shift, from_phase=source, to_phase=shift.phase, step=shift.step,
                                     actor_name=actor.name, channel=actor.channel, comment=comment, data=data)


def _transition(shift: TrafficShift, target: str, actor: core.Actor, comment: str = "", **data: Any) -> None:
    """Move a locked shift to `target`, with its event and audit record. Refuses illegal moves."""
    source = shift.phase
    if not can_shift(source, target):
        raise ShiftConflict(f"Shift #{shift.pk} is {source}; it cannot become {target}.", shift)
    before = core.snapshot(shift)
    shift.phase = target
    if target in SHIFT_TERMINAL_PHASES:
        shift.finished_at = timezone.now()
    shift.save()
    _event(shift, source, actor, comment, **data)
    core.record(actor, f"shift-{target}", shift, before=before, team=shift.to_pool.team)


def abandon(shift_id: int, actor: core.Actor, reason: str) -> TrafficShift:
    """End an active shift whose route is gone with its cluster (a retired sandbox): failed with `reason`, nothing
    written, so the pools may be deleted. A shift already ended is left as it is."""
    with transaction.atomic():
        shift = _locked(shift_id)
        if shift.phase in SHIFT_ACTIVE_PHASES:
            _transition(shift, ShiftPhase.FAILED, actor, reason)
    return shift


def _locked(shift_id: int) -> TrafficShift:
    # of=self: the pools, teams and cluster are read with the row, not locked with it.
    return TrafficShift.objects.select_for_update(of=("self",)).select_related(
        "cluster", "from_pool__team", "to_pool__team", "to_pool__cluster").get(pk=shift_id)


def _route(shift: TrafficShift) -> RouteRef:
    return RouteRef(namespace=shift.route_namespace, name=shift.route_name)


def _check_may_act(actor: core.Actor, *pools: Pool) -> None:
    """A person needs the operator role in each pool's team, and each team may act in the cluster."""
    for pool in pools:
        if actor.channel != Channel.AUTO and (
                actor.user is None or not core.has_role(actor.user, pool.team, Role.OPERATOR)):
            raise ShiftForbidden(f"Moving traffic needs the operator role in team {pool.team}.")
        if refusal := core.cluster_refusal(pool.cluster, pool.team):
            raise ShiftForbidden(refusal)


# --- starting -------------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    return str(value) if isinstance(value, Pool) else repr(value)


def _replay(to_pool: Pool, key: str, asked: dict[str, Any]) -> TrafficShift | None:
    """The shift an idempotency key already started for this receiving pool, when it was asked for the same
    shift (`asked`: the start's parameters, as stored); 409 naming the key when it was asked for another."""
    existing = TrafficShift.objects.select_related("from_pool__cluster").filter(to_pool=to_pool,
                                                                                 idempotency_key=key).first()
    if existing is None:
        return None
    differences = [f"{name} {_shown(getattr(existing, name))}, not {_shown(value)}"
                   for name, value in asked.items() if getattr(existing, name) != value]
    if differences:
        raise ShiftConflict(f"The idempotency key '{key}' was used for shift #{existing.pk} with other parameters "
                            f"({'; '.join(differences)}); use a new key for a different shift.",
                            existing, field="idempotency_key")
    return existing


def _check_pools(from_pool: Pool, to_pool: Pool) -> None:
    if from_pool.pk == to_pool.pk:
        raise InvalidShift("to_pool", "A shift moves traffic between two pools; from_pool and to_pool are the same.")
    if from_pool.cluster_id != to_pool.cluster_id:
        raise InvalidShift("to_pool", f"{to_pool} is in another cluster than {from_pool}; a route lives in one cluster.")
    for field, pool in (("from_pool", from_pool), ("to_pool", to_pool)):
        if not pool.route_name or not pool.route_backend:
            raise InvalidShift(field, f"Pool {pool} has no route (set its route_name and route_backend first).")
    if (from_pool.namespace, from_pool.route_name) != (to_pool.namespace, to_pool.route_name):
        raise InvalidShift("to_pool", f"{to_pool} is on route {to_pool.namespace}/{to_pool.route_name}, {from_pool} on "
                                      f"{from_pool.namespace}/{from_pool.route_name}: a shift moves traffic on one "
                                      "route.")
    if from_pool.route_backend == to_pool.route_backend:
        raise InvalidShift("to_pool", f"{to_pool} and {from_pool} are the same backend ({to_pool.route_backend}) "
                                      "of the route: a shift between them would move nothing.")


def refuse_deleting_a_route_writer(sender: type, instance: Pool, **kwargs: Any) -> None:
    """`pre_delete` of a pool (its own, or its cluster's cascade): refused while a shift or a fallback of it
    moves a route's weights. Deleted, its rows would go with it and leave the route half-shifted, with no
    writer left to roll it back or restore it (the API and the web answer 409 naming them)."""
    from django.db.models import ProtectedError, Q

    from scaling.choices import FALLBACK_OPEN_PHASES
    from scaling.models import FallbackActivation

    writing = [*TrafficShift.objects.filter(Q(from_pool=instance) | Q(to_pool=instance),
                                            phase__in=list(SHIFT_ACTIVE_PHASES)),
               *FallbackActivation.objects.filter(Q(pool=instance) | Q(fallback_pool=instance),
                                                  phase__in=list(FALLBACK_OPEN_PHASES))]
    if writing:
        raise ProtectedError(f"pool {instance} has a shift or a fallback moving its route's weights: roll it back or "
                             f"restore it first", writing)


def lock_route(cluster_id: int, router_kind: str, namespace: str, route_name: str) -> None:
    """Hold the route for this transaction: a shift starting and a fallback entering check that the other
    is not writing the route, then create their row; without one lock for both, each may pass its check
    while the other is between its check and its create (the start reads the route meanwhile), and two
    writers end up on one route. A PostgreSQL advisory lock, released at commit; SQLite (the embedded
    default) takes one writer at a time anyway."""
    if connection.vendor != "postgresql":
        return
    name = f"route:{cluster_id}:{router_kind}:{namespace}/{route_name}".encode()
    key = int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "big", signed=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


def _fallback_conflict(to_pool: Pool, router_kind: str, namespace: str, route_name: str) -> ShiftConflict | None:
    from scaling import fallbacks  # it builds on this module

    if (open_fallback := fallbacks.open_on_route(to_pool.cluster_id, router_kind, namespace, route_name)) is None:
        return None
    return ShiftConflict(f"Fallback #{open_fallback.pk} of {open_fallback.pool} writes route {route_name}'s weights "
                         f"({open_fallback.phase}); restore it first: one writer per route.", field="to_pool")


def start(
    from_pool: Pool,
    to_pool: Pool,
    actor: core.Actor,
    *,
    router_kind: str = "httproute",
    steps: list[int] | None = None,
    hold_s: float = shifting.DEFAULT_HOLD_S,
    max_p95_s: float = 1.0,
    max_error_rate: float = 0.01,
    failure_threshold: int = shifting.DEFAULT_FAILURE_THRESHOLD,
    no_data_deadline_s: float = shifting.DEFAULT_NO_DATA_DEADLINE_S,
    gated_steps: list[int] | None = None,
    idempotency_key: str | None = None,
    router: Router | None = None,
) -> TrafficShift:
    """Start a shift of `from_pool`'s traffic on its route to `to_pool` (phase pending; the next tick steps).

    Reads the route once to plan and validate every step's weights before anything is written. With an
    `idempotency_key` already used for the receiving pool, returns that shift unchanged when it was started
    with the same parameters, and refuses (409 on `idempotency_key`) when it was started with others.
    """
    asked = {"from_pool": from_pool, "router_kind": router_kind,
             "steps": list(shifting.DEFAULT_STEPS if steps is None else steps), "hold_s": hold_s,
             "max_p95_s": max_p95_s, "max_error_rate": max_error_rate, "failure_threshold": failure_threshold,
             "no_data_deadline_s": no_data_deadline_s, "gated_steps": sorted(set(gated_steps or []))}
    if idempotency_key and (existing := _replay(to_pool, idempotency_key, asked)):
        return existing
    _check_pools(from_pool, to_pool)
    _check_may_act(actor, from_pool, to_pool)
    try:
        planned_steps = shifting.validate_steps(list(shifting.DEFAULT_STEPS if steps is None else steps))
    except shifting.WeightError as exc:
        raise InvalidShift(exc.field, str(exc)) from None
    gated = sorted(set(gated_steps or []))
    if any(not 1 <= number <= len(planned_steps) for number in gated):
        raise InvalidShift("gated_steps", f"gated_steps must be step numbers between 1 and {len(planned_steps)}; got {gated}.")
    namespace = to_pool.namespace
    route = RouteRef(namespace=namespace, name=to_pool.route_name)
    conflicting = TrafficShift.objects.filter(cluster=to_pool.cluster, router_kind=router_kind, route_namespace=namespace,
                                              route_name=route.name, phase__in=list(SHIFT_ACTIVE_PHASES)).first()
    if conflicting is not None:
        raise ShiftConflict(f"Shift #{conflicting.pk} is already moving traffic on route {route.name} "
                            f"({conflicting.phase}); roll it back or let it finish first.", conflicting, field="to_pool")
    if conflict := _fallback_conflict(to_pool, router_kind, namespace, route.name):
        raise conflict
    try:
        router = router or route_router(to_pool.cluster, router_kind)
        backends = {from_pool.route_backend, to_pool.route_backend}
        start_weights = router.read(route, backends).weights
        planned = shifting.plan_weights(start_weights, from_pool.route_backend, to_pool.route_backend,
                                        planned_steps, router.scheme)
    except shifting.WeightError as exc:
        raise InvalidShift(exc.field, str(exc)) from None
    except DriverError as exc:
        if exc.status == 404:
            raise InvalidShift("to_pool", f"route {namespace}/{route.name} not found: {exc}") from None
        raise RouteUnavailable(f"Could not read route {namespace}/{route.name}: {exc}") from None
    try:
        with transaction.atomic():
            lock_route(to_pool.cluster_id, router_kind, namespace, route.name)
            if conflict := _fallback_conflict(to_pool, router_kind, namespace, route.name):
                raise conflict  # a fallback entered while the route was read
            shift = TrafficShift.objects.create(
                cluster=to_pool.cluster, from_pool=from_pool, to_pool=to_pool, router_kind=router_kind,
                route_namespace=namespace, route_name=route.name, from_backend=from_pool.route_backend,
                to_backend=to_pool.route_backend, steps=list(planned_steps), hold_s=hold_s, max_p95_s=max_p95_s,
                max_error_rate=max_error_rate, failure_threshold=failure_threshold,
                no_data_deadline_s=no_data_deadline_s, gated_steps=gated, start_weights=start_weights,
                planned_weights=planned, current_weights=start_weights,
                idempotency_key=idempotency_key or secrets.token_hex(16),
                created_by=actor.user, created_channel=actor.channel,
            )
            _event(shift, "", actor, "shift started", steps=list(planned_steps), start_weights=start_weights)
            core.record(actor, "shift-start", shift, team=to_pool.team)
    except IntegrityError:
        # A concurrent start won the route (or used the same key): answer with what it made.
        if idempotency_key and (existing := _replay(to_pool, idempotency_key, asked)):
            return existing
        raise ShiftConflict(f"Another shift is already moving traffic on route {route.name}.", field="to_pool") from None
    return shift


# --- one tick -------------------------------------------------------------------------------------


def _weights_at(shift: TrafficShift, step: int) -> dict[str, int]:
    """The two backends' weights at `step` (0: as the shift found them)."""
    full = shift.planned_weights[step - 1] if step else shift.start_weights
    return {shift.from_backend: full[shift.from_backend], shift.to_backend: full[shift.to_backend]}


def _record_check(shift: TrafficShift, decision: shifting.TickDecision, now: datetime) -> None:
    """Keep a tick's guard check on the locked shift; a failed one is an event too."""
    previous_failed = shift.failed_checks
    _store_progress(shift, decision.progress)
    shift.last_check = {"outcome": decision.check.outcome, "detail": decision.check.detail,
                        "decision": decision.action, "why": decision.detail, "at": now.isoformat()}
    if shift.failed_checks > previous_failed:
        _event(shift, shift.phase, AUTO, f"check failed ({shift.failed_checks} of {shift.failure_threshold}): "
                                         f"{decision.check.detail}", failed_checks=shift.failed_checks)


def _decide(shift: TrafficShift, now: datetime) -> None:
    """Check the guard and decide this tick, on a locked shift whose weights are on the route."""
    decision = shifting.decide_tick(spec_of(shift), progress_of(shift), guard_reading(shift, now), now.timestamp())
    _record_check(shift, decision, now)
    action, paused = decision.action, shift.phase == ShiftPhase.PAUSED
    if action == shifting.ROLL_BACK:
        if paused:
            shift.resume_phase = ""
        shift.rollback_step = shifting.rollback_target(progress_of(shift)) + 1
        _transition(shift, ShiftPhase.ROLLING_BACK, AUTO, decision.detail)
    elif paused:
        shift.save()  # a paused shift is still guarded, and moves no further
    elif action == shifting.COMPLETE:
        _transition(shift, ShiftPhase.COMPLETED, AUTO, decision.detail, weights=shift.current_weights)
    elif action == shifting.START_STEP:
        shift.step = (decision.next_step or 0) + 1
        _transition(shift, ShiftPhase.STEPPING, AUTO, decision.detail, weights=_weights_at(shift, shift.step))
    elif action == shifting.WAIT_APPROVAL and shift.phase != ShiftPhase.WAITING_APPROVAL:
        _transition(shift, ShiftPhase.WAITING_APPROVAL, AUTO, decision.detail)  # notified once, by this event
    else:
        shift.save()


def _guard_while_writing(shift: TrafficShift, now: datetime) -> None:
    """A locked shift whose step's write is retried (it failed on an earlier tick): the previous step's traffic
    is still on the receiving pool, so the guard keeps counting, and at the threshold the shift rolls back instead
    of retrying the write onto a failing pool."""
    on_route = replace(progress_of(shift), step=shift.step - 2)
    decision = shifting.decide_while_writing(spec_of(shift), on_route, guard_reading(shift, now), now.timestamp())
    _record_check(shift, decision, now)
    if decision.action == shifting.ROLL_BACK:
        shift.rollback_step = shifting.rollback_target(replace(decision.progress, step=shift.step - 2)) + 1
        _transition(shift, ShiftPhase.ROLLING_BACK, AUTO, decision.detail)
    else:
        shift.save()


def _finish_write(shift_id: int, expected_phase: str, step: int, outcome_weights: dict[str, int], wrote: bool,
                  conflicts: int, now: datetime) -> TrafficShift:
    """Record a confirmed write, unless another worker already did."""
    with transaction.atomic():
        shift = _locked(shift_id)
        if shift.phase != expected_phase or shift.step != step:
            return shift
        shift.current_weights, shift.last_error = outcome_weights, ""
        shift.write_key, shift.write_generation = "", None  # confirmed: no write in flight
        note = "written and read back" if wrote else "already on the route: nothing written"
        data = {"weights": outcome_weights, "wrote": wrote, "conflicts": conflicts}
        if expected_phase == ShiftPhase.STEPPING:
            shift.step_since = now
            _transition(shift, ShiftPhase.HOLDING, AUTO, f"step {step} ({shift.steps[step - 1]} %) {note}", **data)
        else:
            restored = f"weights of step {shift.rollback_step}" if shift.rollback_step else "the weights it started from"
            _transition(shift, ShiftPhase.ROLLED_BACK, AUTO, f"{restored} {note}", **data)
    return shift


def _fail_write(shift_id: int, expected_phase: str, step: int, exc: Exception) -> TrafficShift:
    """A premise that no longer holds or a permanent refusal ends the shift; anything else retries next tick."""
    message = str(exc) if isinstance(exc, DriverError) else f"unexpected {type(exc).__name__}: {exc}"
    with transaction.atomic():
        shift = _locked(shift_id)
        if shift.phase != expected_phase or shift.step != step:
            return shift
        repeated = shift.last_error == message
        shift.last_error = message
        if isinstance(exc, DriverError) and exc.permanent:
            reason = "the route changed under the shift: nothing written" if isinstance(exc, RoutePremiseChanged) \
                else "the router refused"
            _transition(shift, ShiftPhase.FAILED, AUTO, f"{reason}: {message}")
        else:
            shift.save(update_fields=["last_error", "updated_at"])
            if not repeated:  # one event per failure, not one a tick while it lasts
                _event(shift, shift.phase, AUTO, f"write failed, retried next tick: {message}")
    return shift


def write_intent(model: type[RouteWriteIntent], pk: int, key: str, router: Router, route: RouteRef,
                 backends: set[str]) -> int | None:
    """Before the write `key` of a shift or a fallback: the route generation its first attempt read (None: this
    is its first attempt, whose reading is committed now). A later attempt writes only onto that generation
    (`WeightPremise.undone`): the first one may have landed and been set back by a person. A confirmed write
    clears the key."""
    generation = router.read(route, backends).generation
    with transaction.atomic():
        row = model.objects.select_for_update().only("write_key", "write_generation").get(pk=pk)
        if row.write_key == key:
            return row.write_generation
        model.objects.filter(pk=pk).update(write_key=key, write_generation=generation)
    return None


def _write(shift: TrafficShift, router: Router, now: datetime) -> TrafficShift:
    """Write what the committed phase says: the step being entered, or the last good weights."""
    phase, step = shift.phase, shift.step
    if phase == ShiftPhase.STEPPING:
        target = _weights_at(shift, step)
        accepted = (_weights_at(shift, step - 1),)  # from the step before; or already written by a dead worker
    else:
        target = _weights_at(shift, shift.rollback_step)
        # A rollback may find any weights the shift wrote, up to the step it was entering.
        accepted = tuple(_weights_at(shift, number) for number in range(0, step + 1))
    def still_wanted() -> str | None:
        # Checked before each write attempt: a person's rollback (or another worker) may have moved it on.
        if TrafficShift.objects.filter(pk=shift.pk, phase=phase, step=step).exists():
            return None
        return f"shift #{shift.pk} is no longer {phase} step {step}"

    try:
        earlier = write_intent(TrafficShift, shift.pk, f"{phase}:{step}", router, _route(shift), set(target))
        outcome = router.set_weights(_route(shift), target, WeightPremise(accepted, still_wanted, earlier))
    except Exception as exc:  # noqa: BLE001 - recorded on the shift; transient ones are retried next tick
        return _fail_write(shift.pk, phase, step, exc)
    return _finish_write(shift.pk, phase, step, outcome.weights, outcome.wrote, outcome.conflicts, now)


def tick(shift_id: int, router: Router | None = None, now: datetime | None = None) -> TrafficShift:
    """One step of a shift's state machine: decide under the row lock, then write outside it."""
    now = now or timezone.now()
    with transaction.atomic():
        shift = _locked(shift_id)
        if shift.phase in SHIFT_TERMINAL_PHASES:
            return shift
        refusals = [core.cluster_refusal(shift.cluster, pool.team) for pool in (shift.from_pool, shift.to_pool)]
        if refusal := next((text for text in refusals if text), ""):
            # The teams may no longer act in the cluster (a share was revoked): nothing more is written.
            shift.last_error = refusal
            _transition(shift, ShiftPhase.FAILED, AUTO, f"stopped: {refusal}")
            return shift
        if shift.phase not in (ShiftPhase.STEPPING, ShiftPhase.ROLLING_BACK):
            _decide(shift, now)
        elif shift.phase == ShiftPhase.STEPPING and shift.last_error:
            _guard_while_writing(shift, now)  # the step's write failed before: its retry waits on the guard
        if shift.phase == ShiftPhase.ROLLING_BACK and shift.step == 0:
            # Nothing was moved: the route still has the weights it started with.
            _transition(shift, ShiftPhase.ROLLED_BACK, AUTO, "nothing had moved: no weights to restore")
    if shift.phase not in (ShiftPhase.STEPPING, ShiftPhase.ROLLING_BACK):
        return shift
    try:
        router = router or route_router(shift.cluster, shift.router_kind)
    except Exception as exc:  # noqa: BLE001 - recorded like any failed write
        return _fail_write(shift.pk, shift.phase, shift.step, exc)
    return _write(shift, router, now)


def advance(now: datetime | None = None) -> dict[str, int]:
    """Tick every active shift once. One shift's failure never stops the others."""
    counts = {"ticked": 0, "errors": 0}
    for shift_id in TrafficShift.objects.filter(phase__in=list(SHIFT_ACTIVE_PHASES)).order_by("pk") \
            .values_list("pk", flat=True):
        try:
            tick(shift_id, now=now)
            counts["ticked"] += 1
        except Exception:  # noqa: BLE001 - logged; the next beat tries again
            counts["errors"] += 1
            logger.exception("advancing shift #%s failed", shift_id)
    return counts


# --- a person's actions ---------------------------------------------------------------------------


def _act(shift_id: int, actor: core.Actor) -> TrafficShift:
    shift = _locked(shift_id)
    _check_may_act(actor, shift.from_pool, shift.to_pool)
    return shift


def pause(shift_id: int, actor: core.Actor, comment: str = "") -> TrafficShift:
    """Stop moving further (the guard still watches the traffic already moved and may roll back)."""
    with transaction.atomic():
        shift = _act(shift_id, actor)
        if shift.phase not in (ShiftPhase.PENDING, ShiftPhase.HOLDING, ShiftPhase.WAITING_APPROVAL):
            raise ShiftConflict(f"Shift #{shift.pk} is {shift.phase}; only a pending, holding or waiting shift pauses.",
                                shift)
        shift.resume_phase = shift.phase
        _transition(shift, ShiftPhase.PAUSED, actor, comment)
    return shift


def resume(shift_id: int, actor: core.Actor, comment: str = "", now: datetime | None = None) -> TrafficShift:
    """Go on from where it paused; the current step's hold starts again."""
    now = now or timezone.now()
    with transaction.atomic():
        shift = _act(shift_id, actor)
        if shift.phase != ShiftPhase.PAUSED:
            raise ShiftConflict(f"Shift #{shift.pk} is {shift.phase}, not paused.", shift)
        target, shift.resume_phase = shift.resume_phase, ""
        if shift.step:
            shift.step_since = now
        _transition(shift, target, actor, comment)
    return shift


def rollback(shift_id: int, actor: core.Actor, comment: str = "", router: Router | None = None) -> TrafficShift:
    """Return the route to the weights the shift started from (the write follows at once, and on the next tick
    if it fails). The guard's own rollback returns to the last good step instead."""
    with transaction.atomic():
        shift = _act(shift_id, actor)
        if shift.phase not in SHIFT_ACTIVE_PHASES or shift.phase == ShiftPhase.ROLLING_BACK:
            raise ShiftConflict(f"Shift #{shift.pk} is {shift.phase}; there is nothing to roll back.", shift)
        if shift.phase == ShiftPhase.PENDING and shift.step == 0:
            _transition(shift, ShiftPhase.ROLLED_BACK, actor, comment or "rolled back before any weight moved")
            return shift
        if shift.phase == ShiftPhase.PAUSED:
            shift.resume_phase = ""
        shift.rollback_step = 0  # a person undoes the whole shift; the guard keeps the last good step
        _transition(shift, ShiftPhase.ROLLING_BACK, actor, comment or "rolled back by a person")
    return tick(shift.pk, router=router)


def approve(shift_id: int, actor: core.Actor, comment: str = "") -> TrafficShift:
    """Approve the gated step a shift waits for; the next tick writes it (after its capacity check).
    409 when no step waits, or when the step waiting is already approved."""
    with transaction.atomic():
        shift = _act(shift_id, actor)
        if shift.phase != ShiftPhase.WAITING_APPROVAL:
            raise ShiftConflict(f"Shift #{shift.pk} is {shift.phase}; no step waits for approval.", shift)
        if shift.approved_step > shift.step:
            # A second click, or a Slack retry: approved once, audited once (as a proposal's approval).
            raise ShiftConflict(f"Step {shift.approved_step} of shift #{shift.pk} is already approved; the next tick "
                                "writes it.", shift)
        shift.approved_step = shift.step + 1
        shift.save(update_fields=["approved_step", "updated_at"])
        _event(shift, shift.phase, actor, comment or f"step {shift.approved_step} approved",
               approved_step=shift.approved_step)
        core.record(actor, "shift-approve", shift, team=shift.to_pool.team)
    return shift

