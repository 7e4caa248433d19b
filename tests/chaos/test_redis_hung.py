"""Chaos: a Redis that hangs, accepting connections and never answering (a stuck server, a half-open proxy),
as the Celery broker and as the cache. A request that enqueues or counts a login must not wait for it: the
publish fails within the settings' socket timeouts (the change stays recorded for the sweeps), and a sign-in
checks the password without its failure count."""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from celery import Celery
from django.conf import settings as project
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from kombu.exceptions import OperationalError

GENEROUS_S = 30  # far above the 2-s timeouts; without them each call below waits for ever


@pytest.fixture
def hung_redis() -> Iterator[str]:
    """A TCP server that accepts every connection and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    stop.set()
    thread.join()
    for peer in accepted:
        peer.close()
    server.close()


def _within(call, seconds: float = GENEROUS_S) -> object:  # noqa: ANN001
    """`call()`'s result or exception, or a failure if it is still waiting after `seconds`."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # noqa: BLE001 - the test looks at which
            outcome.append(exc)
        finally:
            connection.close()  # this thread's own: left open, it holds the test database at teardown

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still waiting for a hung Redis after {seconds} s")
    return outcome[0]


def test_a_publish_to_a_hung_broker_fails_instead_of_waiting(hung_redis: str) -> None:
    app = Celery(set_as_current=False)
    app.config_from_object(project, namespace="CELERY")
    app.conf.broker_url, app.conf.task_always_eager = hung_redis, False  # a publish, as a worker's web process makes
    outcome = _within(lambda: app.send_task("scaling.tasks.execute_proposal", args=[1]))
    assert isinstance(outcome, OperationalError), outcome


@pytest.mark.django_db(transaction=True)  # the sign-ins run in a thread of their own: committed rows
def test_signing_in_while_the_cache_hangs_checks_the_password(hung_redis: str, settings,  # noqa: ANN001
                                                              caplog: pytest.LogCaptureFixture) -> None:
    User.objects.create_user(username="alice", password="pw-alice")
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": hung_redis,
                                   "OPTIONS": project.REDIS_TIMEOUTS}}
    wrong = _within(lambda: Client().post("/login/", {"username": "alice", "password": "guess"}))
    right = _within(lambda: Client().post("/login/", {"username": "alice", "password": "pw-alice"}))
    assert wrong.status_code == 200 and "Wrong user name or password." in wrong.content.decode()
    assert right.status_code == 302
    assert "login throttling skipped: the cache did not answer" in caplog.text
