"""Many workers on one shift, on real PostgreSQL connections: one step written once, one shift per route."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from sandbox.kube import resources as res
from scaling import traffic
from scaling.choices import ShiftPhase
from scaling.models import TrafficShift

from tests.concurrency import race
from tests.core.conftest import alice, cluster, ml_team  # noqa: F401
from tests.scaling.test_traffic import GIVING, NS, RECEIVING, ROUTE, observe, pools, sandbox  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_six_workers_ticking_one_shift_write_its_step_once(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API))
    now = timezone.now()
    observe(kube, gateway, pools, now)
    version = int(kube.store.get(res.HTTPROUTES, NS, ROUTE)["metadata"]["resourceVersion"])
    results = race(lambda: traffic.tick(shift.pk, now=now))
    assert not [result for result in results if isinstance(result, Exception)], results
    shift.refresh_from_db()
    assert (shift.phase, shift.step) == (ShiftPhase.HOLDING, 1)
    writes = [event for event in kube.store.events_since(version, res.HTTPROUTES, NS) if event.type == "MODIFIED"]
    assert len(writes) == 1  # one patch of the route, whoever made it
    assert {pool.name: weight for pool, weight in kube.route_weights()} == {GIVING: 20, RECEIVING: 80}
    assert shift.events.filter(to_phase=ShiftPhase.STEPPING).count() == 1
    assert shift.events.filter(to_phase=ShiftPhase.HOLDING).count() == 1


def test_six_starts_on_one_route_make_one_shift(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    results = race(lambda: traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API)))
    started = [result for result in results if isinstance(result, TrafficShift)]
    refused = [result for result in results if isinstance(result, traffic.ShiftConflict)]
    assert len({shift.pk for shift in started}) == 1 and len(started) + len(refused) == 6, results
    assert TrafficShift.objects.count() == 1
