"""One iteration of the control loop: load → read → decide → gate → act → record (design.md §6).

`tick()` reads every pool's replicas from its cluster (Kubernetes API) and its signals from the
cluster's Prometheus (one batched query per signal per cluster), forecasts the request rate from
the stored history, runs the pure planner with its persisted memory, and turns the answer into
proposals (which policy may approve at once). It is what the Celery beat runs every 15 s and what
`manage.py tick` runs by hand. A cluster is ticked by one worker at a time (its `TickLease`); a
second worker skips it and says so. One pool's failure is recorded for that pool and the others
are still planned. The proposals also carry an idempotency key per pool, kind, target and minute.
"""
from __future__ import annotations

import logging
import math
import os
import socket
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction
from django.core.cache import cache
from django.db.models import Exists, Max, Min, OuterRef, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from controlplane import config, metrics
from controlplane import services as core
from controlplane.choices import Channel, SloIndicator
from controlplane.models import Cluster, Pool
from incidents.alerts import evaluate_alerts
from incidents.models import HourlyRollup, Incident, PlaybookRunStep
from incidents.timeline import LOOKBACK as INCIDENT_LOOKBACK
from scaling import forecast_store, glance, services, traffic
from scaling.choices import (
    ACTIVE_STATES,
    FALLBACK_OPEN_PHASES,
    PRESCALE_TRACK,
    TERMINAL_STATES,
    ProposalKind,
    ProposalState,
)
from scaling.drivers.cluster import DriverError
from scaling.drivers.prometheus import HistoryUnavailable, PrometheusConfig, PrometheusSignalSource
from scaling.drivers.registry import cluster_driver, workload_of
from scaling.drivers.signals import PoolSelector
from scaling.engine import constants, decide, planner
from scaling.engine import fallback as fallback_engine
from scaling.engine.planner import REACTIVE_BUSY, REACTIVE_RATE, Decision, ForecastPoint, PoolPlan, Term
from scaling.engine.signals import PoolSignals, Reading, work_share
from scaling.models import FallbackActivation, PlannerMemory, Proposal, SignalSample, TickLease

logger = logging.getLogger(__name__)

# The backfill fetches what the decide step reads (scaling/engine/decide.py).
FORECAST_BIN_S = decide.FORECAST_BIN_S
RECENT_HISTORY = timedelta(seconds=decide.RECENT_HISTORY_S)
SEASONAL_BIN_S = decide.SEASONAL_BIN_S
SEASONAL_HISTORY = timedelta(seconds=decide.SEASONAL_HISTORY_S)
BACKFILL_RETRY_S = 300  # a failed backfill is asked again after this long, not every tick
SAMPLE_PRUNE_BATCH = 10_000  # rows a tick deletes at most: a backlog (a shortened retention) drains over ticks
PROPOSAL_PRUNE_BATCH = 500  # proposals a tick deletes at most, each with its events and notifications
DEFAULT_COLD_START_S = decide.DEFAULT_COLD_START_S
ARRIVING_LOOKBACK = timedelta(hours=1)  # applied scale-ups older than this are no longer arriving
FAILED_CHANGE_HOLD_S = 15 * 60  # a change that failed is not proposed again for this long (act)


@dataclass(frozen=True)
class PoolTick:
    pool: str
    read: dict[str, Any]
    decided: dict[str, Any]
    did: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TickReport:
    at: str
    pools: list[PoolTick]
    errors: dict[str, str]
    expired: int
    skipped: dict[str, str] = field(default_factory=dict)  # cluster -> why this worker did not tick it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- reading ------------------------------------------------------------------------------------


def _signal_source(cluster: Cluster) -> PrometheusSignalSource | None:
    if not settings.PROMETHEUS_ENABLED or not cluster.prometheus_url:
        return None
    return PrometheusSignalSource(PrometheusConfig(cluster.prometheus_url, timeout_s=settings.PROMETHEUS_TIMEOUT_S,
                                                   rate_window=cluster.prometheus_rate_window,
                                                   deadline_s=settings.PROMETHEUS_DEADLINE_S))


