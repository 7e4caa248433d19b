"""Alert workflows: evaluate the rules, move alerts through their states, hold back, notify.

`evaluate_alerts` reads what the control loop stored for each pool (the last decision and signals in
PlannerMemory, recent SignalSamples, measured cold starts), records one SLO observation per tick for
the burn-rate windows, asks the pure rules (incidents/rules.py) for verdicts and applies them under
row locks: one active alert per fingerprint, an AlertEvent for every transition. `evaluate_heartbeats`
judges the loop itself and must run apart from the tick (the beat does it). A firing alert that no
silence and no warming scale-up holds back queues one message per channel; its resolve queues one
more where the first went out. A firing alert resolves only once its condition has read OK for its rule's
resolve hold (`Alert.clear_since` counts it; docs/alerts.md, "Resolving: the hold"): a condition back within
the hold continues the same alert and sends nothing. Delivery is the outbox's (incidents/services.py `deliver`).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Avg, Count, Min, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Least, TruncHour
from django.utils import timezone

from controlplane import services as core
from controlplane.models import SLO, Cluster, Pool, Team
from incidents import incidents, rules, trends
from incidents.choices import ACTIVE_ALERT_STATES, ALERT_TRANSITIONS, AlertState, NotificationKind, NotificationState
from incidents.models import Alert, AlertEvent, Channel, Drill, HourlyRollup, Notification, Silence, SloSample
from incidents.services import NotificationError, integration_enabled
from scaling.choices import ProposalState
from scaling.models import ColdStart, PlannerMemory, PoolStatus, Proposal, SignalSample

logger = logging.getLogger(__name__)

DEFAULT_COLD_START_S = 90.0  # as scaling.loop: a pool's expected cold start until one is measured
HISTORY = timedelta(minutes=10)  # queue growth reads 6 minutes, the outage rule the last known rate
TREND_HISTORY = timedelta(days=trends.HISTORY_DAYS)  # the rules over days read hourly means this far back
SLO_SAMPLE_RETENTION = timedelta(seconds=max(rules.BURN_WINDOWS_S) + 3600)


class AlertError(NotificationError):
    pass


class InvalidMatchers(AlertError):
    def payload(self) -> dict[str, Any]:
        return {"matchers": [str(self)]}


@dataclass
class Evaluation:
    """What one evaluation changed: alert ids by new state, notifications to deliver, pools that failed."""

    changed: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    notifications: list[int] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


# --- reading the loop's records ---------------------------------------------------------------------


@dataclass(frozen=True)
class TickRecord:
    """What the loop stored for a pool at its last tick (PlannerMemory), read and checked once."""

    decided_at: datetime | None = None
    decision: dict[str, Any] = field(default_factory=dict)
    signals: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, memory: PlannerMemory | None) -> TickRecord:
        """Raises ValueError when the record cannot be read (a partial write, an older format)."""
        if memory is None:
            return cls()
        decision, signals = memory.last_decision or {}, memory.last_signals or {}
        if not isinstance(decision, dict) or not isinstance(signals, dict):
            raise ValueError("the planner's last decision and signals must be JSON objects")
        raw = decision.get("at")
        if not raw:
            return cls(None, decision, signals)
        decided_at = datetime.fromisoformat(raw) if isinstance(raw, str) else None
        if decided_at is None or decided_at.tzinfo is None:
            raise ValueError(f"the last decision's time {raw!r} is not an ISO 8601 time with its offset")
        return cls(decided_at, decision, signals)


def slo_observations(pool: Pool, record: TickRecord) -> list[SloSample]:
    """The tick's observation of each of the pool's SLOs (none before its first decision)."""
    if record.decided_at is None:
        return []
    observed = ((slo, rules.slo_observation(slo.indicator, slo.threshold, record.signals)) for slo in pool.slos.all())
    return [SloSample(slo=slo, at=record.decided_at, bad=bad_total[0], total=bad_total[1])
            for slo, bad_total in observed if bad_total is not None]


def record_slo_samples(pools: Sequence[Pool], rows: list[SloSample], now: datetime) -> None:
    """One observation per SLO per tick, keyed by the tick's time: evaluating twice writes it once."""
    SloSample.objects.bulk_create(rows, ignore_conflicts=True)
    SloSample.objects.filter(slo__pool__in=pools, at__lt=now - SLO_SAMPLE_RETENTION).delete()


