"""The race() helper that the concurrency tests trust: a hung thread fails the test, never passes it."""
from __future__ import annotations

import threading

import pytest

from tests.concurrency import race


def test_it_returns_every_threads_answer_and_exception() -> None:
    counter = iter(range(4))
    lock = threading.Lock()

    def work() -> int:
        with lock:
            value = next(counter)
        if value % 2:
            raise ValueError(value)
        return value

    answers = race(work, threads=4)
    assert sorted(a for a in answers if isinstance(a, int)) == [0, 2]
    assert sorted(a.args[0] for a in answers if isinstance(a, ValueError)) == [1, 3]


def test_it_fails_when_a_thread_hangs() -> None:
    release = threading.Event()
    first = threading.Lock()

    def work() -> str:
        if first.acquire(blocking=False):
            release.wait(5)  # one thread hangs past the join timeout
        return "done"

    try:
        with pytest.raises(AssertionError, match="1 of 3 racing threads did not finish within 0.5 s"):
            race(work, threads=3, timeout_s=0.5)
    finally:
        release.set()
