"""Left running for a year: a pool's pods change with every scale-up and -down, and each pod gets an endpoint
breaker row. The rows of pods that are gone and never moved go an hour after their last evaluation; a row
that moved (its transitions are on incidents' timelines) or that a person holds stays."""
from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import breakers
from scaling.choices import BreakerScope, BreakerState
from scaling.engine.breakers import WindowCounts
from scaling.models import BreakerTransition, CircuitBreaker


class Pods:
    """The cluster's answer: the pool's pods now, all routable."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def endpoints(self, workload) -> dict[str, bool]:  # noqa: ANN001
        return {name: True for name in self.names}

    def set_routable(self, namespace: str, pod: str, routable: bool) -> None:
        raise AssertionError("no label changes: every breaker is closed")


def _endpoints(pool: Pool) -> list[str]:
    return sorted(CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, pool=pool).values_list("endpoint", flat=True))


def test_the_rows_of_gone_pods_that_never_moved_go_an_hour_after_their_last_evaluation(pool: Pool) -> None:
    now = timezone.now()
    healthy = {pod: WindowCounts(100, 0) for pod in ("a-1", "a-2", "a-3", "a-4")}
    breakers.evaluate(pool, healthy, now, driver=Pods(*healthy))
    tripped = CircuitBreaker.objects.get(endpoint="a-3")  # once opened, and closed again since
    BreakerTransition.objects.create(breaker=tripped, at=now, from_state=BreakerState.CLOSED, to_state=BreakerState.OPEN,
                                     actor_name="auto:system", channel=Channel.AUTO)
    CircuitBreaker.objects.filter(endpoint="a-4").update(forced=True)  # a person holds it closed
    new = {pod: WindowCounts(100, 0) for pod in ("b-1", "b-2")}
    breakers.evaluate(pool, new, now + timedelta(minutes=30), driver=Pods(*new))
    assert _endpoints(pool) == ["a-1", "a-2", "a-3", "a-4", "b-1", "b-2"]  # gone for less than an hour: kept
    breakers.evaluate(pool, new, now + timedelta(hours=2), driver=Pods(*new))
    assert _endpoints(pool) == ["a-3", "a-4", "b-1", "b-2"]
    assert BreakerTransition.objects.filter(breaker=tripped).exists()
    assert CircuitBreaker.objects.filter(scope=BreakerScope.POOL, pool=pool).exists()  # the pool's own breaker stays
