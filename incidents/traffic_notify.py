"""Notifications for traffic moves: fallback entries and exits, circuit breaker trips and resets, and
traffic shifts that complete, roll back, fail or wait for a person (design.md §5: each is an event, a
notification and an audit record).

The same outbox as proposals and alerts: the event rows (FallbackEvent, BreakerTransition,
TrafficShiftEvent) are the outbox, `notified_at` is its read cursor. `fan_out` takes new events under a
row lock (skip locked, so many workers may run it), writes one Notification per channel of the teams
concerned and sets `notified_at` in the same transaction: an event is announced once or, when the worker
dies first, not yet (the next sweep does it). Delivery is the outbox's (`services.deliver`, with backoff
and the same `delivery` id on a retry). The message is a plain sentence (Notification kind `message`,
posted to Slack as `{"text": …}`).

Quiet rules apply by the pool's priority tier, as for a new proposal; drills never reach real channels.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool, Team
from incidents.choices import NotificationKind, NotificationState
from incidents.models import Channel, Drill, Notification
from incidents.services import OUTBOX_HORIZON, integration_enabled
from scaling.choices import BreakerScope, BreakerState, ShiftPhase
from scaling.models import BreakerTransition, FallbackEvent, TrafficShiftEvent

BATCH = 200
# Fallback event kinds worth a message: entries, exits and a person's decisions. Writes, share changes and
# a person's `restore` (its `route_restored` follows) are on the activation's timeline only.
FALLBACK_KINDS = frozenset({"entered", "waiting_approval", "approved", "forced", "reactivated", "return_started",
                            "route_restored", "rejected", "lapsed", "failed"})
SHIFT_PHASES = frozenset({ShiftPhase.COMPLETED, ShiftPhase.ROLLED_BACK, ShiftPhase.FAILED,
                          ShiftPhase.WAITING_APPROVAL})
MAX_DETAIL = 400


def _detail(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL - 1] + "…"


def _by(actor_name: str, channel: str) -> str:
    """'' for Headroom itself, else ' by <person>' (a person's action says who took it)."""
    return "" if channel == ActorChannel.AUTO or actor_name.endswith(":system") else f" by {actor_name}"


# --- the sentences --------------------------------------------------------------------------------


def fallback_text(event: FallbackEvent) -> str | None:
    activation = event.activation
    pool, fallback = activation.pool.name, activation.fallback_pool.name
    percent = event.data.get("target_percent", activation.target_percent)
    why = _detail(event.comment)
    by = _by(event.actor_name, event.channel)
    texts = {
        "entered": f"Pool {pool} fell back{by}: {percent} % of its route now goes to its fallback pool {fallback}. "
                   f"Why: {why}.",
        "waiting_approval": f"Pool {pool} is overloaded and waits for an operator's approval to send traffic to its "
                            f"fallback pool {fallback}. Why: {why}.",
        "approved": f"The fallback of pool {pool} was approved{by}: {percent} % of its route goes to {fallback}.",
        "forced": f"The fallback of pool {pool} was set{by} to {percent} % of its route on {fallback}; it stays there "
                  "until a person restores it.",
        "reactivated": f"Pool {pool} is overloaded again: {percent} % of its route goes back to its fallback pool "
                       f"{fallback}. Why: {why}.",
        "return_started": f"Pool {pool} is taking its traffic back from its fallback pool {fallback} in steps; "
                          f"{percent} % still goes there. Why: {why}.",
        "route_restored": f"All of pool {pool}'s traffic is back on it: its fallback pool {fallback} carries none "
                          f"(fallback #{activation.pk} ended).",
        "rejected": f"The fallback entry of pool {pool} was turned down{by}: its traffic stays on it.",
        "lapsed": f"The fallback entry of pool {pool} lapsed: the overload passed before anyone approved it.",
        "failed": f"The fallback of pool {pool} stopped, and its route is left as it is now: check its weights "
                  f"between {pool} and {fallback}. Why: {why}.",
    }
    return texts.get(event.kind)


def breaker_text(transition: BreakerTransition) -> str | None:
    breaker, source, target = transition.breaker, transition.from_state, transition.to_state
    person = transition.channel != ActorChannel.AUTO
    tripped = target == BreakerState.OPEN and (source == BreakerState.CLOSED or person)
    reset = target == BreakerState.CLOSED
    if not (tripped or reset):
        return None  # half-open probes, and a failed probe re-opening it: the trip was announced
    if breaker.scope == BreakerScope.ENDPOINT:
        subject = f"The circuit breaker of endpoint {breaker.endpoint} of pool {breaker.pool.name}"
        effect = ("The endpoint is out of the route until probes succeed." if tripped
                  else "The endpoint is back in the route.")
    elif breaker.scope == BreakerScope.POOL:
        subject = f"The circuit breaker of pool {breaker.pool.name}"
        effect = ("If the pool has a fallback policy, its traffic may go to the fallback pool." if tripped
                  else "The pool as a whole answers normally again.")
    else:
        subject = "The system circuit breaker (errors across every pool)"
        effect = ("Pools with a fallback policy send their eligible traffic to their fallback pools." if tripped
                  else "Pools return from their fallbacks in steps once they are calm.")
    verb = "was opened" if tripped and person else "tripped" if tripped else "was closed" if person else "reset"
    by = _by(transition.actor_name, transition.channel)
    return f"{subject} {verb}{by}: {_detail(transition.reason)}. {effect}"


def shift_text(event: TrafficShiftEvent) -> str | None:
    if event.to_phase not in SHIFT_PHASES or event.from_phase == event.to_phase:
        return None
    shift = event.shift
    subject = (f"Traffic shift #{shift.pk} from pool {shift.from_pool.name} to pool {shift.to_pool.name} "
               f"(route {shift.route_name})")
    if event.to_phase == ShiftPhase.COMPLETED:
        return f"{subject} completed: pool {shift.to_pool.name} carries {shift.steps[-1]} % of the pair's traffic."
    if event.to_phase == ShiftPhase.ROLLED_BACK:
        started = shift.events.filter(to_phase=ShiftPhase.ROLLING_BACK, pk__lt=event.pk).order_by("-pk").first()
        why = f" Why: {_detail(started.comment)}." if started and started.comment else ""
        # Who rolled it back: the one who started the rollback (a rollback before any move is one event).
        by = _by(started.actor_name, started.channel) if started else _by(event.actor_name, event.channel)
        return f"{subject} was rolled back{by}: {_detail(event.comment)}.{why}"
    if event.to_phase == ShiftPhase.FAILED:
        # It leaves the route where it was, which is what the on-call must check or move by hand.
        weights = ", ".join(f"{backend} {weight}" for backend, weight in (shift.current_weights or {}).items())
        left = f" Headroom last confirmed the route at {weights}: check its weights." if weights else ""
        return f"{subject} failed and moves no more traffic: {_detail(event.comment)}.{left}"
    number = event.step + 1
    share = shift.steps[number - 1] if 0 < number <= len(shift.steps) else "?"
    return f"{subject} waits for an operator's approval before step {number} ({share} % to {shift.to_pool.name})."


# --- the fan-out ----------------------------------------------------------------------------------


def _enqueue(teams: Iterable[int | None], pool: Pool | None, text: str, now: datetime,
             channels_by_team: dict[int, list[Channel]]) -> list[int]:
    created = []
    for team_id in dict.fromkeys(teams):  # a shift between two pools of one team: one message
        for channel in channels_by_team.get(team_id, []) if team_id is not None else []:
            state, reason = NotificationState.PENDING, ""
            if not integration_enabled(channel.kind):
                state, reason = NotificationState.SKIPPED, f"the {channel.get_kind_display()} integration is switched off"
            elif pool is not None:
                try:
                    reason = channel.spec.quiet_reason(pool.priority, now)
                except ValueError:
                    reason = ""  # invalid settings fail the delivery, which says so
                state = NotificationState.SKIPPED if reason else state
            try:
                with transaction.atomic():
                    notification = Notification.objects.create(channel=channel, kind=NotificationKind.MESSAGE,
                                                               state=state, last_error=reason, next_attempt_at=now,
                                                               text=text)
            except IntegrityError:
                continue
            if state == NotificationState.PENDING:
                created.append(notification.pk)
    return created


def _take(queryset, now: datetime):  # noqa: ANN001, ANN202
    """New events, locked for this worker (others skip them), oldest first."""
    return list(queryset.select_for_update(skip_locked=True, of=("self",))
                .filter(notified_at__isnull=True, at__gte=now - OUTBOX_HORIZON).order_by("id")[:BATCH])


def fan_out(now: datetime | None = None) -> list[int]:
    """Announce new fallback, breaker and shift events to the teams' enabled channels, once each.
    Returns the ids of the notifications to deliver."""
    now = now or timezone.now()
    created: list[int] = []
    with transaction.atomic():
        fallback_events = _take(FallbackEvent.objects.select_related(
            "activation__pool", "activation__fallback_pool"), now)
        transitions = _take(BreakerTransition.objects.select_related("breaker__pool"), now)
        shift_events = _take(TrafficShiftEvent.objects.select_related("shift__from_pool", "shift__to_pool"), now)
        if not (fallback_events or transitions or shift_events):
            return created
        # (teams, the pool whose tier the quiet rules read, the sentence); None: nothing to say
        messages: list[tuple[list[int | None], Pool | None, str | None]] = []
        for event in fallback_events:
            activation = event.activation
            messages.append(([activation.pool.team_id, activation.fallback_pool.team_id], activation.pool,
                             fallback_text(event)))
        for transition in transitions:
            pool = transition.breaker.pool
            teams = [pool.team_id] if pool is not None else list(Team.objects.values_list("pk", flat=True))
            messages.append((teams, pool, breaker_text(transition)))
        for event in shift_events:
            shift = event.shift
            messages.append(([shift.to_pool.team_id, shift.from_pool.team_id], shift.to_pool, shift_text(event)))
        pools = {pool.pk for _, pool, _ in messages if pool is not None}
        drills = set(Drill.objects.filter(pool_id__in=pools).values_list("pool_id", flat=True))
        team_ids = {team for teams, _, text in messages if text for team in teams if team is not None}
        channels_by_team: dict[int, list[Channel]] = {}
        for channel in Channel.objects.filter(team_id__in=team_ids, enabled=True).order_by("pk"):
            channels_by_team.setdefault(channel.team_id, []).append(channel)
        for teams, pool, text in messages:
            if text and not (pool is not None and pool.pk in drills):  # a drill's moves are practice
                created += _enqueue(teams, pool, text, now, channels_by_team)
        for model, rows in ((FallbackEvent, fallback_events), (BreakerTransition, transitions),
                            (TrafficShiftEvent, shift_events)):
            model.objects.filter(pk__in=[row.pk for row in rows]).update(notified_at=now)
    return created
