"""The shift's pure rules: weights, steps, and one tick's decision, table by table."""
from __future__ import annotations

from dataclasses import replace

import pytest

from scaling.engine import shifting
from scaling.engine.shifting import GuardReading, Progress, ShiftSpec, WeightError, WeightScheme

GATEWAY = WeightScheme(max_weight=1_000_000)
ISTIO = WeightScheme(max_weight=100, total=100)


@pytest.mark.parametrize(("weights", "scheme", "problem"), [
    ({"a": 80, "b": 20}, GATEWAY, None),
    ({"a": 1_000_000, "b": 0}, GATEWAY, None),
    ({"a": 1_000_001, "b": 0}, GATEWAY, "between 0 and 1000000"),
    ({"a": -1, "b": 5}, GATEWAY, "between 0 and 1000000"),
    ({"a": 0, "b": 0}, GATEWAY, "drops all traffic"),
    ({"a": 1.5, "b": 1}, GATEWAY, "whole number"),
    ({"a": True, "b": 1}, GATEWAY, "whole number"),
    ({}, GATEWAY, "no backends"),
    ({"a": 80, "b": 20}, ISTIO, None),
    ({"a": 80, "b": 30}, ISTIO, "add up to 100, they add up to 110"),
    ({"a": 101, "b": 0}, ISTIO, "between 0 and 100"),
])
def test_it_validates_weights_per_scheme(weights, scheme, problem) -> None:  # noqa: ANN001
    if problem is None:
        shifting.validate_weights(weights, scheme)
        return
    with pytest.raises(WeightError, match=problem) as raised:
        shifting.validate_weights(weights, scheme)
    assert raised.value.field == "weights"


@pytest.mark.parametrize(("steps", "problem"), [
    ([80, 95, 100], None),
    ([100], None),
    ([], "at least one step"),
    ([0, 50], "step 1: .* 1..100"),
    ([50, 101], "step 2: .* 1..100"),
    ([80, 80], "step 2: each step must send more"),
    ([95, 80], "step 2: each step must send more"),
    ([50.5], "step 1"),
])
def test_it_validates_steps(steps, problem) -> None:  # noqa: ANN001
    if problem is None:
        assert shifting.validate_steps(steps) == tuple(steps)
        return
    with pytest.raises(WeightError, match=problem):
        shifting.validate_steps(steps)


@pytest.mark.parametrize(("current", "scheme", "expected"), [
    # Gateway API, the pair alone on the route: its combined weight is kept.
    ({"old": 100, "new": 0}, GATEWAY, [{"old": 20, "new": 80}, {"old": 5, "new": 95}, {"old": 0, "new": 100}]),
    # A third backend keeps its weight.
    ({"old": 50, "new": 50, "other": 7}, GATEWAY,
     [{"old": 20, "new": 80, "other": 7}, {"old": 5, "new": 95, "other": 7}, {"old": 0, "new": 100, "other": 7}]),
    # Istio: the pair holds 90 of the 100; the total stays 100.
    ({"old": 90, "new": 0, "other": 10}, ISTIO,
     [{"old": 18, "new": 72, "other": 10}, {"old": 4, "new": 86, "other": 10}, {"old": 0, "new": 90, "other": 10}]),
])
def test_it_plans_every_steps_weights(current, scheme, expected) -> None:  # noqa: ANN001
    assert shifting.plan_weights(current, "old", "new", (80, 95, 100), scheme) == expected


@pytest.mark.parametrize(("current", "field", "problem"), [
    ({"old": 1, "other": 1}, "to_pool", "no backend 'new'"),
    ({"new": 1}, "from_pool", "no backend 'old'"),
    ({"old": 0, "new": 0, "other": 5}, "from_pool", "carry no traffic"),
    ({"old": 1, "new": 0}, "steps", "too small to tell them apart"),
])
def test_it_refuses_a_plan_it_cannot_carry_out(current, field, problem) -> None:  # noqa: ANN001
    with pytest.raises(WeightError, match=problem) as raised:
        shifting.plan_weights(current, "old", "new", (80, 95, 100), GATEWAY)
    assert raised.value.field == field


SPEC = ShiftSpec(hold_s=60, max_p95_s=1.0, max_error_rate=0.01, failure_threshold=3, no_data_deadline_s=45)
GOOD = GuardReading(p95_s=0.4, error_rate=0.001, ready_replicas=4, route_rps=10.0, replica_capacity_rps=5.0)
SLOW = replace(GOOD, p95_s=2.5)
FAILING = replace(GOOD, error_rate=0.05)
NO_DATA = replace(GOOD, p95_s=None)
HOLDING_1 = Progress(step=0, step_since_s=1000.0)