def slo_totals(pools: Sequence[Pool], now: datetime) -> dict[int, dict[float, rules.WindowTotals]]:
    """Every window's sums for every SLO of these pools, in one query."""
    aggregates: dict[str, Any] = {}
    for window_s in rules.BURN_WINDOWS_S:
        inside = Q(at__gt=now - timedelta(seconds=window_s))
        aggregates |= {f"bad_{window_s:g}": Sum("bad", filter=inside), f"total_{window_s:g}": Sum("total", filter=inside),
                       f"n_{window_s:g}": Count("pk", filter=inside), f"oldest_{window_s:g}": Min("at", filter=inside)}
    since = now - timedelta(seconds=max(rules.BURN_WINDOWS_S))
    rows = SloSample.objects.filter(slo__pool__in=pools, at__gt=since, at__lte=now).values("slo_id").annotate(**aggregates)
    return {row["slo_id"]: {w: _totals(row, w, now) for w in rules.BURN_WINDOWS_S} for row in rows}


def _totals(row: dict[str, Any], window_s: float, now: datetime) -> rules.WindowTotals:
    oldest = row[f"oldest_{window_s:g}"]
    return rules.WindowTotals(row[f"bad_{window_s:g}"] or 0.0, row[f"total_{window_s:g}"] or 0.0, row[f"n_{window_s:g}"],
                              (now - oldest).total_seconds() if oldest else 0.0)


def _hourly_means(samples: QuerySet[SignalSample]) -> dict[int, list[list[float | None]]]:
    """Per pool, [hour start, mean rate, mean TTFT p95, mean prefix-cache hit rate] of each hour, oldest first."""
    rows = (samples.annotate(hour=TruncHour("at", tzinfo=UTC)).values("pool_id", "hour")
            .annotate(rate=Avg("request_rate_rps"), ttft=Avg("ttft_p95_s"), hit=Avg("prefix_cache_hit_rate"))
            .order_by("pool_id", "hour"))  # (the model's ordering by `at` would split the groups)
    hours: dict[int, list[list[float | None]]] = defaultdict(list)
    for row in rows:
        hours[row["pool_id"]].append([row["hour"].timestamp(), row["rate"], row["ttft"], row["hit"]])
    return hours


def _complete_hours(pool: Pool, rollup: HourlyRollup | None, hour_start: datetime) -> list[list[float | None]]:
    """The pool's complete hours of the last 8 days before `hour_start`: the stored rollup, brought up to
    date with the hours completed since (and stored, unless another worker did it first)."""
    oldest = hour_start - TREND_HISTORY
    if rollup is not None and rollup.through == hour_start:
        return rollup.hours
    if rollup is not None and hour_start < rollup.through <= hour_start + timedelta(hours=1):
        # A worker whose clock is just behind the one that stored the next hour (at the hour's turn).
        return [hour for hour in rollup.hours if hour[0] < hour_start.timestamp()]
    known = rollup is not None and oldest <= rollup.through < hour_start
    since = rollup.through if known else oldest
    added = _hourly_means(SignalSample.objects.filter(pool=pool, at__gte=since, at__lt=hour_start)).get(pool.pk, [])
    hours = [h for h in rollup.hours if h[0] >= oldest.timestamp()] + added if known else added
    if rollup is None:
        try:
            with transaction.atomic():
                HourlyRollup.objects.create(pool=pool, through=hour_start, hours=hours)
        except IntegrityError:
            pass  # another worker created it a moment ago
    elif rollup.through < hour_start:  # (a rollup ahead of this evaluation's clock is left as it is)
        HourlyRollup.objects.filter(pk=rollup.pk, through=rollup.through).update(through=hour_start, hours=hours)
    return hours


