"""Traffic shifts as pure decisions: validate weights and steps, and decide one tick of a shift.

A shift moves traffic on a route from one backend (the giving pool) to another (the receiving pool)
in steps: each step gives the receiving backend a share of the two backends' combined weight
(default 80 %, 95 %, 100 %), which is then held for a while (default 5 minutes) under guards on the
receiving backend (p95 latency and error rate against thresholds). A check that fails counts; at
the threshold the shift rolls back to the last step that passed its hold (or the weights it started
from). A tick without data is inconclusive until a deadline, and then counts as failed. The next
step waits for the receiving pool's ready capacity, and for a person where a gate is set.

Nothing here talks to Django or a cluster: `scaling/traffic.py` persists the progress and writes
the weights through a router (`scaling/drivers/routing.py`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

DEFAULT_STEPS = (80, 95, 100)  # the receiving backend's share in percent: 80/20 → 95/5 → 100/0
DEFAULT_HOLD_S = 300.0
DEFAULT_FAILURE_THRESHOLD = 3
DEFAULT_NO_DATA_DEADLINE_S = 120.0

# What one tick decided (codes a person reads in the shift's events).
START_STEP = "start_step"  # write the next step's weights
WAIT_APPROVAL = "wait_approval"  # the next step has a gate: park until a person approves
WAIT_CAPACITY = "wait_capacity"  # the receiving pool's ready replicas are short of the next step's need
HOLD = "hold"  # keep the current weights: the hold is running, or the check was inconclusive
COMPLETE = "complete"  # the last step passed its hold
ROLL_BACK = "roll_back"  # too many failed checks


class WeightError(ValueError):
    """Weights or steps a router must not be sent. `field` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class WeightScheme:
    """How a router kind expresses weights: each between 0 and `max_weight`; with `total`, they must
    add up to it (Istio: 100), else they are proportional (Gateway API) and must not all be 0."""

    max_weight: int
    total: int | None = None


def validate_weights(weights: Mapping[str, int], scheme: WeightScheme, field: str = "weights") -> None:
    """Raise WeightError unless a router of this scheme may be sent these weights."""
    if not weights:
        raise WeightError(field, "no backends to weigh")
    for backend, weight in weights.items():
        if not isinstance(weight, int) or isinstance(weight, bool):
            raise WeightError(field, f"the weight of {backend} must be a whole number, got {weight!r}")
        if not 0 <= weight <= scheme.max_weight:
            raise WeightError(field, f"the weight of {backend} must be between 0 and {scheme.max_weight}, got {weight}")
    added = sum(weights.values())
    if scheme.total is not None and added != scheme.total:
        raise WeightError(field, f"the weights must add up to {scheme.total}, they add up to {added}")
    if added == 0:
        raise WeightError(field, "at least one backend needs a weight above 0, or the route drops all traffic")


def validate_steps(steps: Sequence[int], field: str = "steps") -> tuple[int, ...]:
    """The receiving shares in percent: whole numbers in 1..100, rising, at least one."""
    if not steps:
        raise WeightError(field, "a shift needs at least one step")
    for index, share in enumerate(steps):
        if not isinstance(share, int) or isinstance(share, bool) or not 1 <= share <= 100:
            raise WeightError(field, f"step {index + 1}: the receiving share must be a whole percent in 1..100, got {share!r}")
        if index and share <= steps[index - 1]:
            raise WeightError(field, f"step {index + 1}: each step must send more than the one before "
                                     f"({share} % after {steps[index - 1]} %)")
    return tuple(steps)


def pair_weights(pair_total: int, share_percent: int) -> tuple[int, int]:
    """(giving, receiving) weights for a share, keeping the two backends' combined weight."""
    receiving = round(pair_total * share_percent / 100)
    return pair_total - receiving, receiving


def plan_weights(current: Mapping[str, int], giving: str, receiving: str, steps: Sequence[int],
                 scheme: WeightScheme) -> list[dict[str, int]]:
    """The route's full weights at each step, validated; the other backends keep theirs.

    Refuses steps that the pair's combined weight cannot tell apart (a total of 1 cannot carry 95 %).
    """
    for name, backend in (("from_pool", giving), ("to_pool", receiving)):
        if backend not in current:
            raise WeightError(name, f"the route has no backend {backend!r}; it has {', '.join(sorted(current)) or 'none'}")
    pair_total = current[giving] + current[receiving]
    if pair_total == 0:
        raise WeightError("from_pool", f"{giving} and {receiving} carry no traffic on this route (both weigh 0)")
    planned: list[dict[str, int]] = []
    for index, share in enumerate(steps):
        giving_weight, receiving_weight = pair_weights(pair_total, share)
        weights = {**current, giving: giving_weight, receiving: receiving_weight}
        if planned and weights == planned[-1]:
            raise WeightError("steps", f"step {index + 1} ({share} %) gives the same weights as the step before: "
                                       f"the pair's combined weight of {pair_total} is too small to tell them apart")
        validate_weights(weights, scheme, field="steps")
        planned.append(weights)
    return planned


