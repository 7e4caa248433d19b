"""Circuit breakers while people and controllers change the pods under them (from an auditor's world scenarios,
docs/traffic.md "Circuit breakers (live)"): a label removed by hand is put back; the row of a pod that is gone is no
longer evaluated, so it ages out of the fallback's picture (an unread pod list is no verdict); repointing a pool
at another Deployment leaves no pod of the old one ejected. The counts are scripted, as the beat would read them."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from kubernetes import client

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Cluster, Pool, Team
from sandbox.fleet import Fleet
from sandbox.kube import rbac
from sandbox.kube import resources as res
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from sandbox.replica import wait_until
from scaling import breakers, fallbacks
from scaling.choices import BreakerScope, BreakerState
from scaling.drivers.cluster import DriverError
from scaling.drivers.kubernetes import EJECTED_LABEL, KubernetesDriver
from scaling.engine.breakers import WindowCounts
from scaling.models import BreakerTransition, CircuitBreaker, FallbackPolicy
from scaling.sim.profiles import get_profile

from tests.core.conftest import token_client

NS, DEPLOYMENT = "inference", "vllm-chat-8b"


def profile():  # noqa: ANN201
    return dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=2)


@pytest.fixture
def kube(settings) -> Iterator[SandboxCluster]:  # noqa: ANN001
    with Fleet() as fleet, SandboxCluster(fleet, route_namespace=NS) as running:
        running.add_pool(PoolSpec(name=DEPLOYMENT, profile=profile(), namespace=NS, cold_start_s=0, replicas=2))
        assert wait_until(lambda: len(running.ready_replicas(NS, DEPLOYMENT)) == 2, 10)
        settings.KUBERNETES_ENABLED = True
        yield running


@pytest.fixture
def bpool(cluster: Cluster, ml_team: Team, kube: SandboxCluster) -> Pool:
    Cluster.objects.filter(pk=cluster.pk).update(kube_api_url=kube.url)
    pool = Pool.objects.create(cluster=Cluster.objects.get(pk=cluster.pk), team=ml_team, name="chat-8b",
                               namespace=NS, deployment=DEPLOYMENT, model_name="chat", gpu_type="H100",
                               min_replicas=1, max_replicas=8, replica_capacity_rps=50.0)
    FallbackPolicy.objects.create(pool=pool, enabled=False)  # read by breaker_picture; moves nothing
    return pool


def add_deployment(kube: SandboxCluster, name: str, **spec: object) -> None:
    defaults: dict = dict(namespace=NS, replicas=1, cold_start_s=0.5, max_replicas=8)
    defaults.update(spec)
    kube.add_pool(PoolSpec(name=name, profile=profile(), **defaults))


def set_replicas(kube: SandboxCluster, n: int, name: str = DEPLOYMENT) -> None:
    """Someone else (a person with kubectl, another tool) scales the Deployment."""
    client.AppsV1Api(rbac.admin_client(kube.url)).patch_namespaced_deployment_scale(
        name, NS, {"spec": {"replicas": n}})


def pods(kube: SandboxCluster, deployment: str = DEPLOYMENT) -> list[str]:
    return sorted(r.name for r in kube.replicas(NS, deployment))


def labels(kube: SandboxCluster, pod: str) -> dict:
    return kube.store.get(res.PODS, NS, pod)["metadata"].get("labels") or {}


def healthy(names: list[str]) -> dict[str, WindowCounts]:
    return {name: WindowCounts(200, 0) for name in names}


def _grow_to(kube: SandboxCluster, n: int) -> str:
    """Scale up by one (a second later than the others: the ReplicaSet removes the newest first); the new pod."""
    before = set(pods(kube))
    time.sleep(1.1)
    set_replicas(kube, n)
    assert wait_until(lambda: len(kube.ready_replicas(NS, DEPLOYMENT)) == n, 10)
    [new] = set(pods(kube)) - before
    return new


def _shrink_to(kube: SandboxCluster, n: int) -> None:
    set_replicas(kube, n)
    assert wait_until(lambda: len(pods(kube)) == n, 10)


def _repoint(pool: Pool, user: User, deployment: str) -> None:
    response = token_client(user).patch(f"/api/v1/pools/{pool.pk}/", {"deployment": deployment}, format="json")
    assert response.status_code == 200, response.content
    pool.refresh_from_db()


def test_a_label_removed_by_hand_is_put_back_without_a_new_transition(bpool: Pool, kube: SandboxCluster) -> None:
    driver = KubernetesDriver(kube.url)
    bad, good = pods(kube)
    now = timezone.now()
    breakers.evaluate(bpool, {bad: WindowCounts(200, 100), good: WindowCounts(200, 0)}, now, driver)
    assert labels(kube, bad).get(EJECTED_LABEL) == "true"
    transitions = BreakerTransition.objects.count()
    client.CoreV1Api(rbac.admin_client(kube.url)).patch_namespaced_pod(
        bad, NS, {"metadata": {"labels": {EJECTED_LABEL: None}}})
    assert EJECTED_LABEL not in labels(kube, bad)
    breakers.evaluate(bpool, {good: WindowCounts(200, 0)}, now + timedelta(seconds=15), driver)
    assert labels(kube, bad).get(EJECTED_LABEL) == "true"
    assert BreakerTransition.objects.count() == transitions


def test_a_deleted_ejected_pod_stops_counting_once_gone(bpool: Pool, kube: SandboxCluster) -> None:
    """An ejected pod is removed by a scale-down (or replaced: a new name); the pool's other pods all fail later.
    The gone pod's row must stop counting after 90 s, so all the live endpoints open read 'failing as a whole'."""
    driver = KubernetesDriver(kube.url)
    first, second = pods(kube)
    ghost = _grow_to(kube, 3)
    t0 = timezone.now()
    breakers.evaluate(bpool, {ghost: WindowCounts(200, 100), **healthy([first, second])}, t0, driver)
    assert labels(kube, ghost).get(EJECTED_LABEL) == "true"
    _shrink_to(kube, 2)  # the ReplicaSet removes the newest: the ejected pod is gone
    assert ghost not in pods(kube)
    replacement = _grow_to(kube, 3)
    live = [first, second, replacement]
    for step in range(1, 9):  # two minutes of beats with the live pods healthy
        breakers.evaluate(bpool, healthy(live), t0 + timedelta(seconds=15 * step), driver)
    ghost_moves = list(BreakerTransition.objects.filter(breaker__endpoint=ghost).values_list("from_state", "to_state"))
    assert ghost_moves == [(BreakerState.CLOSED, BreakerState.OPEN)]  # no probing of a pod that does not exist
    end = t0 + timedelta(seconds=135)
    breakers.evaluate(bpool, {pod: WindowCounts(200, 100) for pod in live}, end, driver)  # every live pod fails
    picture = fallbacks.breaker_picture(FallbackPolicy.objects.get(pool=bpool), end + timedelta(seconds=1))
    ghost_row = CircuitBreaker.objects.get(scope=BreakerScope.ENDPOINT, pool=bpool, endpoint=ghost)
    assert picture.failing, (
        f"all 3 live endpoints open, yet not 'failing as a whole': the gone pod {ghost}'s row is still evaluated "
        f"every beat ({ghost_row.state}, last_counts {ghost_row.last_counts}) and counts as an endpoint; its "
        f"transitions after it was gone: {ghost_moves}; picture {picture}")


