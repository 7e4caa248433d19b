"""A route write that landed while its worker died, then set back by a person before the next attempt.

The next attempt finds weights the change moved between (the step before, or the route as the fallback found
it): by the weights alone that reads as "never written", and it wrote them again, taking the route back from
the person (traffic.md, "A write that landed and was undone is not made again"). The route's generation, read
before the write and kept while the write is in flight, tells the two apart."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from sandbox.kube import resources as res
from scaling import fallbacks, traffic
from scaling.choices import FallbackPhase, ShiftPhase
from scaling.drivers.registry import route_router
from scaling.models import FallbackActivation, FallbackPolicy

from tests.core.conftest import alice, charlie, cluster, ml_team, search_team  # noqa: F401
from tests.scaling.test_fallbacks import DiesAfterWrite, feed, policy  # noqa: F401
from tests.scaling.test_fallbacks import WorkerKilled as FallbackWorkerKilled
from tests.scaling.test_traffic import (  # noqa: F401
    GIVING, NS, RECEIVING, ROUTE, Dies, WorkerKilled, _start, _weights, observe, pools, sandbox,
)


def _set_by_hand(kube, weights: dict[str, int]) -> None:  # noqa: ANN001
    """The on-call puts the route back with kubectl."""
    def edit(route: dict) -> dict:
        for ref in route["spec"]["rules"][0]["backendRefs"]:
            ref["weight"] = weights[ref["name"]]
        return route
    kube.store.update(res.HTTPROUTES, NS, ROUTE, edit)


def test_a_shift_step_a_person_undid_is_not_written_again(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=15)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    with pytest.raises(WorkerKilled):
        traffic.tick(shift.pk, router=Dies(route_router(shift.cluster, shift.router_kind), after_write=True), now=now)
    assert _weights(kube) == {GIVING: 20, RECEIVING: 80}
    _set_by_hand(kube, {GIVING: 100, RECEIVING: 0})
    shift = traffic.tick(shift.pk, now=now)  # the next worker
    assert shift.phase == ShiftPhase.FAILED, (shift.phase, shift.last_error)
    assert "may have landed and been undone" in shift.last_error
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}


def test_a_shift_step_whose_write_never_landed_is_written_by_the_next_worker(sandbox, pools,  # noqa: ANN001, F811
                                                                             alice: User) -> None:  # noqa: F811
    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=15)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    with pytest.raises(WorkerKilled):
        traffic.tick(shift.pk, router=Dies(route_router(shift.cluster, shift.router_kind), after_write=False), now=now)
    shift = traffic.tick(shift.pk, now=now)
    assert (shift.phase, shift.step) == (ShiftPhase.HOLDING, 1) and _weights(kube) == {GIVING: 20, RECEIVING: 80}
    assert (shift.write_key, shift.write_generation) == ("", None)  # confirmed: nothing in flight


def test_a_fallback_entry_a_person_undid_is_not_written_again(sandbox, pools, policy: FallbackPolicy) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    with pytest.raises(FallbackWorkerKilled):
        fallbacks.tick(policy.pk, router=DiesAfterWrite(route_router(pools[0].cluster, "httproute")), now=now)
    assert _weights(kube) == {GIVING: 42, RECEIVING: 58}
    _set_by_hand(kube, {GIVING: 100, RECEIVING: 0})
    now += timedelta(seconds=15)
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    activation = fallbacks.tick(policy.pk, now=now)  # the next worker
    activation = FallbackActivation.objects.get(pk=activation.pk)
    assert activation.phase == FallbackPhase.FAILED, (activation.phase, activation.last_error)
    assert "may have landed and been undone" in activation.last_error
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}
