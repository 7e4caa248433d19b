"""`{% pools_now pools %}` and `{% pool_now pool as now %}`: each pool's "now" at a glance (scaling.glance)
for the fleet and pool pages.

Tags, so the core's pages show the scaling app's state without the core importing it. A page of pools costs
three queries whatever its length (their last 7 minutes of samples, their pending proposals, their teams'
channels counted), and all read narrow columns only: never a proposal's JSON (signals, evidence) nor a
planner's forecaster state.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from django import template
from django.db.models import Count
from django.utils import timezone

from controlplane.choices import SloIndicator
from controlplane.models import Pool
from incidents.models import Channel
from scaling import explain, glance
from scaling.choices import ProposalState
from scaling.engine.decide import DEFAULT_TTFT_P95_S
from scaling.models import Proposal, SignalSample

register = template.Library()

SAMPLE_FIELDS = ("pool_id", "at", "ttft_p95_s", "e2e_p95_s", "queue_depth", "ready_replicas")
# What `explain.why_for` and the waiting line read of a pending proposal (no JSON column).
PENDING_FIELDS = ("id", "pool_id", "kind", "created_at", "current_replicas", "target_replicas", "requested_by_id",
                  "requested_by__username")


def _value(sample: SignalSample | None, name: str) -> float | None:
    return getattr(sample, name) if sample is not None else None


def _pool_glance(pool: Pool, samples: list[SignalSample], oldest: Proposal | None, now: datetime,
                 channels: dict[bool, int]) -> glance.PoolNow:
    window = timedelta(seconds=glance.TREND_WINDOW_S)
    latest = samples[-1] if samples else None
    before = next((s for s in reversed(samples) if s.at <= now - window), None)
    slo_s = {slo.indicator: slo.threshold / 1000.0 for slo in pool.slos.all()}
    status = getattr(pool, "status", None)
    planner = getattr(pool, "planner", None)
    decision = (planner.last_decision if planner else None) or {}
    readings = [glance.latency_reading("TTFT p95", _value(latest, "ttft_p95_s"), _value(before, "ttft_p95_s"),
                                       slo_s.get(SloIndicator.TTFT_P95))]
    if SloIndicator.E2E_P95 in slo_s:
        readings.append(glance.latency_reading("e2e p95", _value(latest, "e2e_p95_s"), _value(before, "e2e_p95_s"),
                                               slo_s[SloIndicator.E2E_P95]))
    readings.append(glance.queue_reading(_value(latest, "queue_depth"), _value(before, "queue_depth"),
                                         _value(latest, "ready_replicas"), pool.target_queue_per_replica))
    # The planner holds while its signals are unknown (stored as null when unknown since it started).
    unknown_s = (decision.get("signals_unknown_for_s") or math.inf) if decision.get("hold") else None
    freshness, fresh = glance.freshness(status.observed_at if status else None, now,
                                        planner.last_error if planner else "", unknown_s,
                                        glance.read_errors((planner.read_errors or {}) if planner else {}))
    return glance.PoolNow(
        readings=tuple(readings),
        at_ceiling=glance.ceiling(status.desired_replicas if status else None, pool.max_replicas),
        waiting=glance.waiting(oldest.created_at if oldest else None, now, explain.why_for(oldest) if oldest else ""),
        freshness=freshness, fresh=fresh,
        unprotected=glance.unprotected(set(slo_s), DEFAULT_TTFT_P95_S),
        unheard=glance.unheard(pool.team.name, channels.get(True, 0), channels.get(False, 0)),
    )


def glance_for(pools: Iterable[Pool], now: datetime | None = None) -> dict[int, glance.PoolNow]:
    """Each pool's glance, by pool id: three queries for all of them."""
    pools = list(pools)
    now = now or timezone.now()
    by_id = {pool.pk: pool for pool in pools}
    since = now - timedelta(seconds=glance.TREND_WINDOW_S) - timedelta(minutes=2)
    samples: dict[int, list[SignalSample]] = {pk: [] for pk in by_id}
    for sample in SignalSample.objects.filter(pool_id__in=by_id, at__gte=since).order_by("pool_id", "at") \
            .only(*SAMPLE_FIELDS):
        samples[sample.pool_id].append(sample)
    oldest: dict[int, Proposal] = {}
    # At most two pending proposals a pool (a reactive and a pre-scale: the database's rule).
    for proposal in Proposal.objects.filter(pool_id__in=by_id, state=ProposalState.PENDING) \
            .select_related("requested_by").only(*PENDING_FIELDS).order_by("created_at", "id"):
        if proposal.pool_id not in oldest:
            proposal.pool = by_id[proposal.pool_id]  # why_for reads its policy and team: already loaded
            oldest[proposal.pool_id] = proposal
    # Alerts and approval requests go to the team's enabled channels only: count them, enabled and not.
    channels: dict[int, dict[bool, int]] = {}
    for row in Channel.objects.filter(team_id__in={pool.team_id for pool in pools}).values("team_id", "enabled") \
            .annotate(count=Count("id")).order_by():
        channels.setdefault(row["team_id"], {})[row["enabled"]] = row["count"]
    return {pk: _pool_glance(pool, samples[pk], oldest.get(pk), now, channels.get(pool.team_id, {}))
            for pk, pool in by_id.items()}


@register.simple_tag
def pools_now(*groups: Iterable[Pool]) -> str:
    """Attach `now` (a glance.PoolNow) to every pool of the given lists, in two queries for them all."""
    pools = [pool for group in groups for pool in group]
    found = glance_for(pools)
    for pool in pools:
        pool.now = found[pool.pk]
    return ""


@register.simple_tag
def pool_now(pool: Pool) -> glance.PoolNow:
    return glance_for([pool])[pool.pk]
