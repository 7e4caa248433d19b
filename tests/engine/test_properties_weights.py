"""Property tests of weight validation (`scaling/engine/shifting.py`) and of the routers' write path.

Any weights: valid ones (whole numbers in 0..max, adding up to the total where the router has one, not
all 0) are accepted; every other set raises `WeightError` naming the field. A router never writes weights
that fail the check: it refuses with a permanent `DriverError` before any patch reaches the API.
"""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaling.drivers.cluster import DriverError
from scaling.drivers.routers import HTTPRouteRouter, VirtualServiceRouter
from scaling.drivers.routing import RouteRef, WeightPremise
from scaling.engine.shifting import WeightError, WeightScheme, pair_weights, plan_weights, validate_steps, validate_weights

FAST = settings(max_examples=150, derandomize=True, database=None, deadline=None)
ISTIO, GATEWAY = WeightScheme(max_weight=100, total=100), WeightScheme(max_weight=1_000_000)
SCHEMES = st.sampled_from([ISTIO, GATEWAY])
backends = st.sampled_from(["chat-8b", "chat-8b-warm", "chat-70b", "other", "reviews/v2"])
any_weight = st.one_of(st.integers(-5, 1_000_005), st.sampled_from([0, 100, 1_000_000, 1_000_001, -1]),
                       st.booleans(), st.floats(allow_nan=True), st.text(max_size=3), st.none())


def is_valid(weights: dict, scheme: WeightScheme) -> bool:
    """The rule, stated independently of the code under test."""
    if not weights:
        return False
    for weight in weights.values():
        if type(weight) is not int or not 0 <= weight <= scheme.max_weight:
            return False
    total = sum(weights.values())
    return total > 0 and (scheme.total is None or total == scheme.total)


@st.composite
def summing_to(draw, total: int, names=backends):
    """Valid Istio weights: a random split of 100."""
    keys = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    cuts = sorted(draw(st.lists(st.integers(0, total), min_size=len(keys) - 1, max_size=len(keys) - 1)))
    edges = [0, *cuts, total]
    return {key: edges[i + 1] - edges[i] for i, key in enumerate(keys)}


@FAST
@given(scheme=SCHEMES, weights=st.dictionaries(backends, any_weight, max_size=4))
def test_any_weights_are_accepted_exactly_when_valid(scheme, weights):
    if is_valid(weights, scheme):
        validate_weights(weights, scheme)
    else:
        with pytest.raises(WeightError) as error:
            validate_weights(weights, scheme, field="target")
        assert error.value.field == "target" and str(error.value)


@FAST
@given(weights=summing_to(100))
def test_weights_adding_up_to_100_are_valid_for_istio_and_the_gateway(weights):
    validate_weights(weights, ISTIO)
    validate_weights(weights, GATEWAY)


steps_any = st.lists(st.one_of(st.integers(-5, 105), st.floats(0, 100), st.booleans()), max_size=5)


@FAST
@given(steps=steps_any)
def test_steps_are_accepted_exactly_when_whole_rising_percents(steps):
    valid = bool(steps) and all(type(s) is int and 1 <= s <= 100 for s in steps) and all(
        b > a for a, b in zip(steps, steps[1:]))
    if valid:
        assert validate_steps(steps) == tuple(steps)
    else:
        with pytest.raises(WeightError) as error:
            validate_steps(steps)
        assert error.value.field == "steps"


rising_steps = st.lists(st.integers(1, 100), min_size=1, max_size=5, unique=True).map(sorted)


@FAST
@given(scheme=SCHEMES, data=st.data(), steps=rising_steps)
def test_a_planned_shift_keeps_the_pair_total_and_every_step_is_valid(scheme, data, steps):
    total = scheme.total or data.draw(st.integers(1, 1000))
    current = data.draw(summing_to(total, st.sampled_from(["a", "b", "c"])).filter(lambda w: len(w) >= 2))
    giving, receiving = sorted(current)[:2]
    try:
        planned = plan_weights(current, giving, receiving, steps, scheme)
    except WeightError as error:
        assert error.field in ("from_pool", "steps")  # a pair weighing 0, or steps it cannot tell apart
        return
    pair = current[giving] + current[receiving]
    for share, weights in zip(steps, planned):
        validate_weights(weights, scheme)
        assert weights[giving] + weights[receiving] == pair
        assert (weights[giving], weights[receiving]) == pair_weights(pair, share)
        assert {k: v for k, v in weights.items() if k not in (giving, receiving)} == {
            k: v for k, v in current.items() if k not in (giving, receiving)}
    received = [w[receiving] for w in planned]
    assert received == sorted(received)  # each step sends at least as much as the one before


class _FakeCustomObjects:
    """The two calls a router makes, on one stored route; counts the patches that reached the API."""

    def __init__(self, obj: dict) -> None:
        self.obj, self.patches = obj, 0

    def get_namespaced_custom_object(self, *args, **kwargs) -> dict:
        return copy.deepcopy(self.obj)

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body, **kwargs) -> dict:
        self.patches += 1
        self.obj["spec"].update(copy.deepcopy(body["spec"]))
        self.obj["metadata"]["resourceVersion"] = str(int(self.obj["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(self.obj)


def _route(kind: type, weights: dict[str, int]) -> dict:
    if kind is VirtualServiceRouter:
        refs = [{"destination": {"host": f"{name}.inference.svc.cluster.local"}, "weight": w} for name, w in weights.items()]
        return {"metadata": {"name": "chat", "namespace": "inference", "resourceVersion": "1"},
                "spec": {"hosts": ["chat"], "http": [{"route": refs}]}}
    refs = [{"name": name, "port": 8000, "weight": w} for name, w in weights.items()]
    return {"metadata": {"name": "chat", "namespace": "inference", "resourceVersion": "1"},
            "spec": {"rules": [{"backendRefs": refs}]}}


target_weight = st.one_of(st.integers(-3, 110), st.sampled_from([1_000_000, 1_000_001]))


@FAST
@given(kind=st.sampled_from([VirtualServiceRouter, HTTPRouteRouter]), live=summing_to(100, st.sampled_from(["a", "b", "c"])),
       data=st.data())
def test_a_router_writes_only_valid_weights(kind, live, data):
    target = data.draw(st.dictionaries(st.sampled_from(sorted(live)), target_weight, min_size=1))
    router = kind("http://127.0.0.1:9")  # never dialled: the API is the fake below
    api = router._custom = _FakeCustomObjects(_route(kind, live))
    stored = copy.deepcopy(api.obj)
    wanted = {**live, **target}
    try:
        outcome = router.set_weights(RouteRef("inference", "chat"), target, WeightPremise((live,)))
    except DriverError as error:
        assert not is_valid(wanted, router.scheme)
        assert error.permanent and "refusing to write" in str(error)
        assert api.patches == 0 and api.obj == stored  # nothing written
        return
    finally:
        router.close()
    assert is_valid(wanted, router.scheme) or wanted == live  # an unchanged route is not written
    assert outcome.weights == wanted
    assert api.patches == (1 if outcome.wrote else 0)
