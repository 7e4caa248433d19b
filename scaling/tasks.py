"""Celery tasks for proposals: thin, take ids, re-fetch, call services."""
from __future__ import annotations

from celery import shared_task

from scaling import services


def _announce() -> None:
    """The moves this beat made go to the teams' channels now, not at the next outbox sweep."""
    from incidents.tasks import dispatch_traffic_events  # incidents imports scaling's models

    dispatch_traffic_events.delay()


@shared_task(ignore_result=True, acks_late=True)
def execute_proposal(proposal_id: int) -> None:
    services.execute(proposal_id)


@shared_task(ignore_result=True)
def advance_executions() -> None:
    """Run approved proposals whose task was lost, resume executions whose worker died or whose
    backoff passed, and follow applied ones to Ready."""
    services.advance()


@shared_task(ignore_result=True)
def expire_proposals() -> None:
    services.expire_due()


@shared_task(ignore_result=True)
def tick() -> None:
    """Read, decide and propose for every pool (design.md §6)."""
    from scaling import loop

    loop.tick()


@shared_task(ignore_result=True)
def advance_shifts() -> None:
    """One step of every active traffic shift: guard checks, holds, the next step or a rollback."""
    from scaling import prescale_shift, traffic

    prescale_shift.sweep()  # shifts that succeeded pre-scales call for, if their own start was lost
    traffic.advance()
    _announce()


@shared_task(ignore_result=True, acks_late=True)
def run_warm_pool_report(report_id: int) -> None:
    """Replay a pool's traffic at each warm-pool size (`scaling/reports.py`); progress is on the row."""
    from scaling import report_service

    report_service.run(report_id)


@shared_task(ignore_result=True)
def retake_stalled_reports() -> None:
    """Hand out again the warm-pool reports whose worker died (lease run out) or whose task was lost."""
    from scaling import report_service

    report_service.retake_stalled()


@shared_task(ignore_result=True)
def advance_fallbacks() -> None:
    """One fallback decision per pool with a policy, and the route writes it calls for."""
    from scaling import fallbacks

    fallbacks.advance()
    _announce()


@shared_task(ignore_result=True)
def evaluate_breakers() -> None:
    """Every pool's endpoint and pool circuit breakers from each pod's answers; ejects and re-admits pods."""
    from scaling import breakers

    breakers.advance()
    _announce()