def hourly_history(pools: Sequence[Pool], now: datetime) -> dict[int, list[trends.Hour]]:
    """Every pool's hourly means over 8 days: the stored complete hours (one more aggregated per pool
    per hour) and the hour in progress, read for all pools in one grouped query."""
    hour_start = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    rollups = {rollup.pool_id: rollup for rollup in HourlyRollup.objects.filter(pool__in=pools)}
    current = _hourly_means(SignalSample.objects.filter(pool__in=pools, at__gte=hour_start, at__lte=now))
    return {pool.pk: [trends.Hour(*hour) for hour in _complete_hours(pool, rollups.get(pool.pk), hour_start)
                      + current.get(pool.pk, [])] for pool in pools}


def pool_facts(pools: Sequence[Pool], now: datetime, errors: dict[str, str]) -> dict[int, rules.PoolFacts]:
    """The rules' inputs for every pool, read in a fixed number of queries.

    A pool whose stored records cannot be read is left out (logged, and reported in `errors`): its
    alerts stay where they are, and every other pool is still evaluated."""
    memories = {m.pool_id: m for m in PlannerMemory.objects.filter(pool__in=pools)}
    records: dict[int, TickRecord] = {}
    observations: list[SloSample] = []
    for pool in pools:
        try:
            record = TickRecord.read(memories.get(pool.pk))
            observations += slo_observations(pool, record)
        except Exception as exc:  # noqa: BLE001 - one unreadable record skips its pool, never every pool
            _report(pool, exc, errors)
            continue
        records[pool.pk] = record
    pools = [pool for pool in pools if pool.pk in records]
    if not pools:
        return {}
    record_slo_samples(pools, observations, now)
    totals = slo_totals(pools, now)
    history: dict[int, list[rules.Sample]] = defaultdict(list)
    samples = SignalSample.objects.filter(pool__in=pools, at__gt=now - HISTORY, at__lte=now).order_by("at")
    for pool_id, at, queue, rate in samples.values_list("pool_id", "at", "queue_depth", "request_rate_rps"):
        history[pool_id].append(rules.Sample(at.timestamp(), queue, rate))
    latest_cold = ColdStart.objects.filter(pool=OuterRef("pk")).order_by("-measured_at", "-pk").values("seconds")[:1]
    cold = dict(Pool.objects.filter(pk__in=[p.pk for p in pools]).annotate(latest=Subquery(latest_cold))
                .values_list("pk", "latest"))
    hours = hourly_history(pools, now)
    refusals = dict(PoolStatus.objects.filter(pool__in=pools, scale_checked_at__isnull=False)
                    .values_list("pool_id", "scale_refusal"))
    facts = {}
    for pool in pools:
        record = records[pool.pk]
        decision, decided_at = record.decision, record.decided_at
        slos = [rules.SloFacts(slo.pk, slo.short, slo.objective,
                               totals.get(slo.pk, {})) for slo in pool.slos.all()]
        facts[pool.pk] = rules.PoolFacts(
            pool_id=pool.pk, now_s=now.timestamp(), decided_at_s=decided_at.timestamp() if decided_at else None,
            signals=record.signals,
            staleness_alert=bool(decision.get("staleness_alert")),
            signals_unknown_for_s=decision.get("signals_unknown_for_s"),
            history=history.get(pool.pk, []), slos=slos,
            cold_start_latest_s=cold.get(pool.pk), cold_start_p95_s=pool.cold_start_p95_s,
            hours=hours.get(pool.pk, []), max_replicas=pool.max_replicas,
            capacity_per_replica_rps=decision.get("capacity_per_replica_rps") or pool.replica_capacity_rps,
            scale_refusal=refusals.get(pool.pk),
        )
    return facts


