"""Circuit breakers send a pool to its fallback: scripted scenarios on the sandbox (real route weights in the
Kubernetes API emulator, real pod labels, PostgreSQL rows). Endpoint breakers open on the per-pod counts a
scenario gives; the pool's signals are what the control loop would store at its tick (PlannerMemory,
PoolStatus), as in test_fallbacks.py."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Cluster, Pool, Team
from sandbox.fleet import Fleet
from sandbox.gateway import Gateway
from sandbox.kube import resources as res
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from scaling import breakers, fallbacks, services
from scaling.choices import BreakerScope, BreakerState, FallbackPhase
from scaling.drivers.cluster import ReplicaStatus
from scaling.engine.breakers import WindowCounts
from scaling.models import CircuitBreaker, FallbackActivation, FallbackPolicy, PlannerMemory
from scaling.sim.profiles import get_profile

from tests.core.conftest import alice, cluster, ml_team  # noqa: F401

NS, ROUTE = "inference", "sandbox-route"
PRIMARY, FALLBACK = "vllm-chat-8b", "vllm-chat-1b"
DEMAND = 100.0  # req/s on the route; one primary replica serves 50 at its SLO (85 % of it planned: 42.5)


@pytest.fixture
def sandbox(settings) -> Iterator[SandboxCluster]:  # noqa: ANN001
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=4,
                                  itl_ms_base=1.0, itl_ms_per_seq=0.0)
    with Fleet() as fleet, SandboxCluster(fleet, route_namespace=NS) as kube:
        kube.add_pool(PoolSpec(name=PRIMARY, profile=profile, namespace=NS, model="chat", cold_start_s=0, replicas=3,
                               weight=100))
        kube.add_pool(PoolSpec(name=FALLBACK, profile=profile, namespace=NS, model="chat-small", cold_start_s=0,
                               weight=0))
        settings.KUBERNETES_ENABLED = True
        gateway = Gateway(kube).start()
        yield kube
        gateway.stop()


def _pool(cluster: Cluster, team: Team, name: str, deployment: str, **fields) -> Pool:  # noqa: ANN003, F811
    return Pool.objects.create(cluster=cluster, team=team, name=name, namespace=NS, deployment=deployment,
                               model_name=name, gpu_type="H100", min_replicas=1, max_replicas=8,
                               replica_capacity_rps=50.0, route_name=ROUTE, route_backend=deployment, **fields)


@pytest.fixture
def policy(cluster: Cluster, ml_team: Team, sandbox: SandboxCluster) -> FallbackPolicy:  # noqa: F811
    Cluster.objects.filter(pk=cluster.pk).update(kube_api_url=sandbox.url)
    cluster.refresh_from_db()
    small = _pool(cluster, ml_team, "chat-1b", FALLBACK)
    primary = _pool(cluster, ml_team, "chat-8b", PRIMARY, fallback_pool=small)
    return FallbackPolicy.objects.create(pool=primary, exit_after_s=60, return_step_hold_s=30)


def feed(policy: FallbackPolicy, now: datetime, percent: int, ttft_s: float = 0.3) -> None:
    """The loop's tick: the route's demand split by the fallback's share; three primary replicas ready."""
    primary, small = policy.pool, policy.pool.fallback_pool
    for pool, rate, ready in ((primary, DEMAND * (100 - percent) / 100, 3), (small, DEMAND * percent / 100, 2)):
        services.record_status(pool, ReplicaStatus(ready, ready), now)
        PlannerMemory.objects.update_or_create(pool=pool, defaults={
            "last_signals": {"request_rate_rps": rate, "ttft_p95_s": ttft_s, "queue_time_p95_s": None},
            "last_decision": {"at": now.isoformat()}})


def weights(kube: SandboxCluster) -> dict[str, int]:
    return {pool.name: weight for pool, weight in kube.route_weights()}


def pods(kube: SandboxCluster) -> list[str]:
    return sorted(replica.name for replica in kube.replicas(NS, PRIMARY))


