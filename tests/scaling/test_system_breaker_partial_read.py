"""The system breaker judges every pool's answers together: a beat that could not read one cluster's counts gives
no verdict, rather than judging the fleet by the clusters it did read."""
from __future__ import annotations

import pytest

from controlplane.models import Cluster, Pool, Team
from scaling import breakers
from scaling.choices import BreakerScope, BreakerState
from scaling.engine.breakers import WindowCounts
from scaling.models import CircuitBreaker

from tests.core.conftest import cluster, ml_team  # noqa: F401


def _pool(cluster: Cluster, team: Team, name: str) -> Pool:  # noqa: F811
    return Pool.objects.create(cluster=cluster, team=team, name=name, namespace="inference", deployment=name,
                               model_name=name, gpu_type="H100", min_replicas=1, max_replicas=8)


def test_a_cluster_whose_counts_could_not_be_read_leaves_the_system_breaker_alone(
        cluster: Cluster, ml_team: Team, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    small_cluster = Cluster.objects.create(name="gpu-eu-small", team=ml_team, kube_api_url="http://127.0.0.1:6444")
    _pool(cluster, ml_team, "chat-70b")  # the fleet's bulk: thousands of requests a minute, all fine
    small = _pool(small_cluster, ml_team, "embed")

    def read_counts(pools: list[Pool], now):  # noqa: ANN001, ANN202
        if pools[0].cluster_id == cluster.pk:
            raise RuntimeError("Prometheus of gpu-us-east: read timed out")
        return {small.pk: {"embed-0": WindowCounts(300, 3)}}  # 1 % of a small pool's 300 requests

    monkeypatch.setattr(breakers, "read_counts", read_counts)
    monkeypatch.setattr(breakers, "evaluate", lambda pool, counts, now=None: {})
    assert breakers.advance() == {"evaluated": 1, "errors": 1}
    system = CircuitBreaker.objects.filter(scope=BreakerScope.SYSTEM).first()
    # Open, it would send every pool with a fallback policy to its fallback pool.
    assert system is None or system.state == BreakerState.CLOSED, system.last_reasons