def read_cluster(cluster: Cluster, pools: list[Pool], now: datetime) -> tuple[dict[int, PoolSignals], dict[str, str]]:
    """Every pool's signals: Prometheus for load and latency, the Kubernetes API for replicas."""
    errors: dict[str, str] = {}
    signals = {pool.pk: PoolSignals(pool=pool.name) for pool in pools}
    source = _signal_source(cluster)
    if source is not None:
        read = source.read([PoolSelector.of_deployment(str(pool.pk), pool.namespace, pool.deployment) for pool in pools])
        signals.update({int(key): value for key, value in read.pools.items()})
        errors.update({f"{cluster.name}: prometheus {name}": error for name, error in read.errors.items()})
    unknown = {"desired_replicas": Reading(), "arriving_replicas": Reading()}  # ready: as Prometheus saw it
    try:
        driver = cluster_driver(cluster)
    except DriverError as exc:
        errors[f"{cluster.name}: kubernetes"] = str(exc)
        # Without the cluster's word no replica count is known, whatever Prometheus sees.
        return {key: replace(value, **unknown) for key, value in signals.items()}, errors
    unanswered = ""
    for pool in pools:
        if unanswered:
            # An API server that did not answer one pool's read is not asked for the next: each would wait
            # out its own timeout, and a cluster of many pools would outlast its tick lease.
            errors[f"{pool}: kubernetes"] = f"not read this tick: {unanswered}"
            signals[pool.pk] = replace(signals[pool.pk], **unknown)
            continue
        try:
            status = driver.status(workload_of(pool))
        except Exception as exc:  # noqa: BLE001 - any failed read: this pool's replicas are unknown
            errors[f"{pool}: kubernetes"] = str(exc) if isinstance(exc, DriverError) else f"{type(exc).__name__}: {exc}"
            signals[pool.pk] = replace(signals[pool.pk], **unknown)
            if isinstance(exc, DriverError) and exc.status is None and not exc.permanent:  # a timeout, a refused connection
                unanswered = f"the API server did not answer {pool}'s read ({exc})"
            continue
        services.check_scalable(pool, services.record_status(pool, status, now), driver, now)
        fresh = lambda value: Reading(float(value), 0.0)  # noqa: E731 - read just now
        signals[pool.pk] = replace(
            signals[pool.pk], ready_replicas=fresh(status.ready), desired_replicas=fresh(status.desired),
            arriving_replicas=fresh(status.arriving),
        )
        # The slots the pool states, else the ones its Deployment's command line states.
        slots = pool.batch_slots or status.batch_slots
        signals[pool.pk] = replace(signals[pool.pk], work_share=work_share(signals[pool.pk], slots,
                                                                           pool.prefill_tokens_per_s))
    return signals, errors


def backfill_history(cluster: Cluster, pools: list[Pool], now: datetime) -> dict[str, str]:
    """Give pools new to Headroom their past request rate from Prometheus, once.

    Without it the 30-minute forecast has no daily or weekly history for 8 days. Two range
    queries per cluster (all pools at once): 10-minute steps over 8 days, 1-minute over 2 hours.
    """
    source = _signal_source(cluster)
    done = set(PlannerMemory.objects.filter(pool__in=pools, history_backfilled_at__isnull=False)
               .values_list("pool_id", flat=True))
    fresh = [pool for pool in pools if pool.pk not in done]
    retry_key = f"headroom:backfill-failed:{cluster.pk}"
    if source is None or not fresh or cache.get(retry_key):
        return {}
    selectors = [PoolSelector.of_deployment(str(pool.pk), pool.namespace, pool.deployment) for pool in fresh]
    end = now.timestamp()
    fine_start = end - RECENT_HISTORY.total_seconds()
    try:
        # The coarse range stops a step short of the fine one: both grids hold the instant they meet.
        coarse = source.rate_history(selectors, end - SEASONAL_HISTORY.total_seconds(), fine_start - SEASONAL_BIN_S,
                                     SEASONAL_BIN_S)
        fine = source.rate_history(selectors, fine_start, end - FORECAST_BIN_S, FORECAST_BIN_S)
    except HistoryUnavailable as exc:
        # A Prometheus too slow for 8 days of range queries would be asked again every tick, each costing a
        # timeout on top of the tick's deadline: it is asked again only after BACKFILL_RETRY_S.
        cache.set(retry_key, True, timeout=BACKFILL_RETRY_S)
        return {f"{cluster.name}: prometheus history": f"{exc} (retried in {BACKFILL_RETRY_S // 60} min)"}
    earliest = dict(SignalSample.objects.filter(pool__in=fresh).values("pool_id").annotate(first=Min("at"))
                    .values_list("pool_id", "first"))
    for pool in fresh:
        # Only before what the ticks already stored (a backfill that failed first, and came later).
        before = earliest[pool.pk].timestamp() if pool.pk in earliest else math.inf
        points = [(at, rate) for at, rate in coarse.get(str(pool.pk), []) + fine.get(str(pool.pk), []) if at < before]
        with transaction.atomic():
            SignalSample.objects.bulk_create(
                SignalSample(pool=pool, at=datetime.fromtimestamp(at, now.tzinfo), request_rate_rps=rate)
                for at, rate in points
            )
            # The forecasters start afresh from the history that now includes the backfill.
            PlannerMemory.objects.update_or_create(pool=pool, defaults={"history_backfilled_at": now,
                                                                        "seasonal_forecast": {}})
            # And so do the alert rules over days: their hourly rollup may have been built before it.
            HourlyRollup.objects.filter(pool=pool).delete()
    return {}


