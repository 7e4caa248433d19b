"""Run the same work in several threads released at one instant, each on its own DB connection."""
from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection


def race(work: Callable[[], object], threads: int = 6) -> list[object]:
    """Results of `work` from every thread; an exception a thread raised is its result."""
    barrier = threading.Barrier(threads)
    results: list[object] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(work())
        except Exception as exc:  # the losers' answers are part of what tests check
            results.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    return results