def warming_scale_ups(pools: Sequence[Pool], now: datetime) -> dict[int, list[rules.Warming]]:
    """Approved scale-ups not yet Ready, each expected Ready one cold-start p95 after it was applied
    (or approved, while the cluster has not accepted it yet)."""
    by_pk = {pool.pk: pool for pool in pools}
    warming: dict[int, list[rules.Warming]] = defaultdict(list)
    rows = Proposal.objects.filter(pool__in=pools, state__in=[ProposalState.APPROVED, ProposalState.EXECUTING],
                                   decided_at__isnull=False)
    for proposal in rows.only("pk", "pool_id", "current_replicas", "target_replicas", "decided_at", "applied_at"):
        pool = by_pk[proposal.pool_id]
        since = proposal.applied_at or proposal.decided_at
        cold_start_s = pool.cold_start_p95_s or DEFAULT_COLD_START_S
        warming[pool.pk].append(rules.Warming(proposal.pk, proposal.current_replicas, proposal.target_replicas,
                                              since.timestamp(), since.timestamp() + cold_start_s))
    return warming


def active_silences(team_ids: Iterable[int], now: datetime) -> dict[int, list[tuple[Silence, tuple[rules.Matcher, ...]]]]:
    silences: dict[int, list[tuple[Silence, tuple[rules.Matcher, ...]]]] = defaultdict(list)
    for silence in Silence.objects.filter(team_id__in=set(team_ids), starts_at__lte=now, ends_at__gt=now).order_by("pk"):
        try:
            silences[silence.team_id].append((silence, rules.parse_matchers(silence.matchers)))
        except ValueError:
            logger.warning("silence %s has invalid matchers; it matches nothing", silence.pk)
    return silences


def last_ticks(now: datetime) -> dict[int, datetime | None]:
    """Per cluster with pools, the newest record of a tick: a stored sample or a pool's recorded failure."""
    newest = SignalSample.objects.filter(pool=OuterRef("pk"), at__lte=now).order_by("-at").values("at")[:1]
    ticks: dict[int, datetime | None] = {}
    for cluster_id, sampled, failed in Pool.objects.annotate(sampled=Subquery(newest)).values_list(
            "cluster_id", "sampled", "planner__last_error_at"):
        known = [at for at in (sampled, failed, ticks.get(cluster_id)) if at is not None]
        ticks[cluster_id] = max(known) if known else None
    return ticks


# --- evaluating --------------------------------------------------------------------------------------


def evaluate_alerts(pools: Iterable[Pool] | None = None, now: datetime | None = None) -> Evaluation:
    """Evaluate every pool's alert rules from the loop's last tick (all pools by default).

    Idempotent and safe from several workers at once; one pool's failure is logged and reported,
    the others are still evaluated. The tick may call it for the pools it planned, the beat calls it for all.
    """
    now = now or timezone.now()
    pools = list(pools) if pools is not None else list(Pool.objects.select_related("cluster", "team").prefetch_related("slos"))
    # A drill's pool is the sandbox's: the drill opens its own incident, and never pages anyone.
    drilled = set(Drill.objects.filter(pool__in=pools).values_list("pool_id", flat=True))
    pools = [pool for pool in pools if pool.pk not in drilled]
    result = Evaluation()
    if not pools:
        return result
    facts = pool_facts(pools, now, result.errors)
    warming = warming_scale_ups(pools, now)
    silences = active_silences({pool.team_id for pool in pools}, now)
    for pool in pools:
        if pool.pk not in facts:
            continue  # its records could not be read (reported)
        try:
            verdicts = rules.evaluate_pool(facts[pool.pk])
            apply_verdicts(pool.team, pool.cluster, pool, verdicts, warming.get(pool.pk, []), silences, now, result)
        except Exception as exc:  # noqa: BLE001 - this pool's alerts wait for the next evaluation
            _report(pool, exc, result.errors)
    _deliver_on_commit(result.notifications)
    return result


def _report(pool: Pool, exc: Exception, errors: dict[str, str]) -> None:
    logger.error("alert evaluation failed for pool %s", pool, exc_info=exc)
    errors[str(pool)] = f"{type(exc).__name__}: {exc}"[:500]