# --- planning inputs -----------------------------------------------------------------------------


def pool_plan(pool: Pool) -> PoolPlan:
    """The planner's view of a pool: its bounds, capacity, SLO and cold start, and its constants' overrides."""
    slo = next((s for s in pool.slos.all() if s.indicator == SloIndicator.TTFT_P95), None)
    slo_latency_s = slo.threshold / 1000.0 if slo else decide.DEFAULT_TTFT_P95_S
    plan = decide.pool_plan(
        capacity_rps_per_replica=pool.replica_capacity_rps,
        min_replicas=pool.min_replicas,
        max_replicas=pool.max_replicas,
        slo_latency_s=slo_latency_s,
        slo_percentile=0.95,  # the indicator is the TTFT p95
        unloaded_latency_s=min(0.2, slo_latency_s / 2),
        cold_start_p95_s=pool.cold_start_p95_s,
        warm_pool_fraction=pool.warm_pool_fraction,
        target_queue_per_replica=pool.target_queue_per_replica,
        # A live pool has no load-tested latency curve yet: latency may only lower the stated capacity.
        latency_window_s=pool.cluster.rate_window_s,
    )
    return constants.apply_overrides(plan, pool.planner_overrides)


class DatabaseHistory:
    """The decide step's `PoolHistory` of a live pool: its samples and proposals in the database."""

    def __init__(self, pool: Pool, now: datetime) -> None:
        self.pool, self.now = pool, now

    def rates_since(self, since_s: float) -> tuple[np.ndarray, np.ndarray]:
        rows = SignalSample.objects.filter(pool=self.pool, at__gt=datetime.fromtimestamp(since_s, self.now.tzinfo),
                                           request_rate_rps__isnull=False).order_by("at")
        values = list(rows.values_list("at", "request_rate_rps"))
        return (np.array([at.timestamp() for at, _ in values], dtype=float),
                np.array([rate for _, rate in values], dtype=float))

    def requested_at(self) -> list[float]:
        """Each replica added by a change applied in the last hour, at its applied time."""
        applied = Proposal.objects.filter(pool=self.pool, applied_at__gt=self.now - ARRIVING_LOOKBACK).order_by("applied_at")
        times: list[float] = []
        for at, target, before, current in applied.values_list("applied_at", "target_replicas",
                                                               "applied_from_replicas", "current_replicas"):
            added = target - (before if before is not None else current)
            times += [at.timestamp()] * max(0, added)
        return times

    def approved_floor(self, now_s: float) -> int:
        return approved_floor(self.pool, datetime.fromtimestamp(now_s, self.now.tzinfo))


def forecasts(pool: Pool, plan: PoolPlan, memory: PlannerMemory, now: datetime
              ) -> tuple[ForecastPoint | None, ForecastPoint | None, np.ndarray]:
    """The decide step's forecasts from the stored history (refreshing the cached 30-minute one)."""
    state = decide.decide_state_from(memory.state, forecast_store.unpack(memory.seasonal_forecast))
    lead, peak, recent, state = decide.forecasts(DatabaseHistory(pool, now), plan, now.timestamp(), math.nan, state)
    memory.seasonal_forecast = forecast_store.pack(decide.forecast_dict(state))
    return lead, peak, recent