@pytest.mark.parametrize(("name", "progress", "reading", "now", "action", "next_step", "failed"), [
    ("starts with the first step", Progress(), GOOD, 0, shifting.START_STEP, 0, 0),
    ("a short receiving pool waits", Progress(), replace(GOOD, ready_replicas=1), 0, shifting.WAIT_CAPACITY, 0, 0),
    ("unknown route rate waits", Progress(), replace(GOOD, route_rps=None), 0, shifting.WAIT_CAPACITY, 0, 0),
    ("holds while the hold runs", HOLDING_1, GOOD, 1030, shifting.HOLD, None, 0),
    ("steps on when the hold is over", HOLDING_1, GOOD, 1060, shifting.START_STEP, 1, 0),
    # 95 % of 10 req/s at 5 req/s per replica needs 2 ready replicas.
    ("the next step waits for its capacity", HOLDING_1, replace(GOOD, ready_replicas=1), 1060,
     shifting.WAIT_CAPACITY, 1, 0),
    ("a slow backend fails a check", HOLDING_1, SLOW, 1030, shifting.HOLD, None, 1),
    ("errors fail a check", HOLDING_1, FAILING, 1030, shifting.HOLD, None, 1),
    ("a failed check at the hold's end does not step", HOLDING_1, SLOW, 1060, shifting.HOLD, None, 1),
    ("the threshold rolls back", replace(HOLDING_1, failed_checks=2), SLOW, 1030, shifting.ROLL_BACK, None, 3),
    ("no data is inconclusive", HOLDING_1, NO_DATA, 1030, shifting.HOLD, None, 0),
    ("no data at the hold's end waits", HOLDING_1, NO_DATA, 1060, shifting.HOLD, None, 0),
    ("no data past its deadline fails", replace(HOLDING_1, no_data_since_s=1000.0), NO_DATA, 1050,
     shifting.HOLD, None, 1),
    ("the last step completes", Progress(step=2, step_since_s=1000.0), GOOD, 1060, shifting.COMPLETE, None, 0),
    ("the gate waits for a person", HOLDING_1, GOOD, 1060, shifting.WAIT_APPROVAL, 1, 0),
    ("an approved gate steps", replace(HOLDING_1, approved_step=1), GOOD, 1060, shifting.START_STEP, 1, 0),
])
def test_one_tick(name, progress, reading, now, action, next_step, failed) -> None:  # noqa: ANN001
    spec = replace(SPEC, gates=frozenset({1})) if "gate" in name else SPEC
    decision = shifting.decide_tick(spec, progress, reading, float(now))
    assert (decision.action, decision.next_step, decision.progress.failed_checks) == (action, next_step, failed), name


def test_a_step_beyond_the_receiving_pools_ceiling_says_it_never_comes() -> None:
    """95 % of 10 req/s at 5 req/s per replica needs 2: under a ceiling of 1 the wait would last for ever."""
    decision = shifting.decide_tick(SPEC, HOLDING_1, replace(GOOD, ready_replicas=1, max_replicas=1), 1060.0)
    assert decision.action == shifting.WAIT_CAPACITY
    assert decision.detail.endswith("and may run at most 1: at this traffic it never will; raise its max_replicas, "
                                    "or roll the shift back")
    reachable = shifting.decide_tick(SPEC, HOLDING_1, replace(GOOD, ready_replicas=1, max_replicas=4), 1060.0)
    assert "never" not in reachable.detail


def test_it_counts_no_data_from_when_it_started() -> None:
    first = shifting.decide_tick(SPEC, HOLDING_1, NO_DATA, 1010.0)
    assert first.progress.no_data_since_s == 1010.0 and first.check.outcome == "no_data"
    later = shifting.decide_tick(SPEC, first.progress, NO_DATA, 1054.0)
    assert later.progress.failed_checks == 0
    past = shifting.decide_tick(SPEC, later.progress, NO_DATA, 1055.0)
    assert past.progress.failed_checks == 1 and "deadline 45 s" in past.check.detail
    recovered = shifting.decide_tick(SPEC, past.progress, GOOD, 1070.0)
    assert recovered.progress.no_data_since_s is None and recovered.progress.failed_checks == 1


def test_a_step_that_passed_its_hold_becomes_the_last_good_one() -> None:
    decision = shifting.decide_tick(SPEC, replace(HOLDING_1, step=1), GOOD, 1060.0)
    assert decision.progress.good_step == 1 and decision.next_step == 2
    held = shifting.decide_tick(SPEC, replace(HOLDING_1, step=1), GOOD, 1030.0)
    assert held.progress.good_step == -1


def test_needed_replicas_for_a_step() -> None:
    assert shifting.needed_replicas(SPEC, 0, GOOD) == 2  # 80 % of 10 req/s = 8 req/s at 5 each
    assert shifting.needed_replicas(SPEC, 2, GOOD) == 2  # 10 req/s exactly fits 2
    assert shifting.needed_replicas(SPEC, 2, replace(GOOD, route_rps=10.5)) == 3
    assert shifting.needed_replicas(SPEC, 0, replace(GOOD, route_rps=0.0)) == 0


@pytest.mark.parametrize(("progress", "target"), [
    (Progress(step=0, good_step=-1), -1),  # the first step fails: back to the start
    (Progress(step=2, good_step=1), 1),  # failing during step 3's hold: back to step 2
    (Progress(step=1, good_step=1), 0),  # step 2 passed, then failed while step 3 waited: back to step 1
])
def test_a_rollback_returns_to_the_last_good_step_before_the_current_one(progress, target) -> None:  # noqa: ANN001
    assert shifting.rollback_target(progress) == target
