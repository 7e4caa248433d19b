"""A real Celery worker on the machine's Redis, working on the test database."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from django.db import connection

from tests.core.conftest import alice, bob, ml_team  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/7"  # a database of its own, flushed by each test


@pytest.fixture
def broker() -> Celery:
    try:
        redis.Redis.from_url(REDIS_URL).flushdb()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis at {REDIS_URL} is not reachable: {exc}")
    return Celery(broker=REDIS_URL)


def _database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def start_worker(transactional_db, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:  # noqa: ANN001
    """Start `celery worker` processes on the test database; all are killed at the end."""
    workers: list[subprocess.Popen] = []

    def start(**env: str) -> subprocess.Popen:
        environment = os.environ | {
            "DATABASE_URL": _database_url(), "REDIS_URL": REDIS_URL, "CELERY_ENABLED": "true",
            "SECRET_KEY": "test-only-secret-key", "KUBERNETES_ENABLED": "true", "PROMETHEUS_ENABLED": "true",
        } | env
        log = open(tmp_path / f"worker-{len(workers)}.log", "w")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--pool", "solo", "--loglevel", "INFO",
             "--without-gossip", "--without-mingle", "-n", f"worker{len(workers)}@%h"],
            cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        workers.append(process)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if "ready." in (tmp_path / f"worker-{len(workers) - 1}.log").read_text():
                return process
            if process.poll() is not None:
                break
            time.sleep(0.2)
        pytest.fail("the Celery worker did not start:\n" + (tmp_path / f"worker-{len(workers) - 1}.log").read_text())

    yield start
    for process in workers:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
