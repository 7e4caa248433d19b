"""The loop in a real Celery worker on Redis, and a worker killed in the middle of an execution."""
from __future__ import annotations

import os
import signal

import pytest
from celery import Celery
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from sandbox.registration import register
from sandbox.replica import wait_until
from sandbox.runtime import Sandbox, SandboxConfig
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.drivers.registry import workload_of
from scaling.models import Proposal, SignalSample

pytestmark = [pytest.mark.prometheus, pytest.mark.celery_worker]


def test_a_worker_runs_full_ticks_against_the_sandbox(broker: Celery, start_worker, alice: User) -> None:  # noqa: ANN001
    config = SandboxConfig(pools=1, scenario="surge", speed=8.0, cold_start_s=4.0, scrape_interval_s=1.0,
                           max_num_seqs=2)
    with Sandbox(config) as sandbox:
        register(sandbox)
        pool = Pool.objects.get()
        start_worker()

        def scaled_with_rates_known() -> bool:
            broker.send_task("scaling.tasks.tick")
            return (Proposal.objects.filter(pool=pool, applied_at__isnull=False).exists()
                    and SignalSample.objects.filter(pool=pool, request_rate_rps__isnull=False).exists())

        # The queue can trigger a scale-up before Prometheus has two samples for a request rate.
        assert wait_until(scaled_with_rates_known, 120, interval=3.0), "the worker's ticks never scaled the surge"
        proposal = Proposal.objects.filter(pool=pool, applied_at__isnull=False).first()
        status = KubernetesDriver(sandbox.cluster.url).status(workload_of(pool))
        assert status.desired >= proposal.target_replicas
        assert AuditEvent.objects.filter(action="scale", object_id=str(proposal.pk)).count() == 1


def test_a_worker_killed_mid_execution_is_resumed_once(broker: Celery, start_worker, alice: User, bob: User) -> None:  # noqa: ANN001, E501
    config = SandboxConfig(pools=1, scenario="idle", prometheus=False, cold_start_s=1.0)
    with Sandbox(config) as sandbox:
        register(sandbox)
        pool = Pool.objects.get()
        proposal = services.propose(pool, 3, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
        Proposal.objects.filter(pk=proposal.pk).update(state=ProposalState.APPROVED)  # its task is ours to send
        sandbox.cluster.api.faults.latency_s = 8.0  # the worker will hang in its first API call
        first = start_worker(EXECUTION_LEASE_S="10")
        broker.send_task("scaling.tasks.execute_proposal", args=[proposal.pk])
        assert wait_until(lambda: Proposal.objects.get(pk=proposal.pk).state == ProposalState.EXECUTING, 20)
        os.killpg(first.pid, signal.SIGKILL)  # dies holding the lease, before the cluster saw a write
        first.wait(10)
        sandbox.cluster.api.faults.latency_s = 0.0
        claimed = Proposal.objects.get(pk=proposal.pk)
        assert claimed.applied_at is None and claimed.attempts == 1
        assert KubernetesDriver(sandbox.cluster.url).status(workload_of(pool)).desired == 1

        start_worker(EXECUTION_LEASE_S="10")

        def resumed() -> bool:
            broker.send_task("scaling.tasks.advance_executions")
            return Proposal.objects.get(pk=proposal.pk).applied_at is not None

        assert wait_until(resumed, 40, interval=2.0), "the next tick did not resume the execution"
        done = Proposal.objects.get(pk=proposal.pk)
        assert done.attempts == 2
        assert KubernetesDriver(sandbox.cluster.url).status(workload_of(pool)).desired == 3
        assert AuditEvent.objects.filter(action="scale", object_id=str(proposal.pk)).count() == 1
        assert "resumed" in " ".join(done.events.values_list("comment", flat=True))
