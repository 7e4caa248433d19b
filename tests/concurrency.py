"""Run the same work in several threads released at one instant, each on its own DB connection."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from django.db import connection


JOIN_TIMEOUT_S = 30.0


def race(work: Callable[[], object], threads: int = 6, timeout_s: float = JOIN_TIMEOUT_S) -> list[object]:
    """Results of `work` from every thread; an exception a thread raised is its result.

    Fails when a thread has not finished within `timeout_s`: a hung loser is not a conflict.
    """
    barrier = threading.Barrier(threads)
    results: list[object] = []

    def run() -> None:
        barrier.wait(timeout=timeout_s)
        try:
            results.append(work())
        except Exception as exc:  # the losers' answers are part of what tests check
            results.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + timeout_s
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    hung = sum(worker.is_alive() for worker in workers)
    assert hung == 0, f"{hung} of {threads} racing threads did not finish within {timeout_s:g} s"
    assert len(results) == threads, f"{threads - len(results)} racing threads ended without a result"
    return results
