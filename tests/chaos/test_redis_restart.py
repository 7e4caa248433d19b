"""Chaos: the Celery broker (a Redis server of this test's own, like production's with nothing kept on disk)
is SIGKILLed and restarted. A queued execution dies with it, but the approval does not: the database is the
truth and the execution sweep runs it, once. A worker that was connected during the restart reconnects and
keeps working."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from sandbox.prometheus import free_port
from sandbox.registration import register
from sandbox.replica import wait_until
from sandbox.runtime import Sandbox, SandboxConfig
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.drivers.registry import workload_of
from scaling.models import Proposal


pytestmark = [pytest.mark.celery_worker]


class RedisServer:
    """Debian's redis-server on a port of its own, with no persistence: a restart loses every queued task."""

    def __init__(self, directory: Path) -> None:
        self.port, self.directory, self.process = free_port(), directory, None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            start_new_session=True)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.1)
        pytest.fail(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def queued(self) -> int:
        return int(redis.Redis.from_url(self.url).llen("celery"))


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.kill()


def test_a_broker_restart_loses_a_queued_task_but_not_the_approval(own_redis: RedisServer, start_worker,  # noqa: ANN001
                                                                     alice: User, bob: User) -> None:
    config = SandboxConfig(pools=1, scenario="idle", prometheus=False, cold_start_s=1.0)
    with Sandbox(config) as sandbox:
        register(sandbox)
        pool = Pool.objects.get()
        kube = KubernetesDriver(sandbox.cluster.url)
        proposal = services.propose(pool, 3, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
        Proposal.objects.filter(pk=proposal.pk).update(state=ProposalState.APPROVED)  # its task is ours to send
        broker = Celery(broker=own_redis.url, set_as_current=False)
        broker.send_task("scaling.tasks.execute_proposal", args=[proposal.pk])
        assert own_redis.queued() == 1
        own_redis.kill()  # the queued task dies with the broker
        own_redis.start()
        assert own_redis.queued() == 0

        worker = start_worker(REDIS_URL=own_redis.url)
        own_redis.kill()  # and the worker loses its broker while it runs
        own_redis.start()
        assert worker.poll() is None, "the worker died with its broker"
        time.sleep(2)
        assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.APPROVED  # lost task, kept approval
        assert kube.status(workload_of(pool)).desired == 1

        def executed() -> bool:
            broker.send_task("scaling.tasks.advance_executions")  # what beat sends every 15 s
            return Proposal.objects.get(pk=proposal.pk).applied_at is not None

        assert wait_until(executed, 60, interval=2.0), "the reconnected worker's sweep never ran the approval"
        assert kube.status(workload_of(pool)).desired == 3
        assert AuditEvent.objects.filter(action="scale", object_id=str(proposal.pk)).count() == 1