def schedule_windows(pool: Pool, plan: PoolPlan, now: datetime) -> tuple[planner.ScheduleWindow, ...]:
    """Occurrences of the pool's weekly windows from yesterday to tomorrow, in epoch seconds.

    The planner pre-scales one lead time (cold start + decision delay) before a window starts; a
    window's own `lead_minutes` asks for more, so its start is moved earlier by the difference. An
    occurrence the planner acts on now carries the peak of the same window a week earlier (what its
    factor applies to when there is no forecast).
    """
    windows = []
    for window in pool.schedules.all():
        zone = ZoneInfo(window.time_zone)
        local_today = now.astimezone(zone).date()
        for offset in (-1, 0, 1):
            day = local_today + timedelta(days=offset)
            if day.weekday() != window.weekday:
                continue
            # Wall-clock times in the window's zone; a skipped or repeated time as config.occurrence says.
            start, end = config.occurrence(day, window.start, window.end, zone)
            extra_lead_s = max(0.0, window.lead_minutes * 60 - plan.lead_s)
            opens_s = start.timestamp() - extra_lead_s - plan.lead_s  # real seconds, across a DST change too
            last_peak = None
            if opens_s <= now.timestamp() < end.timestamp():
                last_peak = last_occurrence_peak(pool, *config.occurrence(day - timedelta(days=7), window.start,
                                                                          window.end, zone))
            windows.append(planner.ScheduleWindow(start.timestamp() - extra_lead_s, end.timestamp(),
                                                  window.prescale_factor - 1.0, last_peak_rps=last_peak))
    return tuple(windows)


def last_occurrence_peak(pool: Pool, start: datetime, end: datetime) -> float | None:
    """The highest request rate sampled in the window's occurrence a week earlier, from `start` to `end`
    (None: nothing sampled then)."""
    return SignalSample.objects.filter(pool=pool, at__gte=start, at__lt=end) \
        .aggregate(peak=Max("request_rate_rps"))["peak"]


def approved_floor(pool: Pool, now: datetime) -> int:
    """An approved pre-scale holds its target as a floor for the forecast window it was approved for."""
    # Each branch names its states, so the read is bounded by the index on (pool, state, floor_until), not by
    # every pre-scale that ever succeeded.
    active = Proposal.objects.filter(pool=pool, kind=ProposalKind.PRESCALE) \
        .filter(Q(state__in=services.APPROVED_STATES, floor_until__gt=now)
                | Q(state__in=[ProposalState.APPROVED, ProposalState.EXECUTING], floor_until__isnull=True))
    return max(active.values_list("target_replicas", flat=True), default=0)


# --- deciding and acting -------------------------------------------------------------------------


def _decision_dict(decision: Decision) -> dict[str, Any]:
    return {
        "target_replicas": decision.target_replicas,
        "current_replicas": decision.current_replicas,
        "ready_replicas": decision.ready_replicas,
        "arriving_replicas": decision.arriving_replicas,
        "binding": decision.binding,
        "reasons": list(decision.reasons),
        # A number not known this tick (NaN) is null: PostgreSQL's JSON has no NaN and refuses the save.
        "terms": [{"name": t.name, "replicas": t.replicas,
                   "numbers": {key: value if math.isfinite(value) else None for key, value in t.numbers.items()}}
                  for t in decision.terms],
        "hold": decision.hold,
        "signals_unknown_for_s": None if math.isinf(decision.signals_unknown_for_s) else decision.signals_unknown_for_s,
        "staleness_alert": decision.staleness_alert,
        "capacity_per_replica_rps": decision.capacity_per_replica_rps,
        "prescale": asdict(decision.prescale) if decision.prescale else None,
    }


def _evidence(recent: np.ndarray, lead: ForecastPoint | None, peak: ForecastPoint | None,
              capacity_rps: float, ready: int, target: int, rate_term: Term | None = None,
              busy_term: Term | None = None) -> dict[str, Any]:
    """The chart behind a proposal: the last 20 minutes observed, then the forecasts, against capacity;
    the rate a cold start ahead where the rate term planned for its growth; the GPU busy share where
    the busy-share term set the target (`busy_term` is passed only then)."""
    observed = [None if not math.isfinite(v) else round(float(v), 3) for v in recent[-20:]]
    ahead = [p for p in (lead, peak) if p is not None]
    extra: dict[str, float] = {}
    if rate_term is not None and rate_term.numbers.get("rate_growth", 1.0) > 1.0:
        extra["rate_ahead_rps"] = round(rate_term.numbers["rate_ahead_rps"], 3)
    if busy_term is not None and "busy_share" in busy_term.numbers:
        extra["busy_share"] = round(busy_term.numbers["busy_share"], 3)
        if "busy_rise" in busy_term.numbers:
            extra["busy_rise"] = round(busy_term.numbers["busy_rise"], 2)
    return {**extra,
        "window": f"last {len(observed)} min" + (
            f", then forecast at +{', +'.join(f'{p.horizon_s / 60:.0f}' for p in ahead)} min" if ahead else ""),
        "forecast_expected": observed + [round(p.expected_rps, 3) for p in ahead],
        "forecast_p90": [None] * len(observed) + [round(p.p90_rps, 3) for p in ahead],
        "capacity": [round(ready * capacity_rps, 3)] * len(observed) + [round(target * capacity_rps, 3)] * len(ahead),
        "capacity_per_replica_rps": round(capacity_rps, 3),  # corrected: the card's sentence reads it
    }