def test_a_forced_open_pod_that_is_gone_stops_counting_as_ejected(bpool: Pool, kube: SandboxCluster,
                                                                  alice: User) -> None:
    """A person forces a bad pod's breaker open; the rollout (or a scale-down) then removes that pod. Its held row
    must stop counting as one ejected replica once stale: else the fallback reads one routable replica fewer."""
    driver = KubernetesDriver(kube.url)
    first, second = pods(kube)
    victim = _grow_to(kube, 3)
    t0 = timezone.now()
    breakers.evaluate(bpool, healthy([first, second, victim]), t0, driver)
    row = CircuitBreaker.objects.get(scope=BreakerScope.ENDPOINT, pool=bpool, endpoint=victim)
    breakers.force(row.pk, BreakerState.OPEN, core.Actor(alice, Channel.API), "bad GPU", driver=driver, now=t0)
    assert labels(kube, victim).get(EJECTED_LABEL) == "true"
    _shrink_to(kube, 2)
    for step in range(1, 13):  # three minutes of beats
        breakers.evaluate(bpool, healthy([first, second]), t0 + timedelta(seconds=15 * step), driver)
    picture = fallbacks.breaker_picture(FallbackPolicy.objects.get(pool=bpool), t0 + timedelta(seconds=181))
    assert picture.ejected == 0, (f"{picture.ejected} replica counted ejected, but pod {victim} is gone and the two "
                                  f"live pods are closed")


class _PodsUnread(KubernetesDriver):
    """The pool's pods cannot be read for the next `failures` calls (the API server times out)."""

    def __init__(self, url: str, failures: int) -> None:
        super().__init__(url)
        self.failures = failures

    def endpoints(self, workload):  # noqa: ANN001, ANN201
        if self.failures:
            self.failures -= 1
            raise DriverError("list pods: timed out", permanent=False)
        return super().endpoints(workload)


