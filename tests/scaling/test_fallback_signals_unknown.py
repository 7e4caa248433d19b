"""A fallback when the primary's signals go unknown: the Kubernetes read failing (ready replicas unknown) is not
"no replica ready", a return does not step down blind, and a person is not let send the route to a fallback pool
known to have no ready replica (sandbox route, PostgreSQL)."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import fallbacks, services
from scaling.choices import FallbackPhase
from scaling.drivers.cluster import ReplicaStatus
from scaling.models import FallbackActivation, PlannerMemory

from tests.core.conftest import alice, cluster, ml_team  # noqa: F401
from tests.scaling.test_fallbacks import feed, policy  # noqa: F401
from tests.scaling.test_traffic import GIVING, RECEIVING, _weights, pools, sandbox  # noqa: F401


def loop_tick(pools, now: datetime, primary: tuple, fallback: tuple) -> None:  # noqa: ANN001, F811
    """The loop stored what Prometheus said (rate, TTFT p95; None: unknown), but read no Deployment: PoolStatus ages."""
    for pool, (rate, latency) in ((pools[0], primary), (pools[1], fallback)):
        PlannerMemory.objects.update_or_create(pool=pool, defaults={
            "last_signals": {"request_rate_rps": rate, "ttft_p95_s": latency, "queue_time_p95_s": None},
            "last_decision": {"at": now.isoformat()}})


def test_unknown_ready_replicas_are_not_read_as_none_ready(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    Pool.objects.filter(pk=pools[0].pk).update(max_replicas=8)
    now = timezone.now()
    for pool in pools:  # 4 ready (200 req/s at 50 each) when the Kubernetes API last answered, 10 minutes ago
        services.record_status(pool, ReplicaStatus(4, 4), now - timedelta(minutes=10))
    for _ in range(3):  # 120 req/s, TTFT a little over the 1-s SLO
        loop_tick(pools, now, (120.0, 1.5), (0.0, 0.1))
        activation = fallbacks.tick(policy.pk, now=now)
        now += timedelta(seconds=15)
    # Unknown is not zero: "0 ready replicas" would send the whole route to the smaller model.
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}, FallbackActivation.objects.values("reasons").first()
    assert activation is None


def test_an_open_fallback_keeps_its_share_while_the_primarys_replicas_are_unknown(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    assert fallbacks.tick(policy.pk, now=now).route_percent == 58
    for _ in range(8):  # two minutes in which the Deployment's read fails while Prometheus answers
        now += timedelta(seconds=15)
        loop_tick(pools, now, (42.0, 1.2), (58.0, 0.1))
        activation = fallbacks.tick(policy.pk, now=now)
    assert (activation.phase, activation.route_percent) == (FallbackPhase.ACTIVE, 58), activation.reasons
    assert _weights(kube) == {GIVING: 42, RECEIVING: 58}


def test_the_return_holds_while_the_primarys_latency_is_unknown(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    activation = fallbacks.tick(policy.pk, now=now)
    for _ in range(12):  # the surge ends: calm, then the return starts at half the share
        now += timedelta(seconds=15)
        feed(pools, now, primary_rps=30.0 * (1 - activation.route_percent / 100),
             fallback_rps=30.0 * activation.route_percent / 100, ttft_s=0.2)
        activation = fallbacks.tick(policy.pk, now=now)
        if activation.phase == FallbackPhase.RESTORING:
            break
    assert (activation.phase, activation.route_percent) == (FallbackPhase.RESTORING, 29)
    for _ in range(10):  # Prometheus goes down for 150 s (each return step is held 30 s)
        now += timedelta(seconds=15)
        feed(pools, now, primary_rps=None, fallback_rps=None, ttft_s=None)  # type: ignore[arg-type]
        activation = fallbacks.tick(policy.pk, now=now) or FallbackActivation.objects.get(pk=activation.pk)
    # Nothing says the primary can take the traffic back: the return holds where it was.
    assert (activation.phase, activation.route_percent) == (FallbackPhase.RESTORING, 29), activation.reasons
    assert _weights(kube) == {GIVING: 71, RECEIVING: 29}


def test_a_person_cannot_send_the_route_to_a_fallback_pool_with_no_ready_replica(sandbox, pools, policy,  # noqa: ANN001, F811
                                                                                  alice: User) -> None:  # noqa: F811
    kube, _ = sandbox
    now = timezone.now()
    services.record_status(pools[0], ReplicaStatus(1, 1), now)
    services.record_status(pools[1], ReplicaStatus(0, 0), now)  # the fallback pool is scaled to zero
    with pytest.raises(fallbacks.FallbackConflict, match="0 ready replicas"):
        fallbacks.activate(pools[0], 1.0, core.Actor(alice, Channel.API))
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0} and not FallbackActivation.objects.exists()
