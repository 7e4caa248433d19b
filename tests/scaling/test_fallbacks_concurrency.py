"""Many workers on one fallback policy, on real PostgreSQL connections: one activation, one route write."""
from __future__ import annotations

import threading

import pytest
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from sandbox.kube import resources as res
from scaling import fallbacks, traffic
from scaling.choices import FALLBACK_OPEN_PHASES, SHIFT_ACTIVE_PHASES
from scaling.drivers.registry import route_router
from scaling.models import FallbackActivation, TrafficShift

from tests.concurrency import race
from tests.core.conftest import alice, cluster, ml_team  # noqa: F401
from tests.scaling.test_fallbacks import feed, policy  # noqa: F401
from tests.scaling.test_traffic import GIVING, NS, RECEIVING, ROUTE, pools, sandbox  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_six_workers_ticking_one_overloaded_pool_enter_once(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    version = int(kube.store.get(res.HTTPROUTES, NS, ROUTE)["metadata"]["resourceVersion"])
    results = race(lambda: fallbacks.tick(policy.pk, now=now))
    assert not [result for result in results if isinstance(result, Exception)], results
    activation = FallbackActivation.objects.get()
    writes = [event for event in kube.store.events_since(version, res.HTTPROUTES, NS) if event.type == "MODIFIED"]
    assert len(writes) == 1 and activation.route_percent == 58
    assert {pool.name: weight for pool, weight in kube.route_weights()} == {GIVING: 42, RECEIVING: 58}
    assert activation.events.filter(kind="entered").count() == 1


class _FallbackEntersDuringTheRead:
    """The advance-fallbacks beat, on another worker, enters while a shift's start reads the route."""

    def __init__(self, router, policy_id, now) -> None:  # noqa: ANN001
        self.router, self.scheme, self.policy_id, self.now = router, router.scheme, policy_id, now

    def read(self, route, backends=None):  # noqa: ANN001, ANN201
        fallbacks.tick(self.policy_id, now=self.now)
        return self.router.read(route, backends)


def test_a_fallback_entering_while_a_shift_start_reads_the_route_refuses_the_shift(sandbox, pools, policy, alice) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    router = _FallbackEntersDuringTheRead(route_router(pools[0].cluster, "httproute"), policy.pk, now)
    with pytest.raises(traffic.ShiftConflict, match="restore it first"):
        traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API), router=router)
    assert not TrafficShift.objects.exists() and FallbackActivation.objects.get().is_open
    assert {pool.name: weight for pool, weight in kube.route_weights()} == {GIVING: 42, RECEIVING: 58}


def test_shifts_starting_and_fallbacks_entering_at_once_leave_one_writer_on_the_route(sandbox, pools, policy, alice) -> None:  # noqa: ANN001, F811
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    turns, turn_lock = iter(["shift", "fallback"] * 3), threading.Lock()

    def work() -> object:
        with turn_lock:
            turn = next(turns)
        if turn == "shift":
            return traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API))
        return fallbacks.tick(policy.pk, now=now)

    race(work)
    writers = (FallbackActivation.objects.filter(phase__in=list(FALLBACK_OPEN_PHASES)).count(),
               TrafficShift.objects.filter(phase__in=list(SHIFT_ACTIVE_PHASES)).count())
    assert writers in ((1, 0), (0, 1)), writers
