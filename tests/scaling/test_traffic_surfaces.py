"""What a person meets driving traffic through the API: a shift between two pools on one backend of the
route, a breaker forced while the cluster cannot be reached, a pool filter given a fraction."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.models import AuditEvent, Pool
from scaling import traffic
from scaling.choices import BreakerScope, BreakerState
from scaling.models import CircuitBreaker, TrafficShift

from tests.core.conftest import token_client
from tests.scaling.test_traffic import pools, sandbox  # noqa: F401


def test_a_shift_between_two_pools_on_one_backend_is_refused(alice: User, bob: User, pools: list[Pool]) -> None:  # noqa: F811
    assert token_client(bob).patch(f"/api/v1/pools/{pools[1].pk}/", {"route_backend": pools[0].route_backend},
                                   format="json").status_code == 200
    answer = token_client(alice).post("/api/v1/shifts/", {"from_pool": pools[0].pk, "to_pool": pools[1].pk},
                                      format="json")
    assert answer.status_code == 400 and "would move nothing" in str(answer.data["to_pool"])
    assert not TrafficShift.objects.exists()


def test_forcing_a_breaker_while_the_cluster_is_unreachable_holds_it(alice: User, pool: Pool, settings) -> None:  # noqa: ANN001
    settings.KUBERNETES_ENABLED = False  # the pod's label cannot be written now
    breaker = CircuitBreaker.objects.create(scope=BreakerScope.ENDPOINT, pool=pool, endpoint="chat-0",
                                            since=timezone.now(), failure_ratio=0.01, min_requests=100, open_for_s=30)
    answer = token_client(alice).post(f"/api/v1/breakers/{breaker.pk}/open/", {"comment": "drain"}, format="json")
    assert answer.status_code == 200 and (answer.data["state"], answer.data["forced"]) == (BreakerState.OPEN, True)
    assert AuditEvent.objects.filter(action="breaker-open").count() == 1


def test_a_fraction_is_no_pool_id(alice: User, pools: list[Pool]) -> None:  # noqa: F811
    traffic.start(pools[0], pools[1], traffic.core.Actor(alice, "api"))
    answer = token_client(alice).get(f"/api/v1/shifts/?pool={pools[0].pk}.7")
    assert answer.status_code == 400 and "pool" in answer.data
    assert len(token_client(alice).get(f"/api/v1/shifts/?pool={pools[0].pk}").data["results"]) == 1
