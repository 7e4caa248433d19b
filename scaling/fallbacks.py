"""Fallback activations live: each tick decides with the engine (scaling/engine/fallback.py) and moves
the route's weights between a pool's backend and its fallback pool's backend (design.md §5).

Like a traffic shift, a decision is committed under the policy's row lock first (the activation's
phase and `target_percent`, an event and an audit record), and the route is written after the commit:
a worker killed before or during the write leaves a row that says what to write, and the router's
premise makes a re-run write nothing when the weights are already there.

One writer per route: an automatic entry is refused while a traffic shift moves traffic on the same
route (the shift's guard would fight the fallback's weights), and a shift cannot start while a
fallback is open on its route (scaling/traffic.py). The refusal is recorded on the policy's last
decision and tried again next tick; a person can still force an activation once the shift has ended.

The return is gradual: the engine steps the share down (`return_steps`, each held), and each step is a
write of its own; the activation ends (`restored`) once 0 % is on the route and read back.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from controlplane import services as core
from controlplane.models import Pool
from scaling import traffic
from scaling.choices import FALLBACK_OPEN_PHASES, SHIFT_ACTIVE_PHASES, BreakerScope, FallbackPhase
from scaling.drivers.cluster import DriverError
from scaling.drivers.registry import route_router
from scaling.drivers.routing import RoutePremiseChanged, RouteRef, Router, WeightPremise
from scaling.engine import breakers as breaker_engine
from scaling.engine import fallback as engine
from scaling.engine.shifting import pair_weights
from scaling.engine.signals import STALE_AFTER_S, PoolSignals, Reading
from scaling.models import CircuitBreaker, FallbackActivation, FallbackEvent, FallbackPolicy, PlannerMemory, PoolStatus, TrafficShift

logger = logging.getLogger(__name__)
AUTO = traffic.AUTO
# After a fallback fails because the route changed under it (or the router refused for good), automatic entries
# on its pool wait this long: Headroom does not take a route back from the person who just changed it by hand.
STEP_BACK_S = 30 * 60


class FallbackError(traffic.ShiftError):
    """Base of the errors a caller turns into an answer."""


class InvalidFallback(traffic.InvalidShift):
    pass


class FallbackForbidden(traffic.ShiftForbidden):
    pass


class FallbackConflict(FallbackError):
    status_code = 409

    def __init__(self, message: str, activation: FallbackActivation | None = None) -> None:
        super().__init__(message)
        self.activation = activation

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"detail": str(self)}
        if self.activation is not None:
            body.update(id=self.activation.pk, phase=self.activation.phase)
        return body


class FallbackInUse(FallbackError):
    """A change that would strand an open fallback: its pool's fallback pool retargeted, or its policy deleted
    (409; `field` is where the pool's edit form shows it)."""

    status_code = 409

    def __init__(self, activation: FallbackActivation, change: str, field: str) -> None:
        super().__init__(f"{activation.pool} has fallback #{activation.pk} to {activation.fallback_pool} open "
                         f"({activation.phase}, {activation.route_percent} % of the route on "
                         f"{activation.fallback_backend}): restore it first, then {change}.")
        self.activation, self.field = activation, field

    def payload(self) -> dict[str, Any]:
        return {"detail": str(self), self.field or "detail": [str(self)], "id": self.activation.pk,
                "phase": self.activation.phase}


# --- reading --------------------------------------------------------------------------------------


def engine_policy(policy: FallbackPolicy) -> engine.FallbackPolicy:
    return engine.FallbackPolicy(
        entry_after_s=policy.entry_after_s, exit_after_s=policy.exit_after_s,
        exit_latency_ratio=policy.exit_latency_ratio, max_share=policy.max_share,
        min_share=min(engine.FallbackPolicy.min_share, policy.max_share),
        return_step_hold_s=policy.return_step_hold_s,
        classes=frozenset(policy.classes),
    )


def _state_of(policy: FallbackPolicy) -> engine.FallbackState:
    raw = dict(policy.state or {})
    raw["recent_demand"] = tuple(tuple(pair) for pair in raw.get("recent_demand", ()))
    known = {f.name for f in dataclasses.fields(engine.FallbackState)}
    return engine.FallbackState(**{key: value for key, value in raw.items() if key in known})


def _memory(pool: Pool, now: datetime) -> tuple[dict[str, Any], float | None]:
    """The signals the control loop stored for `pool` at its last tick and their age (None: none)."""
    memory = PlannerMemory.objects.filter(pool=pool).only("last_signals", "last_decision").first()
    read_at = parse_datetime((memory.last_decision or {}).get("at", "")) if memory else None
    if read_at is None:
        return {}, None
    return memory.last_signals or {}, (now - read_at).total_seconds()


def pool_signals(pool: Pool, now: datetime) -> PoolSignals:
    """The loop's last readings for `pool`, aged; replicas from its last observed status."""
    stored, age = _memory(pool, now)
    readings = {name: Reading(float(value), age) for name, value in stored.items()
                if value is not None and name in PoolSignals.__dataclass_fields__ and name != "pool"}
    status = PoolStatus.objects.filter(pool=pool).first()
    if status is not None:
        status_age = (now - status.observed_at).total_seconds()
        readings.update(ready_replicas=Reading(status.ready_replicas, status_age),
                        desired_replicas=Reading(status.desired_replicas, status_age))
    return PoolSignals(pool=pool.name, **readings)


def _rate(signals: PoolSignals) -> float | None:
    return float(signals.request_rate_rps.value) if signals.request_rate_rps.is_known else None  # type: ignore[arg-type]


def _evaluated_at(breaker: CircuitBreaker) -> datetime:
    at = parse_datetime((breaker.last_counts or {}).get("at", "")) if breaker.last_counts else None
    return max(at, breaker.since) if at is not None else breaker.since


def breaker_picture(policy: FallbackPolicy, now: datetime) -> breaker_engine.BreakerPicture:
    """The primary's breakers as the fallback reads them. Only breakers evaluated (or moved) in the last
    STALE_AFTER_S count: the row of a pod that is gone stays behind, and says nothing about today."""
    rows = CircuitBreaker.objects.filter(Q(pool=policy.pool) | Q(scope=BreakerScope.SYSTEM))
    # No lower bound: a beat evaluating the breakers a moment after this tick's `now` still counts.
    fresh = [row for row in rows if (now - _evaluated_at(row)).total_seconds() <= STALE_AFTER_S]
    endpoints = {row.endpoint: row.state for row in fresh if row.scope == BreakerScope.ENDPOINT}
    pool_state = next((row.state for row in fresh if row.scope == BreakerScope.POOL), None)
    system_state = next((row.state for row in fresh if row.scope == BreakerScope.SYSTEM), None)
    return breaker_engine.fallback_picture(endpoints, pool_state, system_state,
                                           has_fallback=policy.pool.fallback_pool_id is not None,
                                           enabled=policy.enabled)


def decide(policy: FallbackPolicy, now: datetime, activation: FallbackActivation | None = None) -> engine.FallbackDecision:
    """The engine's decision for the policy's pool this tick, from the loop's stored signals. `activation`
    is the open one: what it has on the route is the share of the traffic the primary did not get."""
    from scaling import loop  # the loop imports the services this module's callers use

    primary, fallback = policy.pool, policy.pool.fallback_pool
    if fallback is None:
        return engine.FallbackDecision(0.0, engine.INACTIVE, ("the pool has no fallback pool",), _state_of(policy))
    signals, fallback_signals = pool_signals(primary, now), pool_signals(fallback, now)
    rates = [_rate(signals), _rate(fallback_signals)]
    # The route's demand is both pools' rates: diverted requests are still demand on the primary.
    demand = sum(rate for rate in rates if rate is not None) if rates[0] is not None else math.nan
    ready = fallback_signals.ready_replicas
    fallback_capacity = (float(ready.value) * fallback.replica_capacity_rps  # type: ignore[arg-type]
                         if ready.is_known else math.inf)
    eligible = policy.eligible_share if policy.classes else 0.0  # no class may fall back: nothing is eligible
    breakers = breaker_picture(policy, now)
    return engine.fallback_step(now.timestamp(), signals, loop.pool_plan(primary), _state_of(policy),
                                engine_policy(policy), demand_rps=demand, eligible_share=eligible,
                                fallback_capacity_rps=fallback_capacity, ejected_replicas=breakers.ejected,
                                breaker_open=breakers.failing,
                                routed_share=(activation.route_percent / 100.0 if activation is not None
                                              else spilled_share(signals, fallback_signals)))


def spilled_share(primary: PoolSignals, fallback: PoolSignals) -> float:
    """With no fallback open, the share of the route the fallback pool answered: the gateway's per-request
    spill-over (scaling.engine.spillover). A fallback pool serves its primary's route alone, so all it
    answers is the primary's overflow. 0 where either rate is unknown or nothing was sent."""
    return engine.answered_share(primary.request_rate_rps, fallback.request_rate_rps) or 0.0


MIN_PAIR_TOTAL = 100  # the combined weight that carries a share to the percent


def route_percent_for(policy: FallbackPolicy, share: float) -> int:
    """The fallback backend's share of the pair's route weight, in percent, for a share of the eligible traffic.
    Rounded up: the primary keeps at most what its ready replicas serve."""
    return max(0, min(100, math.ceil(100 * share * policy.eligible_share - 1e-6)))


# --- events ---------------------------------------------------------------------------------------


def _event(activation: FallbackActivation, kind: str, source: str, actor: core.Actor, comment: str = "",
           **data: Any) -> FallbackEvent:
    return FallbackEvent.objects.create(activation=activation, kind=kind, from_phase=source, to_phase=activation.phase,
                                        share=activation.share, actor_name=actor.name, channel=actor.channel,
                                        comment=comment, data=data)


def _transition(activation: FallbackActivation, target: str, kind: str, actor: core.Actor, comment: str,
                **data: Any) -> None:
    before, source = core.snapshot(activation), activation.phase
    activation.phase = target
    if target not in FALLBACK_OPEN_PHASES:
        activation.finished_at = timezone.now()
    activation.save()
    _event(activation, kind, source, actor, comment, **data)
    core.record(actor, f"fallback-{kind}", activation, before=before, team=activation.pool.team)


def _open(pool: Pool) -> FallbackActivation | None:
    return FallbackActivation.objects.select_for_update(of=("self",)).select_related(
        "pool__team", "pool__cluster", "pool__fallback_pool", "fallback_pool__team", "fallback_pool__cluster") \
        .filter(pool=pool, phase__in=list(FALLBACK_OPEN_PHASES)).first()


def _shift_on_route(policy: FallbackPolicy) -> TrafficShift | None:
    pool = policy.pool
    return TrafficShift.objects.filter(cluster=pool.cluster, router_kind=policy.router_kind,
                                       route_namespace=pool.namespace, route_name=pool.route_name,
                                       phase__in=list(SHIFT_ACTIVE_PHASES)).first()


def _create(policy: FallbackPolicy, phase: str, share: float, actor: core.Actor, reasons: list[str], *,
            forced: bool, router: Router | None = None) -> FallbackActivation:
    """A new activation (entry decided; nothing written yet). Reads the route once for the pair's weights."""
    pool, fallback = policy.pool, policy.pool.fallback_pool
    if fallback is None:
        raise InvalidFallback("pool", f"Pool {pool} has no fallback pool.")
    if not pool.route_name or not pool.route_backend or not fallback.route_backend:
        raise InvalidFallback("pool", f"Pool {pool} or its fallback {fallback} has no route (route_name, route_backend).")
    traffic.lock_route(pool.cluster_id, policy.router_kind, pool.namespace, pool.route_name)
    if shift := _shift_on_route(policy):
        raise FallbackConflict(f"Shift #{shift.pk} is moving traffic on route {pool.route_name} ({shift.phase}); "
                               "one writer per route: roll it back or let it finish first.")
    route = RouteRef(pool.namespace, pool.route_name)
    try:
        router = router or route_router(pool.cluster, policy.router_kind)
        weights = router.read(route, {pool.route_backend, fallback.route_backend}).weights
    except DriverError as exc:
        raise traffic.RouteUnavailable(f"route {route.namespace}/{route.name} could not be read: {exc}") from None
    for field, backend in (("pool", pool.route_backend), ("fallback_pool", fallback.route_backend)):
        if backend not in weights:
            raise InvalidFallback(field, f"the route {route.name} has no backend {backend!r}")
    pair_total = weights[pool.route_backend] + weights[fallback.route_backend]
    if pair_total == 0:
        raise InvalidFallback("pool", f"{pool.route_backend} and {fallback.route_backend} carry no traffic on the route")
    route_percent = round(100 * weights[fallback.route_backend] / pair_total)
    if pair_total < MIN_PAIR_TOTAL:
        # Gateway API weights are relative, and a backend without one weighs 1: a primary at 1 beside a
        # fallback at 0 would carry a 58 % share as 0/1, all or nothing. Where the two are the rule's only
        # backends their weights scale freely; beside others that would move the others' shares too.
        if set(weights) != {pool.route_backend, fallback.route_backend}:
            raise InvalidFallback("pool", (
                f"{pool.route_backend} and {fallback.route_backend} weigh {pair_total} together on the route, beside "
                f"other backends: too little to carry a share in percent; give the two weights of {MIN_PAIR_TOTAL} "
                f"or more"))
        pair_total = MIN_PAIR_TOTAL
    activation = FallbackActivation.objects.create(
        pool=pool, fallback_pool=fallback, router_kind=policy.router_kind, route_namespace=route.namespace,
        route_name=route.name, primary_backend=pool.route_backend, fallback_backend=fallback.route_backend,
        phase=phase, trigger="manual" if forced else "auto", forced=forced, share=share,
        target_percent=route_percent_for(policy, share) if phase != FallbackPhase.WAITING_APPROVAL else route_percent,
        route_percent=route_percent, pair_total=pair_total, start_weights=weights, reasons=reasons,
        created_by=actor.user if actor.user and actor.user.is_authenticated else None, created_channel=actor.channel,
    )
    _event(activation, engine.ENTERED if phase == FallbackPhase.ACTIVE else "waiting_approval", "", actor,
           "; ".join(reasons), target_percent=activation.target_percent)
    core.record(actor, "fallback-entered" if phase == FallbackPhase.ACTIVE else "fallback-requested", activation,
                team=pool.team)
    return activation


def _locked_policy(pool_id: int) -> FallbackPolicy:
    return FallbackPolicy.objects.select_for_update(of=("self",)).select_related(
        "pool__team", "pool__cluster", "pool__fallback_pool").get(pk=pool_id)


# --- the tick -------------------------------------------------------------------------------------


def _apply(policy: FallbackPolicy, decision: engine.FallbackDecision, activation: FallbackActivation | None,
           router: Router | None, now: datetime) -> FallbackActivation | None:
    """Turn one engine decision into the activation's phase and target (under the policy's lock)."""
    reasons = list(decision.reasons)
    policy.last_decision = {"phase": decision.phase, "share": round(decision.share, 4), "reasons": reasons,
                            "overflow_share": round(decision.overflow_share, 4),
                            "spilled_share": round(decision.spilled_share, 4), "at": now.isoformat()}
    if decision.event == engine.ENTERED and activation is None:
        if held := _held_entry(policy.pool, now):
            # Not entered: the engine stays inactive and decides again next tick.
            policy.last_decision["reasons"] = [*reasons, (
                f"entry held: fallback #{held.pk} failed at {held.finished_at:%H:%M:%S} UTC ({held.last_error}); "
                f"automatic entries resume {STEP_BACK_S // 60} min after it, a person's may come at any time")]
            return None
        phase = FallbackPhase.WAITING_APPROVAL if policy.requires_approval else FallbackPhase.ACTIVE
        try:
            with transaction.atomic():
                activation = _create(policy, phase, decision.share, AUTO, reasons, forced=False, router=router)
        except (FallbackConflict, traffic.RouteUnavailable, InvalidFallback, IntegrityError) as exc:
            # Not entered: the engine stays inactive and decides again next tick.
            policy.last_decision["reasons"] = [*reasons, f"entry refused: {exc}"]
            return None
        policy.state = _state_dict(decision.state)
        return activation
    policy.state = _state_dict(decision.state)
    if activation is None or activation.forced:
        return activation
    activation.share, activation.reasons = decision.share, reasons
    waiting = activation.phase == FallbackPhase.WAITING_APPROVAL
    if decision.event == engine.RESTORED:
        if waiting:
            _transition(activation, FallbackPhase.REJECTED, "lapsed", AUTO, "the overload passed before an approval")
            return activation
        activation.target_percent = 0
        _transition(activation, FallbackPhase.RESTORING, engine.RESTORED, AUTO, "; ".join(reasons), target_percent=0)
    elif waiting:
        activation.save(update_fields=["share", "reasons", "updated_at"])
    elif decision.event == engine.ENTERED:
        # Entered again before the last return's 0 % was confirmed on the route: the same activation goes on.
        activation.target_percent = route_percent_for(policy, decision.share)
        _transition(activation, FallbackPhase.ACTIVE, engine.REACTIVATED, AUTO, "; ".join(reasons),
                    target_percent=activation.target_percent)
    elif decision.event == engine.RETURN_STARTED:
        activation.target_percent = route_percent_for(policy, decision.share)
        _transition(activation, FallbackPhase.RESTORING, engine.RETURN_STARTED, AUTO, "; ".join(reasons),
                    target_percent=activation.target_percent)
    elif decision.event == engine.REACTIVATED:
        activation.target_percent = route_percent_for(policy, decision.share)
        _transition(activation, FallbackPhase.ACTIVE, engine.REACTIVATED, AUTO, "; ".join(reasons),
                    target_percent=activation.target_percent)
    else:
        target = route_percent_for(policy, decision.share)
        if target != activation.target_percent:
            activation.target_percent = target
            _event(activation, "share", activation.phase, AUTO, "; ".join(reasons), target_percent=target)
        activation.save()
    return activation


def _state_dict(state: engine.FallbackState) -> dict[str, Any]:
    raw = dataclasses.asdict(state)
    raw["recent_demand"] = [list(pair) for pair in state.recent_demand]
    return raw


def tick(pool_id: int, router: Router | None = None, now: datetime | None = None) -> FallbackActivation | None:
    """Decide for one policy under its row lock, then write what the committed activation wants."""
    now = now or timezone.now()
    with transaction.atomic():
        policy = _locked_policy(pool_id)
        if not policy.enabled:
            return None
        activation = _open(policy.pool)
        if activation is None or not activation.forced:
            activation = _apply(policy, decide(policy, now, activation), activation, router, now)
        policy.save(update_fields=["state", "last_decision", "updated_at"])
    if activation is None or not activation.is_open:
        return activation
    return write(activation.pk, router)


def _step_back(activation_id: int, exc: DriverError) -> FallbackActivation:
    """End an activation whose write cannot succeed: someone else wrote the route's weights (a person mid-incident,
    another tool) or the router refused for good. Retrying would either never land or take the route back from
    whoever changed it, so the activation fails, the engine forgets it, and automatic entries on the pool wait
    `STEP_BACK_S` (`_held_entry`). The route is left as it is."""
    with transaction.atomic():
        # The policy's lock before the activation's, in the tick's order (a policy deleted meanwhile has none).
        pool_id = FallbackActivation.objects.values_list("pool_id", flat=True).get(pk=activation_id)
        policy = FallbackPolicy.objects.select_for_update(of=("self",)).filter(pk=pool_id).first()
        activation = FallbackActivation.objects.select_for_update(of=("self",)).select_related("pool__team") \
            .get(pk=activation_id)
        if not activation.is_open:
            return activation
        cause = ("the route changed under the fallback (someone else wrote its weights)"
                 if isinstance(exc, RoutePremiseChanged) else "the router refused")
        activation.last_error = str(exc)
        _transition(activation, FallbackPhase.FAILED, "failed", AUTO,
                    f"{cause}: nothing written, and Headroom no longer writes this route for it; automatic entries "
                    f"on {activation.pool} wait {STEP_BACK_S // 60} min, a person's may come at any time: {exc}")
        if policy is not None:
            policy.state = _state_dict(engine.FallbackState(since_s=None))
            policy.save(update_fields=["state", "updated_at"])
    return activation


def abandon(activation_id: int, actor: core.Actor, reason: str) -> FallbackActivation:
    """End an open activation whose route is gone with its cluster (a retired sandbox): failed with `reason`,
    nothing written, the engine's memory of it cleared. An activation already ended is left as it is."""
    with transaction.atomic():
        pool_id = FallbackActivation.objects.values_list("pool_id", flat=True).get(pk=activation_id)
        policy = FallbackPolicy.objects.select_for_update(of=("self",)).filter(pk=pool_id).first()
        activation = FallbackActivation.objects.select_for_update(of=("self",)).select_related("pool__team") \
            .get(pk=activation_id)
        if activation.is_open:
            _transition(activation, FallbackPhase.FAILED, "failed", actor, reason)
            if policy is not None:
                policy.state = _state_dict(engine.FallbackState(since_s=None))
                policy.save(update_fields=["state", "updated_at"])
    return activation


def _held_entry(pool: Pool, now: datetime) -> FallbackActivation | None:
    """The pool's fallback that failed less than `STEP_BACK_S` ago, which holds automatic entries back."""
    return FallbackActivation.objects.filter(pool=pool, phase=FallbackPhase.FAILED,
                                             finished_at__gt=now - timedelta(seconds=STEP_BACK_S)) \
        .order_by("-finished_at").first()


def write(activation_id: int, router: Router | None = None) -> FallbackActivation:
    """Put the activation's target on the route (nothing when it is there already) and record it."""
    activation = FallbackActivation.objects.select_related("pool__cluster", "pool__team").get(pk=activation_id)
    if not activation.is_open or activation.phase == FallbackPhase.WAITING_APPROVAL:
        return activation
    target_percent, confirmed = activation.target_percent, activation.route_percent
    pending_restore = activation.phase == FallbackPhase.RESTORING and target_percent == 0
    if target_percent == confirmed and not pending_restore:
        return activation

    def weights_at(percent: int) -> dict[str, int]:
        primary, fallback = pair_weights(activation.pair_total, percent)
        return {activation.primary_backend: primary, activation.fallback_backend: fallback}

    def still_wanted() -> str | None:
        if FallbackActivation.objects.filter(pk=activation.pk, target_percent=target_percent,
                                             phase__in=list(FALLBACK_OPEN_PHASES)).exists():
            return None
        return f"fallback #{activation.pk} no longer wants {target_percent} %"

    # Any share this activation asked for may be on the route, not only the one last confirmed: a write
    # whose answer was lost (a read-back timing out) landed, or the target moved while it was in flight.
    # Only weights it never asked for are the route changed by someone else.
    accepted = (*(weights_at(percent) for percent in sorted({confirmed, *_asked_percents(activation)})),
                activation.start_weights)
    route = RouteRef(activation.route_namespace, activation.route_name)
    target = weights_at(target_percent)
    try:
        router = router or route_router(activation.pool.cluster, activation.router_kind)
        earlier = traffic.write_intent(FallbackActivation, activation.pk, f"{activation.phase}:{target_percent}",
                                       router, route, set(target))
        outcome = router.set_weights(route, target, WeightPremise(accepted, still_wanted, earlier))
    except Exception as exc:  # noqa: BLE001 - recorded on the activation; retried next tick
        if isinstance(exc, DriverError) and exc.permanent:
            return _step_back(activation_id, exc)
        message = str(exc) if isinstance(exc, DriverError) else f"unexpected {type(exc).__name__}: {exc}"
        with transaction.atomic():
            activation = FallbackActivation.objects.select_for_update().get(pk=activation_id)
            if activation.last_error != message:  # one event per failure, not one a beat while it lasts
                _event(activation, "write_failed", activation.phase, AUTO, f"write failed, retried next tick: {message}")
            activation.last_error = message
            activation.save(update_fields=["last_error", "updated_at"])
        return activation
    with transaction.atomic():
        activation = FallbackActivation.objects.select_for_update(of=("self",)).select_related("pool__team") \
            .get(pk=activation_id)
        if not activation.is_open:
            return activation
        # What is on the route now, even where the target moved on meanwhile (the next write starts from it).
        activation.route_percent, activation.last_error = target_percent, ""
        activation.write_key, activation.write_generation = "", None  # confirmed: no write in flight
        note = "written and read back" if outcome.wrote else "already on the route: nothing written"
        data = {"weights": outcome.weights, "wrote": outcome.wrote, "conflicts": outcome.conflicts}
        if activation.target_percent != target_percent:
            activation.save()
            _event(activation, "written", activation.phase, AUTO, f"{target_percent} % to {activation.fallback_backend} "
                   f"{note}; the target is {activation.target_percent} % now", **data)
        elif activation.phase == FallbackPhase.RESTORING and target_percent == 0:
            _transition(activation, FallbackPhase.RESTORED, "route_restored", AUTO,
                        f"all traffic back on {activation.primary_backend}: {note}", **data)
        else:
            activation.save()
            _event(activation, "written", activation.phase, AUTO, f"{target_percent} % to "
                                                                  f"{activation.fallback_backend} {note}", **data)
    return activation


def _asked_percents(activation: FallbackActivation) -> set[int]:
    """Every route share the activation has asked for (its events record each target it set)."""
    asked = activation.events.exclude(data__target_percent=None).values_list("data__target_percent", flat=True)
    return {int(percent) for percent in asked if isinstance(percent, (int, float))} | {activation.target_percent}


def advance(now: datetime | None = None) -> dict[str, int]:
    """Tick every enabled policy, and finish the writes of open activations. One failure never stops the others."""
    counts = {"ticked": 0, "errors": 0}
    for pool_id in FallbackPolicy.objects.filter(enabled=True).order_by("pk").values_list("pk", flat=True):
        try:
            tick(pool_id, now=now)
            counts["ticked"] += 1
        except Exception:  # noqa: BLE001 - logged; the next beat tries again
            counts["errors"] += 1
            logger.exception("fallback tick for pool #%s failed", pool_id)
    # The writes no tick makes: a person's activation, and an open one whose policy is off or gone (a person's
    # restore of it above all: the row says what to write, whatever became of the policy).
    ticked = FallbackPolicy.objects.filter(enabled=True).values("pk")
    for activation_id in FallbackActivation.objects.filter(phase__in=list(FALLBACK_OPEN_PHASES)) \
            .filter(Q(forced=True) | ~Q(pool_id__in=ticked)).values_list("pk", flat=True):
        try:
            write(activation_id)
        except Exception:  # noqa: BLE001
            counts["errors"] += 1
            logger.exception("fallback #%s write failed", activation_id)
    return counts


# --- a person's actions ---------------------------------------------------------------------------


def _check_may_act(actor: core.Actor, pool: Pool, fallback: Pool | None) -> None:
    try:
        traffic._check_may_act(actor, *(each for each in (pool, fallback) if each is not None))
    except traffic.ShiftForbidden as exc:
        raise FallbackForbidden(str(exc).replace("Moving traffic", "A fallback")) from None


def _policy_for(pool: Pool) -> FallbackPolicy:
    policy = FallbackPolicy.objects.select_related("pool__team", "pool__cluster", "pool__fallback_pool").filter(pool=pool).first()
    if policy is None or policy.pool.fallback_pool_id is None:
        raise InvalidFallback("pool", f"Pool {pool} has no fallback pool and policy; configure them first.")
    return policy


def activate(pool: Pool, share: float, actor: core.Actor, comment: str = "",
             router: Router | None = None) -> FallbackActivation:
    """A person sends `share` of the pool's eligible traffic to its fallback now; it stays until a person restores.
    Idempotent: an open forced activation at the same share is returned unchanged."""
    if not 0.0 < share <= 1.0:
        raise InvalidFallback("share", f"share must be above 0 and at most 1; got {share}.")
    policy = _policy_for(pool)
    _check_may_act(actor, policy.pool, policy.pool.fallback_pool)
    ready = pool_signals(policy.pool.fallback_pool, timezone.now()).ready_replicas
    if ready.is_known and not ready.value:
        # Known to be empty: the route would send the share to a backend with nothing behind it (an outage).
        raise FallbackConflict(f"Fallback pool {policy.pool.fallback_pool} has 0 ready replicas (read {ready.age_s:.0f} s "
                               f"ago): it cannot serve {share:.0%} of {pool}'s traffic; scale it up first.")
    with transaction.atomic():
        policy = _locked_policy(pool.pk)
        activation = _open(pool)
        reason = comment or f"activated by {actor.name} at {share:.0%}"
        if activation is None:
            activation = _create(policy, FallbackPhase.ACTIVE, share, actor, [reason], forced=True, router=router)
        elif not (activation.forced and activation.share == share and activation.phase == FallbackPhase.ACTIVE):
            activation.forced, activation.share = True, share
            activation.target_percent = route_percent_for(policy, share)
            activation.trigger = "manual"
            _transition(activation, FallbackPhase.ACTIVE, "forced", actor, reason,
                        target_percent=activation.target_percent)
        # The engine follows the person's activation: its return starts from this share.
        state = _state_of(policy)
        policy.state = _state_dict(dataclasses.replace(state, phase=engine.ACTIVE, share=share, since_s=None,
                                                       calm_since_s=None))
        policy.save(update_fields=["state", "updated_at"])
    return write(activation.pk, router)


def restore(pool: Pool, actor: core.Actor, comment: str = "", router: Router | None = None) -> FallbackActivation:
    """A person sends all the pool's traffic back to it now (one write), or rejects an entry waiting for approval.

    Works from what the open activation recorded (its fallback pool, route and backends), whatever became of
    the policy or of the pool's fallback pool since. 409 when no fallback is open, and when all the traffic is
    already on its way back (a second click: the first restore's write is retried by the beat, audited once).
    """
    _check_may_act(actor, pool, None)
    with transaction.atomic():
        # The policy's lock first, as the tick takes it (a policy deleted meanwhile has none to take).
        policy = FallbackPolicy.objects.select_for_update(of=("self",)).filter(pk=pool.pk).first()
        activation = _open(pool)
        if activation is None:
            raise FallbackConflict(f"No fallback is open for {pool}: nothing to restore.")
        _check_may_act(actor, activation.pool, activation.fallback_pool)
        if activation.phase == FallbackPhase.RESTORING and activation.target_percent == 0:
            failing = f" (the last write failed: {activation.last_error})" if activation.last_error else ""
            raise FallbackConflict(f"Fallback #{activation.pk} of {pool} is already being restored: 0 % of the route "
                                   f"on {activation.fallback_backend} is being written{failing}, and the beat retries "
                                   "it until it is.", activation)
        if activation.phase == FallbackPhase.WAITING_APPROVAL:
            _transition(activation, FallbackPhase.REJECTED, "rejected", actor, comment or "entry rejected")
        else:
            activation.target_percent, activation.share = 0, 0.0
            _transition(activation, FallbackPhase.RESTORING, "restore", actor, comment or f"restored by {actor.name}",
                        target_percent=0)
        if policy is not None:
            policy.state = _state_dict(engine.FallbackState(since_s=None))
            policy.save(update_fields=["state", "updated_at"])
    if activation.phase == FallbackPhase.REJECTED:
        return activation
    return write(activation.pk, router)


def approve(pool: Pool, actor: core.Actor, comment: str = "", router: Router | None = None) -> FallbackActivation:
    """Approve the entry a pool's policy waits for: its current share goes on the route now."""
    policy = _policy_for(pool)
    _check_may_act(actor, policy.pool, policy.pool.fallback_pool)
    with transaction.atomic():
        policy = _locked_policy(pool.pk)
        activation = _open(pool)
        if activation is None or activation.phase != FallbackPhase.WAITING_APPROVAL:
            raise FallbackConflict(f"No fallback entry of {pool} waits for approval.", activation)
        activation.target_percent = route_percent_for(policy, activation.share)
        _transition(activation, FallbackPhase.ACTIVE, "approved", actor, comment or f"approved by {actor.name}",
                    target_percent=activation.target_percent)
    return write(activation.pk, router)


def open_on_route(cluster_id: int, router_kind: str, namespace: str, route_name: str) -> FallbackActivation | None:
    """The open fallback that writes this route's weights, if any (for the shift's one-writer rule)."""
    return FallbackActivation.objects.filter(pool__cluster_id=cluster_id, router_kind=router_kind,
                                             route_namespace=namespace, route_name=route_name,
                                             phase__in=list(FALLBACK_OPEN_PHASES)).first()


# --- what would strand an open fallback -----------------------------------------------------------


def delete_policy(policy: FallbackPolicy, actor: core.Actor) -> None:
    """Delete a pool's policy (audited); 409 while a fallback of the pool is open: the tick that steps its
    return, and the share a person approves, go with the policy. Restore it first."""
    with transaction.atomic():
        policy = _locked_policy(policy.pk)  # an entry is created under this lock: none slips in before the delete
        if (activation := _open(policy.pool)) is not None:
            raise FallbackInUse(activation, "delete the policy", "pool")
        core.delete_with_audit(actor, policy)


def refuse_retargeting_an_open_fallback(sender: type, instance: Pool, update_fields: frozenset[str] | None = None,
                                        raw: bool = False, **kwargs: Any) -> None:
    """`pre_save` of a pool: its fallback pool stays as it is while a fallback of it is open (409 in the API, an
    error on the field in the web form). A restore works from the activation's own record anyway; this keeps the
    pool's page, the policy's decisions and the route saying the same thing until the traffic is back."""
    if raw or instance.pk is None or (update_fields is not None
                                      and not {"fallback_pool", "fallback_pool_id"} & set(update_fields)):
        return
    activation = FallbackActivation.objects.select_related("pool__cluster", "fallback_pool__cluster").filter(
        pool_id=instance.pk, phase__in=list(FALLBACK_OPEN_PHASES)).exclude(fallback_pool_id=instance.fallback_pool_id) \
        .first()
    if activation is not None:
        change = "change its fallback pool" if instance.fallback_pool_id else "clear its fallback pool"
        raise FallbackInUse(activation, change, "fallback_pool")
