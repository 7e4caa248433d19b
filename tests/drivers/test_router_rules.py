"""Which rule of a route the routers change: the one naming every backend of the change, even when a rule
of a class's own (the primary alone, matched on a header, as docs/sandbox.md advises) comes first."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.kube import resources as res
from sandbox.kube.server import KubeApiServer
from sandbox.kube.store import ObjectStore
from scaling.drivers.cluster import DriverError
from scaling.drivers.routers import HTTPRouteRouter, VirtualServiceRouter
from scaling.drivers.routing import RouteRef, WeightPremise

from tests.drivers.test_routers import api, store  # noqa: F401 (the emulator with an empty store)

NS = "inference"
ROUTE = RouteRef(NS, "chat")
START = {"chat-8b": 100, "chat-8b-warm": 0}
STEP = {"chat-8b": 20, "chat-8b-warm": 80}
PRIORITY = [{"headers": [{"name": "x-request-class", "value": "priority"}]}]


def _http_route(*rules: dict[str, int]) -> dict:
    return {"metadata": {"name": "chat", "namespace": NS}, "spec": {"parentRefs": [{"name": "gw"}], "rules": [
        {"matches": PRIORITY if index == 0 else [{"path": {"type": "PathPrefix", "value": "/v1"}}],
         "backendRefs": [{"name": name, "port": 8000, "weight": weight} for name, weight in weights.items()]}
        for index, weights in enumerate(rules)]}}


def _virtual_service(*rules: dict[str, int]) -> dict:
    return {"metadata": {"name": "chat", "namespace": NS}, "spec": {"hosts": ["chat"], "http": [
        {**({"match": [{"headers": {"x-request-class": {"exact": "priority"}}}]} if index == 0 else {}),
         "route": [{"destination": {"host": f"{name}.{NS}.svc.cluster.local"}, "weight": weight}
                   for name, weight in weights.items()]}
        for index, weights in enumerate(rules)]}}


@pytest.fixture
def http_route(api: KubeApiServer) -> Iterator[HTTPRouteRouter]:
    router = HTTPRouteRouter(api.url)
    yield router
    router.close()


@pytest.fixture
def virtual_service(api: KubeApiServer) -> Iterator[VirtualServiceRouter]:
    router = VirtualServiceRouter(api.url)
    yield router
    router.close()


def test_it_shifts_the_rule_with_both_backends_behind_a_priority_rule(http_route: HTTPRouteRouter,
                                                                       store: ObjectStore) -> None:
    store.create(res.HTTPROUTES, _http_route({"chat-8b": 1}, START))
    assert http_route.read(ROUTE, set(START)).weights == START
    outcome = http_route.set_weights(ROUTE, STEP, WeightPremise((START,)))
    assert outcome.wrote and outcome.weights == STEP
    rules = store.get(res.HTTPROUTES, NS, "chat")["spec"]["rules"]
    assert rules[0]["backendRefs"] == [{"name": "chat-8b", "port": 8000, "weight": 1}]  # the priority rule stays
    assert {ref["name"]: ref["weight"] for ref in rules[1]["backendRefs"]} == STEP


def test_a_virtual_service_shifts_the_route_with_both_destinations(virtual_service: VirtualServiceRouter,
                                                                   store: ObjectStore) -> None:
    store.create(res.VIRTUALSERVICES, _virtual_service({"chat-8b": 100}, START))
    outcome = virtual_service.set_weights(ROUTE, STEP, WeightPremise((START,)))
    assert outcome.wrote and outcome.weights == STEP
    http = store.get(res.VIRTUALSERVICES, NS, "chat")["spec"]["http"]
    assert [ref["weight"] for ref in http[0]["route"]] == [100]
    assert [ref["weight"] for ref in http[1]["route"]] == [20, 80]


def test_of_several_rules_with_both_backends_the_first_is_changed(http_route: HTTPRouteRouter,
                                                                  store: ObjectStore) -> None:
    store.create(res.HTTPROUTES, _http_route({"chat-8b": 1}, START, START))
    http_route.set_weights(ROUTE, STEP, WeightPremise((START,)))
    rules = store.get(res.HTTPROUTES, NS, "chat")["spec"]["rules"]
    assert [[ref["weight"] for ref in rule["backendRefs"]] for rule in rules] == [[1], [20, 80], [100, 0]]


def test_without_a_rule_naming_both_it_refuses_naming_the_route(http_route: HTTPRouteRouter,
                                                                store: ObjectStore) -> None:
    store.create(res.HTTPROUTES, _http_route({"chat-8b": 1}, {"chat-8b-warm": 1}))
    version = store.get(res.HTTPROUTES, NS, "chat")["metadata"]["resourceVersion"]
    with pytest.raises(DriverError, match="HTTPRoute inference/chat has no backend chat-8b-warm") as refused:
        http_route.set_weights(ROUTE, STEP, WeightPremise((START,)))
    assert refused.value.permanent
    assert store.get(res.HTTPROUTES, NS, "chat")["metadata"]["resourceVersion"] == version