def _reason_list(decision: Decision) -> list[dict[str, str]]:
    details = []
    for term in decision.terms:
        if term.replicas is not None:
            numbers = ", ".join(f"{key}={value:.3g}" for key, value in term.numbers.items())
            details.append({"code": term.name, "detail": f"{term.replicas} replicas ({numbers})"})
    details.append({"code": decision.binding, "detail": "binding: " + ", ".join(decision.reasons)})
    return details


def act(pool: Pool, decision: Decision, evidence: dict[str, Any], signals: dict[str, Any], now: datetime) -> list[str]:
    """Turn a decision into at most one proposal; nothing when an active one already asks for it."""
    auto = core.Actor(user=None, channel=Channel.AUTO)
    current = decision.current_replicas
    change = decide.proposed_change(decision, pool.min_replicas, pool.max_replicas)
    if change is None or current is None:
        return []
    kind, target = ProposalKind(change[0]), change[1]
    if target < current and (shift := traffic.giving_shift(pool)) is not None:
        # Its rate fell because a shift moved requests away, and a rollback brings them back at once.
        return [f"no scale-down while shift #{shift.pk} moves traffic away ({shift.phase}): "
                "the pool keeps the capacity to take it back"]
    # Only proposals of the same track answer this decision: a pre-scale waiting for a person
    # never stands in for the reactive safety net, nor the other way round.
    if kind in PRESCALE_TRACK:
        if services.covering_prescale(pool, target) is not None:
            return []
    elif Proposal.objects.filter(pool=pool, state__in=ACTIVE_STATES, target_replicas=target) \
            .exclude(kind__in=PRESCALE_TRACK).exists():
        return []
    # The same change failed a moment ago (an autoscaler's ceiling below it, a role that may not write): made
    # again every minute it would fail, and be audited and announced, every minute. It waits a while instead.
    failed = Proposal.objects.filter(pool=pool, state=ProposalState.FAILED, target_replicas=target,
                                     finished_at__gt=now - timedelta(seconds=FAILED_CHANGE_HOLD_S))
    failed = failed.filter(kind__in=PRESCALE_TRACK) if kind in PRESCALE_TRACK else failed.exclude(kind__in=PRESCALE_TRACK)
    if (last := failed.order_by("-finished_at").first()) is not None:
        again = last.finished_at + timedelta(seconds=FAILED_CHANGE_HOLD_S)
        return [f"no proposal: the same change (#{last.pk}, {current} → {target}) failed at "
                f"{last.finished_at:%H:%M:%S} UTC ({last.last_error}); proposed again from {again:%H:%M:%S} UTC"]
    reasons = _reason_list(decision)
    if decision.prescale is not None:
        p = decision.prescale
        reasons.insert(0, {"code": planner.PRESCALE, "detail": (
            f"forecast peak {p.forecast_peak_rps:.2f} req/s is {p.ratio:.1f}x the current {p.current_rps:.2f} req/s "
            f"within {p.horizon_s / 60:.0f} min: warm pool {p.warm_pool_replicas} + 50 % buffer")})
    key = services.loop_idempotency_key(pool, kind, target, now)
    floor_until = now + timedelta(seconds=decision.prescale.horizon_s) if decision.prescale is not None else None
    try:
        proposal = services.propose(pool, target, kind, auto, current=current, reasons=reasons, signals=signals,
                                    evidence=evidence, idempotency_key=key, floor_until=floor_until, now=now)
    except (services.InvalidProposal, services.ProposalForbidden) as exc:
        return [f"no proposal: {exc}"]
    share = next((r for r in proposal.reasons if r.get("code") == services.SHARE_REASON), None)
    return [f"proposal #{proposal.pk} {kind} {current} → {target}: {proposal.state}"
            + (f" ({share['detail']}, proposal #{share['share']})" if share else "")]


# The readings each tick keeps in SignalSample (the charts', the alerts' and the forecasts' history).
SAMPLED_SIGNALS = ("request_rate_rps", "queue_depth", "ttft_p95_s", "e2e_p95_s", "ttft_p99_s", "e2e_p99_s",
                   "error_rate", "kv_cache_usage", "prefix_cache_hit_rate")


