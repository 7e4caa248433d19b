"""Chaos: a Celery worker is SIGKILLed in the middle of a traffic-shift step, once while it waits for the route's
read (nothing written yet) and once after its weight write landed but before its answer came back (written, not
recorded). The next worker's tick finishes that step and no other: the shift completes 80/20 -> 95/5 -> 100/0
with each step entered once, one audit row per step, and the landed write not made again.

The worker is a real `celery worker` process on Redis and the test database; the route is the sandbox's
HTTPRoute in its Kubernetes API emulator (its fault knobs hold the worker in the API call); the guard signals
are measured from real requests through the sandbox gateway, as in tests/scaling/test_traffic.py."""
from __future__ import annotations

import os
import signal
import time

import pytest
from celery import Celery
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent
from sandbox.kube import resources as res
from sandbox.replica import wait_until
from scaling import traffic
from scaling.choices import ShiftPhase
from scaling.drivers.registry import cluster_driver, workload_of
from scaling.models import TrafficShift

from tests.scaling.test_traffic import GIVING, NS, RECEIVING, ROUTE, _steps_entered, _weights, observe, pools, sandbox  # noqa: F401

pytestmark = pytest.mark.celery_worker

WORKER_ENV = {"KUBERNETES_TIMEOUT_S": "60"}  # the client waits out the held answer: only the kill ends the call


def _phase(shift_id: int) -> tuple[str, int]:
    shift = TrafficShift.objects.get(pk=shift_id)
    return shift.phase, shift.step


@pytest.mark.parametrize("after_write", [False, True], ids=["waiting-for-the-read", "after-the-write-landed"])
def test_a_worker_killed_mid_shift_step_resumes_without_skipping_or_repeating(
    broker: Celery, start_worker, sandbox, pools, alice: User, after_write: bool,  # noqa: ANN001, F811
) -> None:
    kube, gateway = sandbox
    # The shift starts a step only onto ready replicas, which it reads from the Deployments' status. The emulator
    # writes that status a reconcile after the replicas are ready, later on a loaded machine: read once too early,
    # the status said 0 and the shift waited for capacity (session 10's CI rehearsals, in both variants).
    driver = cluster_driver(pools[0].cluster)
    assert wait_until(lambda: all(driver.status(workload_of(pool)).ready >= 1 for pool in pools), 30, interval=0.2)
    shift = traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API), hold_s=3, max_p95_s=2.0)
    observe(kube, gateway, pools, timezone.now())
    if after_write:
        kube.api.faults.late_write_answer_s = 30.0  # the write is applied at once, its answer held back
    else:
        kube.api.faults.latency_s = 30.0  # every answer held back: the worker waits for the route's read
    worker = start_worker(**WORKER_ENV)

    beats: list[float] = []

    def stepping() -> bool:
        # Should a beat still leave the shift pending, the next one comes, as in production's every 15 s (here
        # every 5), after the loop's tick has read the pools again where reads are not held (as `completed`
        # below), until one starts the step and is held in it.
        if _phase(shift.pk)[0] == ShiftPhase.PENDING and (not beats or time.monotonic() - beats[-1] >= 5.0):
            if beats and after_write:
                observe(kube, gateway, pools, timezone.now())
            broker.send_task("scaling.tasks.advance_shifts")
            beats.append(time.monotonic())
        return _phase(shift.pk) == (ShiftPhase.STEPPING, 1)

    # Should it still fail: the phase, what the last beat decided and why, and how many beats came.
    assert wait_until(stepping, 30, interval=0.2), (_phase(shift.pk), TrafficShift.objects.get(pk=shift.pk).last_check,
                                                    len(beats))
    if after_write:
        assert wait_until(lambda: _weights(kube) == {GIVING: 20, RECEIVING: 80}, 20, interval=0.1)
    else:
        time.sleep(1.0)  # inside the read
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(10)
    kube.api.faults.latency_s = kube.api.faults.late_write_answer_s = 0.0

    # The intent was committed before the write; the weights are what the killed worker left.
    assert _phase(shift.pk) == (ShiftPhase.STEPPING, 1)
    assert _weights(kube) == ({GIVING: 20, RECEIVING: 80} if after_write else {GIVING: 100, RECEIVING: 0})
    version = kube.store.get(res.HTTPROUTES, NS, ROUTE)["metadata"]["resourceVersion"]

    start_worker(**WORKER_ENV)
    broker.send_task("scaling.tasks.advance_shifts")  # the next beat
    assert wait_until(lambda: _phase(shift.pk) == (ShiftPhase.HOLDING, 1), 30, interval=0.2)
    resumed = TrafficShift.objects.get(pk=shift.pk)
    assert resumed.events.last().data["wrote"] is not after_write  # a write that landed is not made again
    rewritten = kube.store.get(res.HTTPROUTES, NS, ROUTE)["metadata"]["resourceVersion"] != version
    assert rewritten is not after_write

    def completed() -> bool:  # the loop's tick (signals) and the beat (the shift's tick), as in production
        observe(kube, gateway, pools, timezone.now())
        broker.send_task("scaling.tasks.advance_shifts")
        return _phase(shift.pk)[0] in (ShiftPhase.COMPLETED, ShiftPhase.ROLLED_BACK, ShiftPhase.FAILED)

    assert wait_until(completed, 120, interval=1.0), _phase(shift.pk)
    done = TrafficShift.objects.get(pk=shift.pk)
    assert done.phase == ShiftPhase.COMPLETED, list(done.events.values_list("to_phase", "comment"))
    assert _steps_entered(done) == [1, 2, 3]  # none skipped, none entered twice
    assert _weights(kube) == {GIVING: 0, RECEIVING: 100}
    audited = list(AuditEvent.objects.filter(object_type="scaling.trafficshift", object_id=str(shift.pk))
                   .values_list("action", flat=True))
    # One audit row per step entered and per step confirmed on the route, the start and the end.
    assert audited.count("shift-stepping") == 3 and audited.count("shift-holding") == 3, audited
    assert audited.count("shift-start") == 1 and audited.count("shift-completed") == 1
    wrote = [event.data["wrote"] for event in done.events.filter(to_phase=ShiftPhase.HOLDING)]
    assert wrote == [not after_write, True, True]