def test_breakers_ejecting_capacity_send_the_overflow_to_the_fallback_and_it_returns(sandbox, policy) -> None:  # noqa: ANN001
    kube, now = sandbox, timezone.now()
    first, second, third = pods(kube)
    healthy = {pod: WindowCounts(200, 0) for pod in (first, second, third)}
    feed(policy, now, 0)
    breakers.evaluate(policy.pool, healthy, now)
    assert fallbacks.tick(policy.pk, now=now) is None  # three replicas carry 100 req/s
    # Two endpoints fail: their breakers open and eject them; one replica cannot carry the demand.
    now += timedelta(seconds=15)
    feed(policy, now, 0)
    failing = {first: WindowCounts(200, 60), second: WindowCounts(200, 80), third: WindowCounts(200, 0)}
    states = breakers.evaluate(policy.pool, failing, now)
    assert states == {first: "open", second: "open", third: "closed"}
    assert kube.store.get(res.PODS, NS, first)["metadata"]["labels"]["headroom.io/ejected"] == "true"
    # The breakers' evaluation ticked the fallback at once (not at the next beat): the overflow moved.
    activation = FallbackActivation.objects.get(pool=policy.pool)
    assert (activation.phase, activation.trigger, activation.forced) == (FallbackPhase.ACTIVE, "auto", False)
    # 100 req/s less 42.5 served by the one routable replica: 57.5 % of the eligible traffic, rounded up.
    assert activation.route_percent == 58 and weights(kube) == {PRIMARY: 42, FALLBACK: 58}
    assert "circuit breakers ejected 2 of 3 ready replicas" in activation.reasons[0]
    # Idempotent: the next beat's evaluation and fallback tick (the same picture) change nothing.
    breakers.evaluate(policy.pool, failing, now)
    assert fallbacks.tick(policy.pk, now=now).pk == activation.pk
    assert FallbackActivation.objects.count() == 1
    audited = AuditEvent.objects.filter(object_type="scaling.fallbackactivation", object_id=str(activation.pk))
    assert list(audited.values_list("action", flat=True)) == ["fallback-entered"]
    # The pods are fixed. Past the cool-down the breakers probe, then close; the pool is calm.
    timeline = []
    for tick in range(30):
        now += timedelta(seconds=15)
        percent = FallbackActivation.objects.get(pk=activation.pk).route_percent
        feed(policy, now, percent, ttft_s=0.2)
        probes = {pod: WindowCounts(20, 0) for pod in (first, second, third)}
        states = breakers.evaluate(policy.pool, probes, now)
        activation = fallbacks.tick(policy.pk, now=now) or FallbackActivation.objects.get(pk=activation.pk)
        timeline.append((tuple(sorted(states.values())), activation.phase, activation.route_percent))
        if activation.phase == FallbackPhase.RESTORED:
            break
    assert activation.phase == FallbackPhase.RESTORED, timeline
    assert weights(kube) == {PRIMARY: 100, FALLBACK: 0}
    assert "headroom.io/ejected" not in kube.store.get(res.PODS, NS, first)["metadata"]["labels"]
    # It held while any endpoint was still out, and returned in steps only after: never flapping.
    written = [percent for _, _, percent in timeline]
    assert [p for i, p in enumerate(written) if i == 0 or p != written[i - 1]] == [58, 29, 15, 0], timeline
    still_out = [i for i, (states, _, _) in enumerate(timeline) if "open" in states or "half_open" in states]
    first_step_down = next(i for i, (_, _, percent) in enumerate(timeline) if percent < 58)
    assert still_out and max(still_out) < first_step_down
    kinds = list(activation.events.values_list("kind", flat=True))
    assert kinds[0] == "entered" and "return_started" in kinds and kinds[-1] == "route_restored"
    assert "reactivated" not in kinds


def test_all_endpoints_open_send_all_the_eligible_traffic(sandbox, policy) -> None:  # noqa: ANN001
    kube, now = sandbox, timezone.now()
    FallbackPolicy.objects.filter(pk=policy.pk).update(max_share=0.8)
    feed(policy, now, 0)
    breakers.evaluate(policy.pool, {pod: WindowCounts(200, 100) for pod in pods(kube)}, now)
    activation = FallbackActivation.objects.get(pool=policy.pool)
    # Ejecting every endpoint would be an outage, so all stay in the route, but the fallback takes all it may.
    assert activation.share == 0.8 and weights(kube) == {PRIMARY: 20, FALLBACK: 80}
    assert activation.reasons[0] == "circuit breakers open on all 3 endpoints of the pool"


def test_the_system_breaker_sends_pools_with_a_policy_and_a_disabled_one_stays(sandbox, policy,  # noqa: ANN001
                                                                              alice: User) -> None:  # noqa: F811
    kube, now = sandbox, timezone.now()
    feed(policy, now, 0)
    breakers.evaluate(policy.pool, {pod: WindowCounts(50, 0) for pod in pods(kube)}, now)  # too few to judge
    FallbackPolicy.objects.filter(pk=policy.pk).update(enabled=False)
    system = breakers.evaluate_system(WindowCounts(10_000, 100), now)  # 1 % across the fleet
    assert system.state == BreakerState.OPEN and not FallbackActivation.objects.exists()
    # A person closes and re-opens it with the policy switched on: the pool falls back.
    FallbackPolicy.objects.filter(pk=policy.pk).update(enabled=True)
    superuser = User.objects.create_superuser("root", password="x")
    breakers.force(system.pk, "closed", core.Actor(superuser, Channel.API), now=now)
    breakers.force(system.pk, "open", core.Actor(superuser, Channel.API), now=now)
    activation = FallbackActivation.objects.get(pool=policy.pool)
    # All it may: the fallback's two ready replicas take 85 % of the demand at their target utilisation.
    assert activation.phase == FallbackPhase.ACTIVE and weights(kube) == {PRIMARY: 15, FALLBACK: 85}
    assert "system circuit breaker is open" in activation.reasons[0]
    assert CircuitBreaker.objects.get(scope=BreakerScope.SYSTEM).transitions.count() == 3


def test_breakers_not_evaluated_lately_say_nothing(sandbox, policy) -> None:  # noqa: ANN001
    kube, now = sandbox, timezone.now()
    FallbackPolicy.objects.filter(pk=policy.pk).update(enabled=False)
    breakers.evaluate(policy.pool, {pod: WindowCounts(200, 100) for pod in pods(kube)}, now - timedelta(minutes=5))
    FallbackPolicy.objects.filter(pk=policy.pk).update(enabled=True)
    feed(policy, now, 0)
    # Rows five minutes old (the pods may be gone, Prometheus may be down): no verdict, nothing moves.
    assert fallbacks.tick(policy.pk, now=now) is None
    assert weights(kube) == {PRIMARY: 100, FALLBACK: 0}
    assert FallbackPolicy.objects.get(pk=policy.pk).last_decision["reasons"] == ["no overload"]