def fallback_share(pool: Pool) -> float:
    """The share of the pool's route weight on its fallback pool, as last written and read back: 0 with
    no open activation (a fact, not an unknown: nothing is sent to the fallback)."""
    percent = FallbackActivation.objects.filter(pool=pool, phase__in=list(FALLBACK_OPEN_PHASES)) \
        .values_list("route_percent", flat=True).first()
    return (percent or 0) / 100.0


def _signals_dict(signals: PoolSignals) -> dict[str, Any]:
    return {name: (round(float(r.value), 4) if r.is_known else None) for name, r in signals.readings().items()}


def tick_pool(pool: Pool, signals: PoolSignals, now: datetime, fallback_rate: Reading | None = None,
              read_errors: dict[str, str] | None = None) -> PoolTick:
    """Load the pool's state, run the decide step, persist what it learned, then act on it.

    With `fallback_rate` (what the pool's fallback pool answered: the route's share or the gateway's
    spill-over) the decide step plans for the route's rate (and learns its capacity from the pool's own)
    and the sample keeps it as the demand; `last_signals` keeps what was read of the pool itself (the
    fallback step adds the fallback's rate to it). `read_errors`: what this tick could not read for the pool."""
    plan = pool_plan(pool)
    planned = signals if fallback_rate is None else fallback_engine.with_route_demand(signals, fallback_rate)
    with transaction.atomic():
        memory, _ = PlannerMemory.objects.select_for_update().get_or_create(pool=pool)
        state = decide.decide_state_from(memory.state, forecast_store.unpack(memory.seasonal_forecast))
        step = decide.decide(now.timestamp(), planned, plan, state, DatabaseHistory(pool, now),
                             schedule_windows(pool, plan, now),
                             served_rate=None if fallback_rate is None else signals.request_rate_rps)
        decision = step.decision
        memory.state = step.state.planner.to_dict()
        memory.seasonal_forecast = forecast_store.pack(decide.forecast_dict(step.state))
        memory.last_decision = _decision_dict(decision) | {"at": now.isoformat()}
        memory.last_signals = _signals_dict(signals)
        memory.last_error, memory.last_error_at = "", None
        memory.read_errors = read_errors or {}
        memory.save()
        # The history the forecasts learn from is the demand: the route's rate while the fallback takes a share.
        known = {name: float(reading.value) if reading.is_known else None  # type: ignore[arg-type]
                 for name, reading in planned.readings().items() if name in SAMPLED_SIGNALS}
        SignalSample.objects.create(
            pool=pool, at=now, **known, fallback_share=fallback_share(pool),
            fallback_answered_share=(None if fallback_rate is None
                                     else fallback_engine.answered_share(signals.request_rate_rps, fallback_rate)),
            ready_replicas=decision.ready_replicas, desired_replicas=decision.current_replicas,
            target_replicas=decision.target_replicas,
        )
    read = _signals_dict(signals)
    evidence = _evidence(step.recent, step.inputs.forecast_lead, step.inputs.forecast_peak,
                         decision.capacity_per_replica_rps, decision.ready_replicas or 0, decision.target_replicas or 0,
                         decision.term(REACTIVE_RATE),
                         decision.term(REACTIVE_BUSY) if decision.reasons[:1] == (REACTIVE_BUSY,) else None)
    did = act(pool, decision, evidence, read, now)
    return PoolTick(pool=str(pool), read=read, decided=_decision_dict(decision), did=did)


def prune_samples(now: datetime, batch: int = SAMPLE_PRUNE_BATCH) -> int:
    """Delete samples older than SIGNAL_SAMPLE_RETENTION_DAYS, at most `batch` of them (oldest first), so a
    tick stays short whatever the backlog; 1,000 pools add about 1,000 rows a tick."""
    cutoff = now - timedelta(days=settings.SIGNAL_SAMPLE_RETENTION_DAYS)
    oldest = SignalSample.objects.filter(at__lt=cutoff).order_by("at").values_list("pk", flat=True)[:batch]
    return SignalSample.objects.filter(pk__in=list(oldest)).delete()[0]


