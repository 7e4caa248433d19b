"""The tick's leases and its slow dependencies: one worker per cluster for as long as it ticks it, an API
server that stops answering costs one timeout rather than one per pool, and the history backfill neither
repeats every tick against a slow Prometheus nor stores an instant twice. Each failed on the code before."""
from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from controlplane.models import Cluster, Pool
from scaling import loop
from scaling.models import PlannerMemory, SignalSample

from tests.scaling.prometheus_stub import Stub


def _pools(*pks: int) -> list[Pool]:
    query = Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules")
    return [query.get(pk=pk) for pk in pks]


def test_a_cluster_taken_late_in_a_tick_gets_a_whole_lease(pool: Pool, search_pool: Pool, settings,  # noqa: ANN001
                                                          monkeypatch) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = settings.KUBERNETES_ENABLED = False
    settings.TICK_LEASE_S = 1  # stands for 60 s: the clusters before it took longer than a lease
    real, seen = loop.tick_cluster, {}

    def tick_cluster(cluster, cluster_pools, now, holder=None):  # noqa: ANN001, ANN202
        if cluster.pk == pool.cluster_id:
            time.sleep(1.3)  # a slow first cluster
        elif "b" not in seen:
            seen["b"] = loop.tick(_pools(search_pool.pk), holder="worker-b")  # B's tick starts meanwhile
        return real(cluster, cluster_pools, now, holder)

    monkeypatch.setattr(loop, "tick_cluster", tick_cluster)
    loop.tick(_pools(pool.pk, search_pool.pk), holder="worker-a")
    # Before: A's lease on the second cluster was dated at A's tick start, over before A took it.
    assert search_pool.cluster.name in seen["b"].skipped


def test_the_lease_is_renewed_while_a_cluster_is_ticked(pool: Pool, settings, monkeypatch) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = settings.KUBERNETES_ENABLED = False
    settings.TICK_LEASE_S = 1  # stands for 60 s
    extra = [Pool.objects.create(cluster=pool.cluster, team=pool.team, name=f"p{i}", namespace="inference",
                                 deployment=f"d{i}", model_name=f"m{i}", gpu_type="H100", max_replicas=4).pk
             for i in range(2)]
    real, planned, seen = loop.tick_pool, [], {}

    def tick_pool(p, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        planned.append(p.pk)
        if len(planned) == 3:  # 1.2 s into the cluster: past a lease taken at its start
            seen["b"] = loop.acquire_cluster(p.cluster, "worker-b", timezone.now())
        time.sleep(0.6)
        return real(p, *args, **kwargs)

    monkeypatch.setattr(loop, "tick_pool", tick_pool)
    loop.tick(_pools(pool.pk, *extra), holder="worker-a")
    assert seen["b"] is False and len(planned) == 3


def test_an_api_server_that_stops_answering_costs_one_timeout_not_one_per_pool(pool: Pool, settings,  # noqa: ANN001
                                                                              monkeypatch) -> None:  # noqa: ANN001
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)  # accepts connections, never answers
    Cluster.objects.filter(pk=pool.cluster_id).update(kube_api_url=f"http://127.0.0.1:{hole.getsockname()[1]}")
    extra = [Pool.objects.create(cluster=pool.cluster, team=pool.team, name=f"p{i}", namespace="inference",
                                 deployment=f"d{i}", model_name=f"m{i}", gpu_type="H100", max_replicas=4).pk
             for i in range(3)]
    settings.PROMETHEUS_ENABLED, settings.KUBERNETES_ENABLED, settings.KUBERNETES_TIMEOUT_S = False, True, 1
    asked = []
    real = loop.workload_of
    monkeypatch.setattr(loop, "workload_of", lambda p: asked.append(p.pk) or real(p))
    started = time.monotonic()
    report = loop.tick(_pools(pool.pk, *extra), holder="worker-a")
    took = time.monotonic() - started
    hole.close()
    assert len(asked) == 1 and took < 3.0, (asked, took)  # before: 4 reads, 4 timeouts
    assert sum("not read this tick" in error for error in report.errors.values()) == 3
    assert all(tick.decided["target_replicas"] is None or tick.decided["current_replicas"] is None
               for tick in report.pools)  # unknown replicas: nothing acted on


@pytest.fixture
def prometheus(pool: Pool, settings) -> Iterator[Stub]:  # noqa: ANN001
    stub = Stub(deployments=[(pool.namespace, pool.deployment)])
    Cluster.objects.filter(pk=pool.cluster_id).update(prometheus_url=stub.url)
    settings.PROMETHEUS_ENABLED, settings.KUBERNETES_ENABLED = True, False
    yield stub
    stub.close()


def _range_queries(stub: Stub) -> int:
    return sum(path.endswith("query_range") for path, _ in stub.hits)


def test_a_failed_backfill_is_not_asked_again_every_tick(pool: Pool, prometheus: Stub, settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_TIMEOUT_S = settings.PROMETHEUS_DEADLINE_S = 2
    prometheus.delay = 2.5  # every query times out
    [p] = _pools(pool.pk)
    loop.tick_cluster(p.cluster, [p], timezone.now())
    asked = _range_queries(prometheus)
    started = time.monotonic()
    _, errors = loop.tick_cluster(p.cluster, [p], timezone.now())
    # Before: the range queries again, a timeout on top of the deadline, every tick.
    assert _range_queries(prometheus) == asked and time.monotonic() - started <= settings.PROMETHEUS_DEADLINE_S + 0.5
    cache.delete(f"headroom:backfill-failed:{p.cluster_id}")  # BACKFILL_RETRY_S later
    loop.tick_cluster(p.cluster, [p], timezone.now())
    assert _range_queries(prometheus) > asked


def test_a_backfill_stores_each_instant_once(pool: Pool, prometheus: Stub) -> None:
    [p] = _pools(pool.pk)
    loop.tick_cluster(p.cluster, [p], timezone.now().replace(microsecond=0))
    assert PlannerMemory.objects.get(pool=pool).history_backfilled_at is not None
    times = list(SignalSample.objects.filter(pool=pool).values_list("at", flat=True))
    assert len(times) == len(set(times)) > 100  # before: the instant where the two ranges meet, twice


def test_a_late_backfill_stores_nothing_over_what_the_ticks_stored(pool: Pool, prometheus: Stub) -> None:
    now = timezone.now().replace(second=0, microsecond=0)
    [p] = _pools(pool.pk)
    prometheus.range_status = 503  # the history query fails for the first minutes
    for minute in range(5):
        loop.tick_cluster(p.cluster, [p], now + timedelta(minutes=minute))
    assert SignalSample.objects.filter(pool=pool).count() == 5
    prometheus.range_status = 200
    cache.delete(f"headroom:backfill-failed:{p.cluster_id}")  # BACKFILL_RETRY_S later
    loop.tick_cluster(p.cluster, [p], now + timedelta(minutes=5))
    assert PlannerMemory.objects.get(pool=pool).history_backfilled_at is not None
    assert SignalSample.objects.filter(pool=pool, at__gte=now).count() == 6  # one per tick; before: 11
    assert SignalSample.objects.filter(pool=pool, at__lt=now).count() > 100  # the backfill before them