@dataclass(frozen=True)
class ShiftSpec:
    steps: tuple[int, ...] = DEFAULT_STEPS
    hold_s: float = DEFAULT_HOLD_S
    max_p95_s: float = 1.0
    max_error_rate: float = 0.01
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD
    no_data_deadline_s: float = DEFAULT_NO_DATA_DEADLINE_S
    gates: frozenset[int] = frozenset()  # step indexes (0-based) that wait for a person's approval

    @property
    def last_step(self) -> int:
        return len(self.steps) - 1


@dataclass(frozen=True)
class Progress:
    """What a shift remembers between ticks (persisted on the TrafficShift row)."""

    step: int = -1  # the step whose weights are on the route (-1: the weights it started from)
    good_step: int = -1  # the last step that passed its hold (-1: the start)
    step_since_s: float | None = None  # when the current step's weights were confirmed on the route
    failed_checks: int = 0
    no_data_since_s: float | None = None  # since when the guard has had no data (None: it has)
    approved_step: int = -1  # the highest gated step a person approved


@dataclass(frozen=True)
class GuardReading:
    """The receiving backend's signals at this tick; None where unknown (missing or stale)."""

    p95_s: float | None
    error_rate: float | None
    ready_replicas: int | None = None
    route_rps: float | None = None  # what both backends serve together
    replica_capacity_rps: float | None = None  # one receiving replica's capacity at the SLO
    max_replicas: int | None = None  # the receiving pool's ceiling


@dataclass(frozen=True)
class Check:
    outcome: str  # "pass", "fail", "no_data"
    detail: str


@dataclass(frozen=True)
class TickDecision:
    action: str
    progress: Progress
    check: Check
    detail: str
    next_step: int | None = None  # with START_STEP and WAIT_APPROVAL


def check_guard(spec: ShiftSpec, reading: GuardReading) -> Check:
    """One guard check on the receiving backend: breaches fail, missing values are no data."""
    if reading.p95_s is None or reading.error_rate is None:
        missing = [name for name, value in (("p95", reading.p95_s), ("error rate", reading.error_rate)) if value is None]
        return Check("no_data", f"no {' or '.join(missing)} for the receiving pool")
    breaches = []
    if reading.p95_s > spec.max_p95_s:
        breaches.append(f"p95 {reading.p95_s:.3g} s > {spec.max_p95_s:g} s")
    if reading.error_rate > spec.max_error_rate:
        breaches.append(f"error rate {reading.error_rate:.2%} > {spec.max_error_rate:.2%}")
    if breaches:
        return Check("fail", "; ".join(breaches))
    return Check("pass", f"p95 {reading.p95_s:.3g} s, error rate {reading.error_rate:.2%} within the guard")


def needed_replicas(spec: ShiftSpec, step: int, reading: GuardReading) -> int | None:
    """Ready receiving replicas the step's share of the route's traffic needs (None: not known)."""
    if reading.route_rps is None or not reading.replica_capacity_rps:
        return None
    return math.ceil(reading.route_rps * spec.steps[step] / 100 / reading.replica_capacity_rps - 1e-9)


def capacity_shortfall(spec: ShiftSpec, step: int, reading: GuardReading) -> str:
    """Why the receiving pool cannot take `step` yet ('' when it can)."""
    needed = needed_replicas(spec, step, reading)
    if needed is None or reading.ready_replicas is None:
        return "the route's request rate or the receiving pool's ready replicas are unknown"
    if reading.ready_replicas < needed:
        short = (f"step {step + 1} ({spec.steps[step]} %) needs {needed} ready replicas, "
                 f"the receiving pool has {reading.ready_replicas}")
        if reading.max_replicas is not None and needed > reading.max_replicas:
            # It would wait for ever, holding the route from fallbacks and the giving pool from scaling down.
            short += (f" and may run at most {reading.max_replicas}: at this traffic it never will; raise its "
                      "max_replicas, or roll the shift back")
        return short
    return ""


def rollback_target(progress: Progress) -> int:
    """The step a failing shift returns to: the last that passed its hold before the one now on the route
    (-1: the start). A step that passed and then fails while the next one waits is not good any more."""
    return min(progress.good_step, progress.step - 1)


