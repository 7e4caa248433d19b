"""A shift's guard when its signals go missing, and while a step's write is retried: a step is passed only by a
hold the guard saw, and traffic already moved stays guarded while the router fails (sandbox route, PostgreSQL)."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import services, traffic
from scaling.choices import ShiftPhase
from scaling.drivers.cluster import DriverError, ReplicaStatus
from scaling.drivers.registry import route_router
from scaling.models import PlannerMemory

from tests.core.conftest import alice, cluster, ml_team  # noqa: F401
from tests.scaling.test_traffic import GIVING, RECEIVING, _weights, pools, sandbox  # noqa: F401


def guard(pools: tuple[Pool, Pool], now: datetime, p95: float | None = 0.2) -> None:  # noqa: F811
    """What the loop stores at a tick: both pools at 10 req/s, two ready replicas each, the receiving pool's p95."""
    for pool in pools:
        services.record_status(pool, ReplicaStatus(2, 2), now)
        PlannerMemory.objects.update_or_create(pool=pool, defaults={
            "last_signals": {"request_rate_rps": 10.0, "ttft_p95_s": p95, "error_rate": None if p95 is None else 0.0},
            "last_decision": {"at": now.isoformat(), "capacity_per_replica_rps": 50.0}})


class RouterDown:
    """The route's API answers 503 until `down` is cleared."""

    def __init__(self, router) -> None:  # noqa: ANN001
        self.router, self.scheme, self.down = router, router.scheme, True

    def read(self, route, backends=None):  # noqa: ANN001, ANN201
        if self.down:
            raise DriverError("read HTTPRoute: HTTP 503: etcdserver: request timed out", permanent=False, status=503)
        return self.router.read(route, backends)

    def set_weights(self, route, target, premise):  # noqa: ANN001, ANN201
        if self.down:
            raise DriverError("set weights: HTTP 503: etcdserver: request timed out", permanent=False, status=503)
        return self.router.set_weights(route, target, premise)


def test_a_step_the_guard_never_saw_is_not_passed_by_the_first_reading_after_its_hold(sandbox, pools,  # noqa: ANN001, F811
                                                                                       alice: User) -> None:  # noqa: F811
    kube, _ = sandbox
    shift = traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API), hold_s=60)  # no-data deadline 120 s
    now = timezone.now()
    guard(pools, now)
    shift = traffic.tick(shift.pk, now=now)
    assert (shift.phase, shift.step) == (ShiftPhase.HOLDING, 1)
    for _ in range(5):  # Prometheus is down for the whole 60-s hold and a bit: every check is "no data"
        now += timedelta(seconds=15)
        guard(pools, now, p95=None)
        shift = traffic.tick(shift.pk, now=now)
    assert shift.step == 1 and shift.last_check["outcome"] == "no_data"
    now += timedelta(seconds=15)
    guard(pools, now)  # it is back: one good reading
    shift = traffic.tick(shift.pk, now=now)
    # The step was held 60 s under a guard that saw nothing: one reading does not pass it; it is held again.
    assert (shift.phase, shift.step) == (ShiftPhase.HOLDING, 1), shift.last_check
    assert _weights(kube) == {GIVING: 20, RECEIVING: 80}
    for _ in range(4):  # a full hold under a guard that sees the traffic passes it
        now += timedelta(seconds=15)
        guard(pools, now)
        shift = traffic.tick(shift.pk, now=now)
    assert shift.step == 2 and _weights(kube) == {GIVING: 5, RECEIVING: 95}


def test_the_guard_watches_while_a_steps_write_is_retried_and_rolls_back_instead_of_writing(  # noqa: ANN001, F811
        sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    shift = traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API), hold_s=30, failure_threshold=3)
    now = timezone.now()
    guard(pools, now)
    shift = traffic.tick(shift.pk, now=now)
    router = RouterDown(route_router(shift.cluster, shift.router_kind))
    for _ in range(3):  # step 1 passes its hold; step 2's write meets a route API answering 503
        now += timedelta(seconds=15)
        guard(pools, now)
        shift = traffic.tick(shift.pk, router=router, now=now)
    assert (shift.phase, shift.step) == (ShiftPhase.STEPPING, 2) and "503" in shift.last_error
    # The same failure on every tick is one event, not one a tick.
    assert shift.events.filter(comment__startswith="write failed").count() == 1
    for _ in range(4):  # meanwhile the receiving pool, carrying 80 %, goes over its guard
        now += timedelta(seconds=15)
        guard(pools, now, p95=5.0)
        shift = traffic.tick(shift.pk, router=router, now=now)
    router.down = False
    now += timedelta(seconds=15)
    guard(pools, now, p95=5.0)
    shift = traffic.tick(shift.pk, router=router, now=now)
    # Three failed checks roll it back: the 95 % is never written onto a pool failing at 80 %.
    assert shift.phase == ShiftPhase.ROLLED_BACK and shift.failed_checks >= 3, (shift.phase, shift.last_check)
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}
    assert not shift.events.filter(to_phase=ShiftPhase.HOLDING, step=2).exists()
