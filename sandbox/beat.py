"""The beat's 15-second work, in-process, for the demo and the headless demo (no Celery worker there).

`make demo` and `demo --headless` run the control loop in a thread of their own. Each round does, for
the sandbox cluster, what the production beat schedules every 15 s (controlplane/celery.py): follow
executions, tick the pools, advance traffic shifts (and the shifts pre-scales call for), decide each
fallback, evaluate the circuit breakers, expire proposals nobody decided on, and hand out again the
warm-pool reports whose run stopped (a demo restarted mid-report). Before this, the live demo only
ticked: a shift or a fallback started there never moved. (The tick evaluates the alert rules itself; the
demo has no notification channel to sweep unless one is added, and no beat of its own to watch.)
"""
from __future__ import annotations

from collections.abc import Callable

from sandbox.registration import CLUSTER_NAME

Say = Callable[[str], None]


def run_once(say: Say) -> None:
    """One round of the beat for the sandbox cluster's pools; what the loop did goes to `say`. (The caller's
    thread closes its stale database connections first, as a Celery worker does per task.)"""
    from controlplane.models import Pool
    from scaling import loop, tasks

    tasks.advance_executions()
    pools = list(Pool.objects.filter(cluster__name=CLUSTER_NAME).select_related("cluster", "team")
                 .prefetch_related("slos", "schedules"))
    for pool in loop.tick(pools).pools:
        for action in pool.did:
            say(f"[loop] {pool.pool}: {action}")
    tasks.advance_shifts()
    tasks.advance_fallbacks()
    tasks.evaluate_breakers()
    tasks.expire_proposals()
    tasks.retake_stalled_reports()