def prune_proposals(now: datetime, batch: int = PROPOSAL_PRUNE_BATCH) -> int:
    """Delete finished proposals made more than PROPOSAL_RETENTION_DAYS ago (0, the default: keep every one), with
    their events and notifications, at most `batch` a tick, oldest first.

    Kept whatever their age: those an incident's timeline shows (finished within an incident of their pool, or
    the minutes before it) and those a playbook run's step made. The audit log keeps its own record of each."""
    if not settings.PROPOSAL_RETENTION_DAYS:
        return 0
    cutoff = now - timedelta(days=settings.PROPOSAL_RETENTION_DAYS)
    last = Coalesce("finished_at", "created_at")
    in_incident = Incident.objects.filter(pool=OuterRef("pool"), opened_at__lte=OuterRef("last_at") + INCIDENT_LOOKBACK) \
        .filter(Q(resolved_at__isnull=True) | Q(resolved_at__gte=OuterRef("created_at")))
    old = Proposal.objects.filter(created_at__lt=cutoff, state__in=TERMINAL_STATES).annotate(last_at=last) \
        .exclude(Exists(in_incident)).exclude(Exists(PlaybookRunStep.objects.filter(proposal=OuterRef("pk"))))
    ids = list(old.order_by("created_at").values_list("pk", flat=True)[:batch])
    return Proposal.objects.filter(pk__in=ids).delete()[1].get("scaling.Proposal", 0)


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def acquire_cluster(cluster: Cluster, holder: str, now: datetime) -> bool:
    """Take the cluster's tick lease (free, expired, or already ours); False when another worker holds it.

    On the wall clock at the moment it is taken (or `now`, a test's clock, where that is later): a cluster
    taken late in a long tick must get a whole lease, not what is left of one dated at the tick's start."""
    now = max(now, timezone.now())
    try:
        TickLease.objects.get_or_create(cluster=cluster, defaults={"holder": "", "until": now})
    except IntegrityError:
        pass  # another worker created it in between: the conditional update below decides
    taken = TickLease.objects.filter(cluster=cluster).filter(Q(until__lte=now) | Q(holder=holder)) \
        .update(holder=holder, until=now + timedelta(seconds=settings.TICK_LEASE_S))
    return taken == 1


def release_cluster(cluster: Cluster, holder: str, now: datetime) -> None:
    TickLease.objects.filter(cluster=cluster, holder=holder).update(until=min(now, timezone.now()))


def renew_cluster(cluster: Cluster, holder: str) -> bool:
    """Extend our lease on the wall clock while the cluster's tick goes on; False when it was lost (the tick
    ran past it and another worker took the cluster): the tick then stops writing for it."""
    until = timezone.now() + timedelta(seconds=settings.TICK_LEASE_S)
    return TickLease.objects.filter(cluster=cluster, holder=holder).update(until=until) == 1


def _record_pool_error(pool: Pool, error: Exception, now: datetime) -> str:
    message = f"{type(error).__name__}: {error}"[:500]
    logger.error("tick failed for pool %s: %s\n%s", pool, message, "".join(traceback.format_exception(error)))
    PlannerMemory.objects.update_or_create(pool=pool, defaults={"last_error": message, "last_error_at": now})
    return message


def tick_cluster(cluster: Cluster, cluster_pools: list[Pool], now: datetime, holder: str | None = None
                 ) -> tuple[list[PoolTick], dict[str, str]]:
    """Read the cluster once, then plan each pool on its own: one pool's exception is that pool's. With the
    lease's `holder`, the lease is renewed before each pool; lost, the rest of the cluster waits."""
    try:
        signals, errors = read_cluster(cluster, cluster_pools, now)
        errors.update(backfill_history(cluster, cluster_pools, now))
    except Exception as exc:  # noqa: BLE001 - a read that broke leaves every signal unknown: the pools hold
        logger.exception("reading cluster %s failed", cluster.name)
        signals, errors = {}, {f"{cluster.name}: read": f"{type(exc).__name__}: {exc}"}
    if errors:  # the on-call's log names each failed query or call, not only the pool page
        metrics.record_tick_failure(cluster.name, "read")
        logger.warning("cluster %s: %d reads failed this tick: %s", cluster.name, len(errors),
                       glance.read_errors(errors, names_shown=len(errors)))
    diverted = _fallback_rates(cluster_pools, signals, now)
    reports = []
    for pool in cluster_pools:
        if holder is not None and not renew_cluster(cluster, holder):
            errors[f"{cluster.name}: lease"] = f"the tick lease was lost before {pool}: another worker ticks it"
            break
        try:
            reports.append(tick_pool(pool, signals.get(pool.pk, PoolSignals(pool=pool.name)), now,
                                     fallback_rate=diverted.get(pool.pk), read_errors=pool_read_errors(
                                         cluster, pool, errors)))
        except Exception as exc:  # noqa: BLE001 - recorded for this pool; the others are still planned
            errors[f"{pool}: tick"] = _record_pool_error(pool, exc, now)
            metrics.record_tick_failure(cluster.name, "pool")
    return reports, errors