def evaluate_heartbeats(now: datetime | None = None) -> Evaluation:
    """The control loop's heartbeat per cluster: firing when no tick was recorded for 60 s."""
    now = now or timezone.now()
    result = Evaluation()
    ticks = last_ticks(now)
    # A cluster whose pools were all removed has no heartbeat left to judge: its alert resolves as an orphan.
    orphaned = (Alert.objects.filter(rule=rules.HEARTBEAT.key, pool__isnull=True, state__in=ACTIVE_ALERT_STATES)
                .exclude(cluster__in=list(ticks)).values("cluster"))
    # A drill's cluster stops ticking when the drill ends: that is no control loop down.
    clusters = (Cluster.objects.filter(Q(pk__in=list(ticks)) | Q(pk__in=orphaned))
                .exclude(pools__drills__isnull=False).select_related("team"))
    silences = active_silences({cluster.team_id for cluster in clusters}, now)
    for cluster in clusters:
        verdicts: list[rules.Verdict] = []
        if cluster.pk in ticks:
            last = ticks[cluster.pk]
            verdicts.append(rules.heartbeat(cluster.pk, last.timestamp() if last else None, now.timestamp()))
        apply_verdicts(cluster.team, cluster, None, verdicts, [], silences, now, result)
    _deliver_on_commit(result.notifications)
    return result


def apply_verdicts(team: Team, cluster: Cluster, pool: Pool | None, verdicts: Sequence[rules.Verdict],
                   warming: Sequence[rules.Warming], silences: dict, now: datetime, result: Evaluation) -> None:
    """Apply one group's verdicts (a pool's, or a cluster's heartbeat) under row locks."""
    scope = Q(pool=pool) if pool is not None else Q(cluster=cluster, pool__isnull=True)
    with transaction.atomic():
        active = {a.fingerprint: a for a in Alert.objects.select_for_update().filter(scope, state__in=ACTIVE_ALERT_STATES)}
        for verdict in verdicts:
            alert = _apply(team, cluster, pool, active.pop(verdict.fingerprint, None), verdict, now, result)
            if alert is not None:
                _hold_back(alert, verdict.rule, warming, silences.get(team.pk, []), now)
                _open_or_clear_incident(alert, now)
                _notify(alert, pool, now, result)
        for orphan in active.values():  # its rule is gone (an SLO was deleted, a cluster's last pool removed)
            if now < orphan.last_evaluated_at:
                continue  # an evaluation older than the last one (see _apply): a later one resolves it
            if orphan.clear_since is not None:  # in its hold: the resolve message must not promise one
                orphan.summary = f"{rules.without_hold(orphan.summary)}; the rule no longer exists"
                orphan.save(update_fields=["summary"])
            if _transition(orphan, AlertState.RESOLVED if orphan.state == AlertState.FIRING else AlertState.CLEARED,
                           "the rule no longer exists", now):
                result.changed[orphan.state].append(orphan.pk)
                _open_or_clear_incident(orphan, now)
                _notify(orphan, pool, now, result)


def _open_or_clear_incident(alert: Alert, now: datetime) -> None:
    """A firing P0/P1 alert opens or joins its pool's incident; a resolve may suggest closing it. An alert in
    its resolve hold (its condition clear) opens nothing: a silence ending then must not open an incident."""
    if alert.state == AlertState.FIRING and alert.clear_since is None:
        incidents.on_alert_firing(alert, now)
    elif alert.state == AlertState.RESOLVED:
        incidents.on_alert_resolved(alert, now)


