"""Circuit breakers: open over the threshold, half-open probes, close; endpoint, pool and system scopes."""
from __future__ import annotations

import pytest

from scaling.engine import breakers as b
from scaling.engine.breakers import (CLOSED, HALF_OPEN, OPEN, BreakerState, BreakerThresholds, WindowCounts,
                                     decide_breaker, routable_endpoints, system_sends_to_fallback)

ENDPOINT = b.ENDPOINT_THRESHOLDS
SYSTEM = b.SYSTEM_THRESHOLDS
POOL = b.POOL_THRESHOLDS


@pytest.mark.parametrize("label, thresholds, state, now, counts, expected, transition", [
    ("closed, 1 % exactly stays closed", ENDPOINT, BreakerState(), 60, (1000, 10), CLOSED, None),
    ("closed, 1.1 % opens", ENDPOINT, BreakerState(), 60, (1000, 11), OPEN, (CLOSED, OPEN)),
    ("closed, too few requests: no verdict", ENDPOINT, BreakerState(), 60, (50, 10), CLOSED, None),
    ("system at 0.6 % opens (0.5 % threshold)", SYSTEM, BreakerState(), 60, (10_000, 60), OPEN, (CLOSED, OPEN)),
    ("system at 0.5 % stays closed", SYSTEM, BreakerState(), 60, (10_000, 50), CLOSED, None),
    ("endpoint threshold at 0.6 %: stays closed", ENDPOINT, BreakerState(), 60, (10_000, 60), CLOSED, None),
    ("open before the cool-down stays open", ENDPOINT, BreakerState(OPEN, 100.0), 120, (0, 0), OPEN, None),
    ("open after the cool-down goes half-open", ENDPOINT, BreakerState(OPEN, 100.0), 130, (0, 0), HALF_OPEN,
     (OPEN, HALF_OPEN)),
    ("half-open: a failed probe opens again", ENDPOINT, BreakerState(HALF_OPEN, 130.0), 145, (3, 1), OPEN,
     (HALF_OPEN, OPEN)),
    ("half-open: too few probes yet", ENDPOINT, BreakerState(HALF_OPEN, 130.0), 145, (3, 0), HALF_OPEN, None),
    ("half-open: enough probes close it", ENDPOINT, BreakerState(HALF_OPEN, 130.0, 3), 160, (2, 0), CLOSED,
     (HALF_OPEN, CLOSED)),
    ("custom threshold 5 %: 4 % stays closed", BreakerThresholds(failure_ratio=0.05), BreakerState(), 60, (1000, 40),
     CLOSED, None),
    # A pool is judged on all its pods' requests: its ordinary 0.1 % of errors is no failed probe (before,
    # any failure opened it again, so a pool breaker tripped by a short spike never closed).
    ("half-open pool: its baseline errors close it", POOL, BreakerState(HALF_OPEN, 130.0), 145, (900, 1), CLOSED,
     (HALF_OPEN, CLOSED)),
    ("half-open pool: still above the threshold opens again", POOL, BreakerState(HALF_OPEN, 130.0), 145, (900, 10),
     OPEN, (HALF_OPEN, OPEN)),
])
def test_breaker_transitions(label, thresholds, state, now, counts, expected, transition):
    decision = decide_breaker(now, WindowCounts(*counts), thresholds, state)
    assert decision.state.state == expected, label
    assert decision.transition == transition, label
    assert decision.reasons, label
    if transition:
        assert decision.state.since_s == now


def test_a_full_cycle_ejects_and_readmits_an_endpoint():
    state = BreakerState()
    timeline = []
    for now, counts in [(0, (500, 0)), (15, (500, 20)), (30, (0, 0)), (45, (0, 0)), (60, (2, 0)), (75, (3, 0)),
                        (90, (500, 0))]:
        decision = decide_breaker(now, WindowCounts(*counts), ENDPOINT, state)
        state = decision.state
        timeline.append((now, state.state, decision.routable))
    assert timeline == [(0, CLOSED, True), (15, OPEN, False), (30, OPEN, False), (45, HALF_OPEN, False),
                        (60, HALF_OPEN, False), (75, CLOSED, True), (90, CLOSED, True)]


def test_reasons_give_the_numbers():
    decision = decide_breaker(60, WindowCounts(1000, 20), ENDPOINT, BreakerState())
    assert decision.reasons == ("20 of 1000 requests failed (2.00%) over 60 s, above 1.00%",)


def test_routable_endpoints_drop_open_ones_but_never_all():
    states = {"a": BreakerState(), "b": BreakerState(OPEN, 1.0), "c": BreakerState(HALF_OPEN, 2.0)}
    assert routable_endpoints(states) == ["a"]
    everything_open = {"a": BreakerState(OPEN, 1.0), "b": BreakerState(OPEN, 1.0)}
    assert routable_endpoints(everything_open) == ["a", "b"]


@pytest.mark.parametrize("system, has_fallback, enabled, expected", [
    (BreakerState(OPEN, 0.0), True, True, True),
    (BreakerState(OPEN, 0.0), False, True, False),
    (BreakerState(OPEN, 0.0), True, False, False),
    (BreakerState(CLOSED, 0.0), True, True, False),
    (BreakerState(HALF_OPEN, 0.0), True, True, False),
])
def test_open_system_breaker_sends_a_pool_to_its_fallback(system, has_fallback, enabled, expected):
    assert system_sends_to_fallback(system, has_fallback, enabled) is expected


@pytest.mark.parametrize("kwargs, message", [
    (dict(failure_ratio=0.0), "failure_ratio"),
    (dict(failure_ratio=1.0), "failure_ratio"),
    (dict(window_s=0.0), "window_s"),
    (dict(min_requests=0), "min_requests"),
])
def test_bad_thresholds_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BreakerThresholds(**kwargs)


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="failures"):
        WindowCounts(10, 11)
