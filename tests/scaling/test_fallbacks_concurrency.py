"""Many workers on one fallback policy, on real PostgreSQL connections: one activation, one route write."""
from __future__ import annotations

import pytest
from django.utils import timezone

from sandbox.kube import resources as res
from scaling import fallbacks
from scaling.models import FallbackActivation

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