def _apply(team: Team, cluster: Cluster, pool: Pool | None, alert: Alert | None, verdict: rules.Verdict,
           now: datetime, result: Evaluation) -> Alert | None:
    if alert is not None and now < alert.last_evaluated_at:
        # Evaluations arrive out of order (the tick evaluates at its start time, the beat at its own now):
        # an older one than the last has nothing to add, and applied it would move timestamps backwards.
        return None
    now_s = now.timestamp()
    state = alert.state if alert else None
    for_s = verdict.rule.for_s * settings.ALERT_HOLD_SCALE
    if alert is not None and state == AlertState.PENDING:
        if verdict.status == rules.UNKNOWN:
            return alert  # held as it is: its last evaluation stays the last one that had a reading
        if (now - alert.last_evaluated_at).total_seconds() > for_s + rules.PENDING_GAP_S:
            alert.started_at = now  # seen again after a gap: its `for` starts over
            alert.save(update_fields=["started_at"])
    since = alert.started_at.timestamp() if alert else None
    keep_s = (verdict.rule.keep_firing_for_s or 0.0) * settings.ALERT_HOLD_SCALE
    cleared = alert.clear_since if alert else None
    move = rules.advance(state, since, verdict.status, for_s, now_s, keep_firing_for_s=keep_s,
                         clear_since_s=cleared.timestamp() if cleared else None)
    to_state = move.state
    if alert is None:
        if to_state is None:
            return None
        alert = _open(team, cluster, pool, verdict, to_state, now)
        if alert is not None:
            result.changed[alert.state].append(alert.pk)
        return alert
    # The new clear-since is none, the stored one, or now (kept as datetimes: no float round trip).
    if move.clear_since_s is None:
        alert.clear_since = None
    elif cleared is None or move.clear_since_s != cleared.timestamp():
        alert.clear_since = now
    summary = verdict.summary
    if verdict.status != rules.UNKNOWN:
        numbers = dict(verdict.numbers)
        if state == AlertState.FIRING and alert.clear_since is not None and keep_s > 0:  # in its hold, or at its end
            clear_for_s = (now - alert.clear_since).total_seconds()
            numbers |= {"clear_for_s": clear_for_s, "keep_firing_for_s": keep_s}
            summary = rules.clearing_summary(summary, clear_for_s, keep_s, resolved=to_state == AlertState.RESOLVED)
        alert.summary, alert.numbers = summary, numbers
    alert.last_evaluated_at = now
    alert.save(update_fields=["summary", "numbers", "clear_since", "last_evaluated_at"])
    if to_state is not None and _transition(alert, to_state, summary, now):
        result.changed[to_state].append(alert.pk)
    return alert


def _open(team: Team, cluster: Cluster, pool: Pool | None, verdict: rules.Verdict, state: str, now: datetime) -> Alert | None:
    labels = dict(verdict.labels) | {"tier": verdict.rule.tier, "cluster": str(cluster.pk)}
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                team=team, cluster=cluster, pool=pool, rule=verdict.rule.key, tier=verdict.rule.tier,
                fingerprint=verdict.fingerprint, labels=labels, state=state, summary=verdict.summary,
                numbers=dict(verdict.numbers), started_at=now, last_evaluated_at=now,
                fired_at=now if state == AlertState.FIRING else None,
            )
            AlertEvent.objects.create(alert=alert, at=now, to_state=state, reason=verdict.summary,
                                      data=dict(verdict.numbers))
    except IntegrityError:
        return None  # another worker opened it a moment ago; the next evaluation carries on with it
    return alert


def _transition(alert: Alert, to_state: str, reason: str, now: datetime) -> bool:
    """Move an alert if its state still allows it (a conditional UPDATE), with its event row."""
    if to_state not in ALERT_TRANSITIONS.get(alert.state, frozenset()):
        return False
    stamps = {"fired_at": now} if to_state == AlertState.FIRING else {"resolved_at": now}
    if not Alert.objects.filter(pk=alert.pk, state=alert.state).update(state=to_state, **stamps):
        return False
    AlertEvent.objects.create(alert=alert, at=now, from_state=alert.state, to_state=to_state, reason=reason,
                              data=dict(alert.numbers or {}))
    alert.state = to_state
    for name, value in stamps.items():
        setattr(alert, name, value)
    return True


def _note(alert: Alert, reason: str, now: datetime, **data: Any) -> None:
    AlertEvent.objects.create(alert=alert, at=now, from_state=alert.state, to_state=alert.state, reason=reason, data=data)


