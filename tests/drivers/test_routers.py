"""The routers against the sandbox's Kubernetes API emulator, over HTTP with the official client."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.kube import resources as res
from sandbox.kube.server import KubeApiServer
from sandbox.kube.store import ObjectStore
from scaling.drivers.cluster import DriverError
from scaling.drivers.routers import HTTPRouteRouter, VirtualServiceRouter
from scaling.drivers.routing import RoutePremiseChanged, RouteRef, WeightPremise

NS = "inference"
ROUTE = RouteRef(NS, "chat")
START = {"chat-8b": 100, "chat-8b-warm": 0}


def _http_route(weights: dict[str, int]) -> dict:
    refs = [{"group": "", "kind": "Service", "name": name, "port": 8000, "weight": weight}
            for name, weight in weights.items()]
    return {"metadata": {"name": "chat", "namespace": NS},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/admin"}}],
                 "backendRefs": [{"name": "admin", "port": 80}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}], "backendRefs": refs}]}}


def _virtual_service(weights: dict[str, int]) -> dict:
    route = [{"destination": {"host": f"{name}.{NS}.svc.cluster.local", "port": {"number": 8000}}, "weight": weight}
             for name, weight in weights.items()]
    return {"metadata": {"name": "chat", "namespace": NS}, "spec": {"hosts": ["chat"], "http": [{"route": route}]}}


@pytest.fixture
def store() -> ObjectStore:
    return ObjectStore()


@pytest.fixture
def api(store: ObjectStore) -> Iterator[KubeApiServer]:
    server = KubeApiServer(store).start()
    yield server
    server.stop()


@pytest.fixture
def http_route(store: ObjectStore, api: KubeApiServer) -> Iterator[HTTPRouteRouter]:
    store.create(res.HTTPROUTES, _http_route({**START, "other": 3}))
    router = HTTPRouteRouter(api.url)
    yield router
    router.close()


@pytest.fixture
def virtual_service(store: ObjectStore, api: KubeApiServer) -> Iterator[VirtualServiceRouter]:
    store.create(res.VIRTUALSERVICES, _virtual_service(START))
    router = VirtualServiceRouter(api.url)
    yield router
    router.close()


def _stored(store: ObjectStore) -> dict:
    return store.get(res.HTTPROUTES, NS, "chat")


def test_it_reads_the_rule_that_names_the_backends(http_route: HTTPRouteRouter) -> None:
    assert http_route.read(ROUTE, {"chat-8b"}).weights == {**START, "other": 3}
    assert http_route.read(ROUTE).weights == {"admin": 1}  # the first weighted rule; a missing weight is 1


def test_it_writes_a_step_and_reads_it_back(http_route: HTTPRouteRouter, store: ObjectStore) -> None:
    before = _stored(store)["metadata"]["resourceVersion"]
    outcome = http_route.set_weights(ROUTE, {"chat-8b": 20, "chat-8b-warm": 80}, WeightPremise((START,)))
    assert outcome.wrote and outcome.previous == {**START, "other": 3}
    assert outcome.weights == {"chat-8b": 20, "chat-8b-warm": 80, "other": 3}
    stored = _stored(store)
    assert stored["metadata"]["resourceVersion"] != before
    assert stored["spec"]["rules"][0]["backendRefs"] == [{"name": "admin", "port": 80}]  # other rules untouched


def test_a_rerun_finds_its_weights_and_writes_nothing(http_route: HTTPRouteRouter, store: ObjectStore) -> None:
    target = {"chat-8b": 20, "chat-8b-warm": 80}
    http_route.set_weights(ROUTE, target, WeightPremise((START,)))
    version = _stored(store)["metadata"]["resourceVersion"]
    again = http_route.set_weights(ROUTE, target, WeightPremise((START,)))
    assert not again.wrote and _stored(store)["metadata"]["resourceVersion"] == version


def test_it_leaves_a_route_someone_else_changed(http_route: HTTPRouteRouter, store: ObjectStore) -> None:
    with pytest.raises(RoutePremiseChanged, match="changed by someone else"):
        http_route.set_weights(ROUTE, {"chat-8b": 5, "chat-8b-warm": 95}, WeightPremise(({"chat-8b": 50, "chat-8b-warm": 50},)))
    assert http_route.read(ROUTE, {"chat-8b"}).weights["chat-8b"] == 100


def test_it_validates_before_writing(http_route: HTTPRouteRouter, store: ObjectStore) -> None:
    version = _stored(store)["metadata"]["resourceVersion"]
    with pytest.raises(DriverError, match="between 0 and 1000000") as refused:
        http_route.set_weights(ROUTE, {"chat-8b": 2_000_000, "chat-8b-warm": 0}, WeightPremise((START,)))
    assert refused.value.permanent
    with pytest.raises(DriverError, match="has no rule with chat-70b"):
        http_route.set_weights(ROUTE, {"chat-70b": 1}, WeightPremise((START,)))
    assert _stored(store)["metadata"]["resourceVersion"] == version


def test_a_409_rereads_and_writes_over_the_other_writers_change(http_route: HTTPRouteRouter, store: ObjectStore,
                                                                  api: KubeApiServer) -> None:
    """A concurrent writer changes another backend between our read and our write: 409, re-read, re-check,
    and the write keeps their change."""
    patch = http_route._custom.patch_namespaced_custom_object
    calls = []

    def concurrent_writer_first(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if not calls:
            def other_weight(route: dict) -> dict:
                route["spec"]["rules"][1]["backendRefs"][2]["weight"] = 9
                return route
            store.update(res.HTTPROUTES, NS, "chat", other_weight)
        calls.append(args)
        return patch(*args, **kwargs)

    http_route._custom.patch_namespaced_custom_object = concurrent_writer_first
    outcome = http_route.set_weights(ROUTE, {"chat-8b": 20, "chat-8b-warm": 80}, WeightPremise((START,)))
    assert outcome.conflicts == 1 and len(calls) == 2
    assert outcome.weights == {"chat-8b": 20, "chat-8b-warm": 80, "other": 9}


def test_a_409_after_someone_moved_our_backends_writes_nothing(http_route: HTTPRouteRouter, store: ObjectStore) -> None:
    patch = http_route._custom.patch_namespaced_custom_object

    def concurrent_shift(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        def move(route: dict) -> dict:
            route["spec"]["rules"][1]["backendRefs"][0]["weight"] = 50
            route["spec"]["rules"][1]["backendRefs"][1]["weight"] = 50
            return route
        store.update(res.HTTPROUTES, NS, "chat", move)
        return patch(*args, **kwargs)

    http_route._custom.patch_namespaced_custom_object = concurrent_shift
    with pytest.raises(RoutePremiseChanged):
        http_route.set_weights(ROUTE, {"chat-8b": 20, "chat-8b-warm": 80}, WeightPremise((START,)))
    assert http_route.read(ROUTE, {"chat-8b"}).weights["chat-8b"] == 50


def test_injected_conflicts_are_retried_a_bounded_number_of_times(http_route: HTTPRouteRouter,
                                                                   api: KubeApiServer) -> None:
    api.faults.conflict_storm = 2
    outcome = http_route.set_weights(ROUTE, {"chat-8b": 20, "chat-8b-warm": 80}, WeightPremise((START,)))
    assert outcome.wrote and outcome.conflicts == 2
    api.faults.conflict_storm = 100
    with pytest.raises(DriverError, match="HTTP 409") as gave_up:
        http_route.set_weights(ROUTE, {"chat-8b": 5, "chat-8b-warm": 95},
                               WeightPremise(({"chat-8b": 20, "chat-8b-warm": 80},)))
    assert not gave_up.value.permanent


def test_a_virtual_service_keeps_its_weights_at_100(virtual_service: VirtualServiceRouter, store: ObjectStore) -> None:
    assert virtual_service.read(ROUTE, {"chat-8b"}).weights == START  # hosts read by their short name
    outcome = virtual_service.set_weights(ROUTE, {"chat-8b": 5, "chat-8b-warm": 95}, WeightPremise((START,)))
    assert outcome.weights == {"chat-8b": 5, "chat-8b-warm": 95}
    stored = store.get(res.VIRTUALSERVICES, NS, "chat")["spec"]["http"][0]["route"]
    assert [(ref["destination"]["host"], ref["weight"]) for ref in stored] == [
        (f"chat-8b.{NS}.svc.cluster.local", 5), (f"chat-8b-warm.{NS}.svc.cluster.local", 95)]
    with pytest.raises(DriverError, match="add up to 100"):
        virtual_service.set_weights(ROUTE, {"chat-8b": 10}, WeightPremise(({"chat-8b": 5},)))


def test_the_emulator_refuses_a_virtual_service_that_does_not_add_up(virtual_service: VirtualServiceRouter) -> None:
    from kubernetes.client.exceptions import ApiException

    body = {"spec": {"http": [{"route": [{"destination": {"host": "chat-8b"}, "weight": 60},
                                         {"destination": {"host": "chat-8b-warm"}, "weight": 60}]}]}}
    with pytest.raises(ApiException) as refused:
        virtual_service._custom.patch_namespaced_custom_object(
            "networking.istio.io", "v1", NS, "virtualservices", "chat", body,
            _content_type="application/merge-patch+json")
    assert refused.value.status == 422 and "total destination weight 120 != 100" in refused.value.body