def _unblinded(progress: Progress, now_s: float) -> Progress:
    """Data is back after a gap: the part of the current step's hold the guard could not see does not count
    towards the hold (a step unseen for its whole hold is not passed by the first reading after it)."""
    if progress.no_data_since_s is None or progress.step_since_s is None:
        return progress
    blind_s = now_s - max(progress.no_data_since_s, progress.step_since_s)
    return replace(progress, step_since_s=progress.step_since_s + blind_s) if blind_s > 0 else progress


def _count(spec: ShiftSpec, progress: Progress, check: Check, now_s: float) -> tuple[Progress, Check]:
    """Fold one check into the counters: a failure counts; no data counts once past its deadline."""
    if check.outcome != "no_data":
        progress = _unblinded(progress, now_s)
    if check.outcome == "pass":
        return replace(progress, no_data_since_s=None), check
    if check.outcome == "fail":
        return replace(progress, failed_checks=progress.failed_checks + 1, no_data_since_s=None), check
    since = progress.no_data_since_s if progress.no_data_since_s is not None else now_s
    progress = replace(progress, no_data_since_s=since)
    if now_s - since >= spec.no_data_deadline_s:
        failed = Check("fail", f"{check.detail} for {now_s - since:.0f} s (deadline {spec.no_data_deadline_s:g} s)")
        return replace(progress, failed_checks=progress.failed_checks + 1), failed
    return progress, check


def next_move(spec: ShiftSpec, progress: Progress, step: int, reading: GuardReading) -> tuple[str, str]:
    """Whether the shift may start `step` now: the gate, then the receiving pool's ready capacity."""
    if step in spec.gates and progress.approved_step < step:
        return WAIT_APPROVAL, f"step {step + 1} ({spec.steps[step]} %) waits for a person's approval"
    shortfall = capacity_shortfall(spec, step, reading)
    if shortfall:
        return WAIT_CAPACITY, shortfall
    return START_STEP, f"step {step + 1}: {spec.steps[step]} % to the receiving pool"


def decide_while_writing(spec: ShiftSpec, progress: Progress, reading: GuardReading, now_s: float) -> TickDecision:
    """A tick while the next step's write waits to be retried (the router failing): `progress.step` is the step
    whose weights are on the route. Its traffic is still guarded, and a failing guard rolls back (to the last good
    step before it) rather than have the retried write put more traffic on a failing pool; nothing else moves."""
    if progress.step < 0:  # nothing moved yet: nothing to guard
        return TickDecision(HOLD, progress, Check("pass", "no traffic moved yet"), "the step's write is retried")
    progress, check = _count(spec, progress, check_guard(spec, reading), now_s)
    if progress.failed_checks >= spec.failure_threshold:
        return TickDecision(ROLL_BACK, progress, check,
                            f"{progress.failed_checks} failed checks (threshold {spec.failure_threshold}) while step "
                            f"{progress.step + 2}'s write was retried: {check.detail}")
    return TickDecision(HOLD, progress, check, f"step {progress.step + 2}'s write is retried; the guard watches step "
                                               f"{progress.step + 1}")


def decide_tick(spec: ShiftSpec, progress: Progress, reading: GuardReading, now_s: float) -> TickDecision:
    """One tick of a shift whose weights are on the route (not stepping or rolling back).

    The guard is checked on every tick, also while the shift waits for capacity or for a person:
    the traffic already moved is watched until the shift ends.
    """
    if progress.step < 0:  # nothing moved yet: nothing to guard
        check = Check("pass", "no traffic moved yet")
    else:
        progress, check = _count(spec, progress, check_guard(spec, reading), now_s)
    if progress.failed_checks >= spec.failure_threshold:
        return TickDecision(ROLL_BACK, progress, check,
                            f"{progress.failed_checks} failed checks (threshold {spec.failure_threshold}): {check.detail}")
    if progress.step >= 0:
        held_s = now_s - (progress.step_since_s if progress.step_since_s is not None else now_s)
        if held_s < spec.hold_s:
            return TickDecision(HOLD, progress, check, f"holding step {progress.step + 1}: {held_s:.0f} of {spec.hold_s:g} s")
        if check.outcome != "pass":
            return TickDecision(HOLD, progress, check, f"hold over, but this check did not pass: {check.detail}")
        progress = replace(progress, good_step=progress.step)
        if progress.step == spec.last_step:
            return TickDecision(COMPLETE, progress, check, f"step {progress.step + 1} held {held_s:.0f} s: completed")
    step = progress.step + 1
    action, detail = next_move(spec, progress, step, reading)
    return TickDecision(action, progress, check, detail, next_step=step)