def _hold_back(alert: Alert, rule: rules.Rule, warming: Sequence[rules.Warming],
               silences: Sequence[tuple[Silence, tuple[rules.Matcher, ...]]], now: datetime) -> None:
    """Record which warming scale-up and which silence hold this alert back, noting each change."""
    if alert.state not in ACTIVE_ALERT_STATES:
        return
    held = rules.inhibitor(rule, warming, now.timestamp())
    proposal_id, reason = held if held else (None, "")
    silence = next((s for s, matchers in silences if rules.matches(matchers, alert.labels)), None)
    changed = False
    if proposal_id != alert.inhibited_by_id:
        _note(alert, reason or "no longer held back: the scale-up is ready, failed or overdue", now,
              inhibited_by=proposal_id)
        changed = True
    if (silence.pk if silence else None) != alert.silenced_by_id:
        _note(alert, f"silenced by silence #{silence.pk} until {silence.ends_at:%Y-%m-%d %H:%M} UTC" if silence
              else "silence ended", now, silenced_by=silence.pk if silence else None)
        changed = True
    if changed or alert.inhibited_reason != reason:  # the countdown in the reason moves on every tick
        alert.inhibited_by_id, alert.inhibited_reason = proposal_id, reason
        alert.silenced_by = silence
        alert.save(update_fields=["inhibited_by", "inhibited_reason", "silenced_by"])


# --- notifying ---------------------------------------------------------------------------------------


def _notify(alert: Alert, pool: Pool | None, now: datetime, result: Evaluation) -> None:
    """One message per channel when an alert fires and nothing holds it back; one when it resolves. An alert
    in its resolve hold is not announced (a silence or a scale-up that stops holding it back then would page
    for a condition already clear): it is once its condition returns, and resolves silently if it does not."""
    if (alert.state == AlertState.FIRING and not alert.held_back and alert.announced_at is None
            and alert.clear_since is None):
        if Alert.objects.filter(pk=alert.pk, announced_at__isnull=True).update(announced_at=now):
            alert.announced_at = now
            channels = Channel.objects.filter(team_id=alert.team_id, enabled=True)
            result.notifications += _enqueue(channels, alert, NotificationKind.ALERT_FIRING, pool, now)
    elif alert.state == AlertState.RESOLVED and alert.announced_at is not None:
        # Only channels that heard it fire hear it resolve. A firing message still waiting (a retry, a
        # disabled channel) is skipped when its turn comes (`services.deliver`), so no channel ends on
        # "firing" for an alert that is over; one in flight now gets its resolve once delivered
        # (`resolve_after_late_firing`).
        told = Notification.objects.filter(alert=alert, kind=NotificationKind.ALERT_FIRING,
                                           state=NotificationState.DELIVERED).values("channel_id")
        channels = Channel.objects.filter(pk__in=told, enabled=True)
        result.notifications += _enqueue(channels, alert, NotificationKind.ALERT_RESOLVED, pool, now)


def resolve_after_late_firing(firing: Notification, now: datetime) -> None:
    """A firing message delivered after its alert resolved (it was being sent at the time): its channel
    hears the resolve too."""
    alert = Alert.objects.filter(pk=firing.alert_id, state=AlertState.RESOLVED).first()
    if alert is not None:
        _deliver_on_commit(_enqueue([firing.channel], alert, NotificationKind.ALERT_RESOLVED, None, now))


def _enqueue(channels: Iterable[Channel], alert: Alert, kind: str, pool: Pool | None, now: datetime) -> list[int]:
    created = []
    for channel in channels:
        state, reason = NotificationState.PENDING, ""
        if not integration_enabled(channel.kind):
            state, reason = NotificationState.SKIPPED, f"the {channel.get_kind_display()} integration is switched off"
        elif pool is not None and kind == NotificationKind.ALERT_FIRING and (quiet := _quiet_reason(channel, pool, now)):
            state, reason = NotificationState.SKIPPED, quiet
        try:
            with transaction.atomic():
                notification = Notification.objects.create(channel=channel, alert=alert, kind=kind, state=state,
                                                           last_error=reason, next_attempt_at=now)
        except IntegrityError:
            continue  # this alert's message of this kind exists already
        if state == NotificationState.PENDING:
            created.append(notification.pk)
    return created


