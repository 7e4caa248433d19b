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
from tests.isolation import RUN_ID

ROOT = Path(__file__).resolve().parents[2]
REDIS_SERVER = "redis://127.0.0.1:6379"
CLAIM_KEY = "headroom:test-run"  # which run uses this Redis database; the app's own is 0
CLAIM_TTL_S = 3 * 3600


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis database of this run's own: the first of 1-15 that no other run has claimed."""
    try:
        for number in range(1, 16):
            url = f"{REDIS_SERVER}/{number}"
            database = redis.Redis.from_url(url)
            if database.set(CLAIM_KEY, RUN_ID, nx=True, ex=CLAIM_TTL_S) or database.get(CLAIM_KEY) == RUN_ID.encode():
                break
        else:
            pytest.fail(f"every Redis database 1-15 at {REDIS_SERVER} is claimed by another test run ({CLAIM_KEY})")
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis at {REDIS_SERVER} is not reachable (apt-get install -y redis-server): {exc}")
    yield url
    database.delete(CLAIM_KEY)


@pytest.fixture
def broker(redis_url: str) -> Celery:
    """Celery on this run's Redis database, emptied of other tests' tasks (the claim stays)."""
    database = redis.Redis.from_url(redis_url)
    for key in database.scan_iter():
        if key != CLAIM_KEY.encode():
            database.delete(key)
    return Celery(broker=redis_url, set_as_current=False)  # else shared tasks of later tests would follow it


def _database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def start_worker(transactional_db, tmp_path: Path, redis_url: str) -> Iterator[Callable[..., subprocess.Popen]]:  # noqa: ANN001, E501
    """Start `celery worker` processes on the test database; all are killed at the end."""
    workers: list[subprocess.Popen] = []

    def start(**env: str) -> subprocess.Popen:
        environment = os.environ | {
            "DATABASE_URL": _database_url(), "REDIS_URL": redis_url, "CELERY_ENABLED": "true",
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
