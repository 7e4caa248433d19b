"""`{% pool_now pool as now %}`: the pool's "now" at a glance (scaling.glance) for the fleet and pool pages.

A tag, so the core's pages show the scaling app's state without the core importing it; two queries a
pool (its last 7 minutes of samples, its oldest pending proposal).
"""
from __future__ import annotations

import math
from datetime import timedelta

from django import template
from django.utils import timezone

from controlplane.choices import SloIndicator
from controlplane.models import Pool
from scaling import explain, glance
from scaling.choices import ProposalState

register = template.Library()


@register.simple_tag
def pool_now(pool: Pool) -> glance.PoolNow:
    now = timezone.now()
    window = timedelta(seconds=glance.TREND_WINDOW_S)
    samples = list(pool.samples.filter(at__gte=now - window - timedelta(minutes=2)).order_by("at"))
    latest = samples[-1] if samples else None
    before = next((s for s in reversed(samples) if s.at <= now - window), None)
    slo_s = {slo.indicator: slo.threshold / 1000.0 for slo in pool.slos.all()}
    status = getattr(pool, "status", None)
    planner = getattr(pool, "planner", None)
    decision = (planner.last_decision if planner else None) or {}

    def value(sample, name: str) -> float | None:  # noqa: ANN001
        return getattr(sample, name) if sample is not None else None

    readings = [glance.latency_reading("TTFT p95", value(latest, "ttft_p95_s"), value(before, "ttft_p95_s"),
                                       slo_s.get(SloIndicator.TTFT_P95))]
    if SloIndicator.E2E_P95 in slo_s:
        readings.append(glance.latency_reading("e2e p95", value(latest, "e2e_p95_s"), value(before, "e2e_p95_s"),
                                               slo_s[SloIndicator.E2E_P95]))
    readings.append(glance.queue_reading(value(latest, "queue_depth"), value(before, "queue_depth"),
                                         value(latest, "ready_replicas"), pool.target_queue_per_replica))
    oldest = pool.proposals.filter(state=ProposalState.PENDING).select_related("requested_by") \
        .order_by("created_at").first()
    # The planner holds while its signals are unknown (stored as null when unknown since it started).
    unknown_s = (decision.get("signals_unknown_for_s") or math.inf) if decision.get("hold") else None
    freshness, fresh = glance.freshness(status.observed_at if status else None, now,
                                        planner.last_error if planner else "", unknown_s)
    return glance.PoolNow(
        readings=tuple(readings),
        at_ceiling=glance.ceiling(status.desired_replicas if status else None, pool.max_replicas),
        waiting=glance.waiting(oldest.created_at if oldest else None, now,
                               explain.why_for(oldest) if oldest else ""),
        freshness=freshness, fresh=fresh,
    )
