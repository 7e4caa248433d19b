"""An approved pre-scale of a pool with split routing moves the route's traffic to the capacity it added.

design.md §6: "on approval it executes, the route shifts 80/20 → 95/5 → 100/0 to the scaled capacity if
the pool uses split routing". A pool uses split routing when another pool of its cluster serves the
same route (its `route_name`), each through its own backend. When the pre-scale's replicas are Ready
(the proposal `succeeded`), a shift starts from that other pool to the scaled one, through
scaling/traffic.py like any shift, under the default steps and guards.

Two entry points, one effect: a receiver on the proposal's `succeeded` event starts it as soon as
that commits, and the shift sweep (`scaling.tasks.advance_shifts`) starts any the receiver missed (a
worker killed between the commit and the call). The shift's idempotency key, `prescale:<proposal>`,
makes the second a no-op. scaling/services.py knows nothing of this: the event row is its contract.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import traffic
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.registry import route_router
from scaling.drivers.routing import RouteRef, Router
from scaling.engine.shifting import DEFAULT_STEPS
from scaling.models import Proposal, ProposalEvent, TrafficShift

logger = logging.getLogger(__name__)
AUTO = core.Actor(user=None, channel=Channel.AUTO)
# The sweep looks this far back for pre-scales whose shift never started; older ones are history.
SWEEP_WINDOW = timedelta(minutes=10)


def shift_key(proposal: Proposal) -> str:
    return f"prescale:{proposal.pk}"


def giving_pool(pool: Pool) -> Pool | None:
    """The one other pool of the cluster on `pool`'s route (its namespace and name), or None when the pool does not split its route
    (or splits it several ways: which one to drain is then a person's call). A fallback pool on the route
    is no split: it takes what a fallback or the gateway's spill-over sends it, and gives nothing back."""
    if not pool.route_name or not pool.route_backend:
        return None
    # A route is its namespace and name: another team's same-named route in its own namespace is another route.
    others = Pool.objects.select_related("cluster", "team").filter(
        cluster_id=pool.cluster_id, namespace=pool.namespace, route_name=pool.route_name) \
        .exclude(pk=pool.pk).exclude(route_backend="")
    others = others.exclude(fallback_pool=pool)
    if pool.fallback_pool_id is not None:
        others = others.exclude(pk=pool.fallback_pool_id)
    found = list(others[:2])
    return found[0] if len(found) == 1 else None


def _already_moved(giver: Pool, receiver: Pool, router: Router) -> bool:
    """The scaled pool already carries at least the first step's share: a shift would move traffic back."""
    weights = router.read(RouteRef(namespace=receiver.namespace, name=receiver.route_name),
                          {giver.route_backend, receiver.route_backend}).weights
    pair = weights.get(giver.route_backend, 0) + weights.get(receiver.route_backend, 0)
    return pair > 0 and 100 * weights.get(receiver.route_backend, 0) >= DEFAULT_STEPS[0] * pair


def start_for(proposal_id: int, router: Router | None = None) -> TrafficShift | None:
    """Start the shift an approved, succeeded pre-scale calls for; None when it calls for none.

    Idempotent: a second call answers the shift the first started. A refusal of the shift service (another
    shift on the route, the route already all on the scaled pool) is logged and leaves the route alone.
    """
    proposal = Proposal.objects.select_related("pool__cluster", "pool__team").filter(pk=proposal_id).first()
    if proposal is None or proposal.kind != ProposalKind.PRESCALE or proposal.state != ProposalState.SUCCEEDED:
        return None
    giver = giving_pool(proposal.pool)
    if giver is None:
        return None
    key = shift_key(proposal)
    if existing := TrafficShift.objects.filter(to_pool=proposal.pool, idempotency_key=key).first():
        return existing
    try:
        router = router or route_router(proposal.pool.cluster, "httproute")
        if _already_moved(giver, proposal.pool, router):
            logger.info("pre-scale #%s succeeded; %s already carries the traffic", proposal.pk, proposal.pool)
            return None
        return traffic.start(giver, proposal.pool, AUTO, idempotency_key=key, router=router)
    except Exception as exc:  # noqa: BLE001 - a refused or unreadable route: logged, the sweep tries again
        logger.info("pre-scale #%s succeeded; no shift to %s: %s", proposal.pk, proposal.pool, exc)
        return None


def sweep(now: datetime | None = None) -> int:
    """Start the shifts of recent succeeded pre-scales that have none yet. Returns how many started."""
    now = now or timezone.now()
    recent = Proposal.objects.filter(kind=ProposalKind.PRESCALE, state=ProposalState.SUCCEEDED,
                                     finished_at__gte=now - SWEEP_WINDOW).exclude(pool__route_name="")
    started = 0
    for proposal in recent:
        if TrafficShift.objects.filter(to_pool_id=proposal.pool_id, idempotency_key=shift_key(proposal)).exists():
            continue
        if start_for(proposal.pk) is not None:
            started += 1
    return started


def on_proposal_event(sender: type, instance: ProposalEvent, created: bool, **kwargs: object) -> None:
    """post_save of ProposalEvent: a pre-scale turning `succeeded` starts its shift once that commits."""
    if created and instance.to_state == ProposalState.SUCCEEDED and instance.from_state != instance.to_state:
        proposal_id = instance.proposal_id
        transaction.on_commit(lambda: start_for(proposal_id), robust=True)