def _quiet_reason(channel: Channel, pool: Pool, now: datetime) -> str:
    try:
        return channel.spec.quiet_reason(pool.priority, now)
    except ValueError:
        return ""  # invalid settings fail the delivery, which says so


def _deliver_on_commit(notification_ids: list[int]) -> None:
    if not notification_ids:
        return
    from incidents import tasks  # tasks import this module

    for notification_id in notification_ids:
        transaction.on_commit(lambda pk=notification_id: tasks.deliver_notification.delay(pk), robust=True)


# --- silences ----------------------------------------------------------------------------------------


def create_silence(team: Team, matchers: object, ends_at: datetime, actor: core.Actor, *, comment: str = "",
                   starts_at: datetime | None = None, now: datetime | None = None) -> Silence:
    """Mute the team's matching alerts until `ends_at`. Raises AlertError on bad times, InvalidMatchers
    on matchers no alert of the team can carry (the one check of every way a silence is made)."""
    now = now or timezone.now()
    starts_at = starts_at or now
    check_matchers(team, matchers)
    if ends_at <= max(starts_at, now):
        raise AlertError("A silence must end in the future and after it starts.")
    user = actor.user if isinstance(actor.user, AbstractBaseUser) else None
    with transaction.atomic():
        silence = Silence.objects.create(team=team, matchers=matchers, comment=comment, created_by=user,
                                         starts_at=starts_at, ends_at=ends_at)
        core.record(actor, "create", silence, team=team)
    return silence


def check_matchers(team: Team, matchers: object) -> None:
    """Raise InvalidMatchers unless some alert of the team could match: a known rule and tier (rules.py),
    and pool, cluster and slo ids of the team's own that fit together."""
    try:
        ids = {m.label: int(m.value) for m in rules.validate_matchers(matchers) if m.label in rules.ID_LABELS}
    except ValueError as exc:
        raise InvalidMatchers(str(exc)) from exc
    pool = Pool.objects.filter(team=team, pk=ids["pool"]).first() if "pool" in ids else None
    slo = SLO.objects.select_related("pool").filter(pool__team=team, pk=ids["slo"]).first() if "slo" in ids else None
    # A team's alerts carry a cluster of its own (the heartbeat) or one its pools run in.
    cluster = (Cluster.objects.filter(Q(team=team) | Q(pools__team=team), pk=ids["cluster"]).first()
               if "cluster" in ids else None)
    for label, found in (("pool", pool), ("cluster", cluster), ("slo", slo)):
        if label in ids and found is None:
            raise InvalidMatchers(f"team {team.slug} has no {label} {ids[label]}: this silence would match nothing")
    if pool is not None and cluster is not None and pool.cluster_id != cluster.pk:
        raise InvalidMatchers(f"pool {pool.pk} runs in cluster {pool.cluster_id}, not {cluster.pk}")
    if slo is not None and pool is not None and slo.pool_id != pool.pk:
        raise InvalidMatchers(f"slo {slo.pk} belongs to pool {slo.pool_id}, not {pool.pk}")
    if slo is not None and cluster is not None and slo.pool.cluster_id != cluster.pk:
        raise InvalidMatchers(f"slo {slo.pk} belongs to a pool in cluster {slo.pool.cluster_id}, not {cluster.pk}")


def expire_silence(silence: Silence, actor: core.Actor, now: datetime | None = None) -> bool:
    """End a silence now. Idempotent: False when it had already ended."""
    now = now or timezone.now()
    user = actor.user if isinstance(actor.user, AbstractBaseUser) else None
    with transaction.atomic():
        # A silence that has not started yet ends before it starts: its window shrinks to nothing.
        ended = Silence.objects.filter(pk=silence.pk, ends_at__gt=now).update(
            starts_at=Least("starts_at", Value(now)), ends_at=now, expired_by=user)
        if ended:
            core.record(actor, "expire_silence", silence, after={"ends_at": now.isoformat()}, team=silence.team)
    return bool(ended)


__all__ = ["AlertError", "Evaluation", "InvalidMatchers", "check_matchers", "create_silence", "evaluate_alerts",
           "evaluate_heartbeats", "expire_silence"]
