"""Celery tasks for proposals: thin, take ids, re-fetch, call services."""
from __future__ import annotations

from celery import shared_task

from scaling import services
from scaling.choices import ProposalState
from scaling.drivers.cluster import DriverError
from scaling.models import Proposal


@shared_task(ignore_result=True, acks_late=True)
def execute_proposal(proposal_id: int) -> None:
    services.execute(proposal_id)


@shared_task(ignore_result=True)
def advance_executions() -> None:
    """Resume executions whose worker died, and follow applied ones to Ready."""
    for proposal in Proposal.objects.filter(state=ProposalState.EXECUTING).select_related("pool__cluster"):
        if proposal.applied_at is None:
            services.execute(proposal.pk)
            continue
        try:
            driver = services.cluster_driver(proposal.pool.cluster)
        except DriverError:
            continue
        services.track_readiness(proposal, driver)


@shared_task(ignore_result=True)
def expire_proposals() -> None:
    services.expire_due()


@shared_task(ignore_result=True)
def tick() -> None:
    """Read, decide and propose for every pool (design.md §6)."""
    from scaling import loop

    loop.tick()