def test_an_unread_pod_list_is_no_verdict_that_every_pod_is_gone(bpool: Pool, kube: SandboxCluster) -> None:
    """When the pods cannot be read, every known row steps as before (nothing is taken for gone), and the row
    keeps the workload it recorded; the next read steps the live pods only."""
    first, second = pods(kube)
    t0 = timezone.now()
    breakers.evaluate(bpool, healthy([first, second]), t0, KubernetesDriver(kube.url))
    later = t0 + timedelta(seconds=15)
    breakers.evaluate(bpool, {}, later, _PodsUnread(kube.url, failures=1))  # the evaluation's read fails
    for row in CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, pool=bpool):
        assert row.last_counts["at"] == later.isoformat()
        assert row.last_counts["workload"] == {"cluster": bpool.cluster_id, "namespace": NS, "deployment": DEPLOYMENT}
    with pytest.raises(DriverError):  # unread at all: reconcile says so, as before; the rows still stepped
        breakers.evaluate(bpool, {}, later + timedelta(seconds=15), _PodsUnread(kube.url, failures=2))
    assert {row.last_counts["at"] for row in CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, pool=bpool)} \
        == {(later + timedelta(seconds=15)).isoformat()}


def test_repointing_the_pool_leaves_no_pod_ejected_behind(bpool: Pool, kube: SandboxCluster, bob: User) -> None:
    """The pool is repointed at a new Deployment (blue/green) while one of the old one's pods is ejected. The old
    pod must not keep `headroom.io/ejected=true`: nothing of Headroom looks at that Deployment again, and the
    route's Service would keep leaving the pod out (another pool that takes the Deployment over, included)."""
    driver = KubernetesDriver(kube.url)
    bad, good = pods(kube)
    now = timezone.now()
    breakers.evaluate(bpool, {bad: WindowCounts(200, 100), good: WindowCounts(200, 0)}, now, driver)
    add_deployment(kube, "vllm-green", replicas=2, cold_start_s=0)
    _repoint(bpool, bob, "vllm-green")
    green = pods(kube, "vllm-green")
    for step in range(1, 5):
        breakers.evaluate(bpool, healthy(green), now + timedelta(seconds=15 * step), driver)
    assert EJECTED_LABEL not in labels(kube, bad), (
        f"pod {bad} of {DEPLOYMENT}, no longer the pool's, is still labelled ejected")


def test_a_repoint_ends_the_old_pods_rows_once_recorded_and_audited(bpool: Pool, kube: SandboxCluster,
                                                                      alice: User, bob: User) -> None:
    """The old Deployment's open row and a person's hold on another of its pods end at the first evaluation after
    the repoint: a transition with the reason, an audit record, the hold released; later evaluations write nothing."""
    driver = KubernetesDriver(kube.url)
    bad, held = pods(kube)
    third = _grow_to(kube, 3)
    now = timezone.now()
    breakers.evaluate(bpool, {bad: WindowCounts(200, 100), **healthy([held, third])}, now, driver)
    held_row = CircuitBreaker.objects.get(scope=BreakerScope.ENDPOINT, pool=bpool, endpoint=held)
    breakers.force(held_row.pk, BreakerState.OPEN, core.Actor(alice, Channel.API), "suspect", driver=driver, now=now)
    assert labels(kube, bad).get(EJECTED_LABEL) == "true" == labels(kube, held).get(EJECTED_LABEL)
    add_deployment(kube, "vllm-green", replicas=2, cold_start_s=0)
    _repoint(bpool, bob, "vllm-green")
    green = pods(kube, "vllm-green")
    breakers.evaluate(bpool, healthy(green), now + timedelta(seconds=15), driver)
    for pod in (bad, held):
        row = CircuitBreaker.objects.get(scope=BreakerScope.ENDPOINT, pool=bpool, endpoint=pod)
        assert (row.state, row.forced) == (BreakerState.CLOSED, False)
        last = row.transitions.last()
        assert (last.from_state, last.to_state) == (BreakerState.OPEN, BreakerState.CLOSED)
        assert f"no longer runs {NS}/{DEPLOYMENT}" in last.reason and "vllm-green" in last.reason
        assert EJECTED_LABEL not in labels(kube, pod)
    old = CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, pool=bpool, endpoint__in=[bad, held])
    assert AuditEvent.objects.filter(action="breaker-closed", object_id__in=[str(row.pk) for row in old]).count() == 2

    def written() -> tuple[int, int]:  # the endpoint rows' transitions, and the audit records of the old pods' rows
        return (BreakerTransition.objects.filter(breaker__scope=BreakerScope.ENDPOINT).count(),
                AuditEvent.objects.filter(object_id__in=[str(row.pk) for row in old]).count())
    before = written()
    for step in range(2, 5):
        breakers.evaluate(bpool, healthy(green), now + timedelta(seconds=15 * step), driver)
    assert written() == before
    assert all(EJECTED_LABEL not in labels(kube, pod) for pod in green + [bad, held, third])