def pool_read_errors(cluster: Cluster, pool: Pool, errors: dict[str, str]) -> dict[str, str]:
    """The read errors that concern `pool`: its cluster's (every Prometheus query is the cluster's) and its own."""
    mine = {}
    for prefix in (f"{cluster.name}: ", f"{pool}: "):
        mine |= {key.removeprefix(prefix): why for key, why in errors.items() if key.startswith(prefix)}
    return mine


def _fallback_rates(cluster_pools: list[Pool], signals: dict[int, PoolSignals], now: datetime) -> dict[int, Reading]:
    """The request rate of the fallback pool of each pool that has one: this tick's reading where the
    fallback pool was read with this cluster, else its last stored one. What a fallback pool answers is
    its primary's traffic, moved by an open fallback's weights or spilled by the gateway per request.

    With no fallback open, a pool whose fallback's rate is unknown is left out (its own rate is its
    demand, as without a fallback): a missing reading of the pool that only stands by must not hold the
    primary. With one open, unknown stays unknown (`with_route_demand`): most of the demand may be there."""
    from scaling.fallbacks import pool_signals  # fallbacks imports this module

    read = [pool for pool in cluster_pools if pool.pk in signals]
    open_to = {activation.pool_id: activation.fallback_pool for activation in FallbackActivation.objects.filter(
        pool__in=read, phase__in=list(FALLBACK_OPEN_PHASES)).select_related("fallback_pool")}
    rates = {}
    for pool in read:
        spare_id = open_to[pool.pk].pk if pool.pk in open_to else pool.fallback_pool_id
        if spare_id is None:
            continue
        # Read with this cluster as a rule: the fallback pool's row is loaded only when it was not.
        rate = (signals.get(spare_id) or pool_signals(open_to.get(pool.pk) or pool.fallback_pool, now)).request_rate_rps
        if pool.pk in open_to or rate.is_known:
            rates[pool.pk] = rate
    return rates


def loop_pools() -> QuerySet[Pool]:
    """Every pool the loop ticks: all but those of drills that are over (their emulator went with the drill,
    and ticking them would log a connection error every 15 s for good)."""
    return Pool.objects.exclude(drills__finished_at__isnull=False).select_related("cluster", "team") \
        .prefetch_related("slos", "schedules")


def tick(pools: list[Pool] | None = None, now: datetime | None = None, holder: str | None = None) -> TickReport:
    """One loop iteration over the given pools (all pools by default), one cluster at a time."""
    started = time.time()
    now = now or timezone.now()
    holder = holder or _holder()
    pools = pools if pools is not None else list(loop_pools())
    by_cluster: dict[int, list[Pool]] = {}
    for pool in pools:
        by_cluster.setdefault(pool.cluster_id, []).append(pool)
    reports, errors, skipped = [], {}, {}
    for cluster_pools in by_cluster.values():
        cluster = cluster_pools[0].cluster
        if not acquire_cluster(cluster, holder, now):
            lease = TickLease.objects.get(cluster=cluster)
            skipped[cluster.name] = f"another worker ({lease.holder}) is ticking it until {lease.until:%H:%M:%S} UTC"
            logger.info("skipping cluster %s: %s", cluster.name, skipped[cluster.name])
            continue
        try:
            cluster_reports, cluster_errors = tick_cluster(cluster, cluster_pools, now, holder)
        finally:
            release_cluster(cluster, holder, now)
        reports += cluster_reports
        errors.update(cluster_errors)
    # Alerts from what this tick stored (the beat's own entry also checks the loop's heartbeat).
    ticked = [pool for cluster_pools in by_cluster.values() if cluster_pools[0].cluster.name not in skipped
              for pool in cluster_pools]
    try:
        errors.update(evaluate_alerts(ticked, now).errors)
    except Exception as exc:  # noqa: BLE001 - alerting must never stop the loop; the beat retries
        logger.exception("evaluating alerts failed")
        errors["alerts"] = f"{type(exc).__name__}: {exc}"
    expired = services.expire_due(now)
    prune_samples(now)
    prune_proposals(now)
    metrics.record_tick(started, time.time(), [report.decided for report in reports])
    return TickReport(at=now.isoformat(), pools=reports, errors=errors, expired=expired, skipped=skipped)
