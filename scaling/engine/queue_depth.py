"""Headroom's reactive signal: the HPA core on vLLM queue depth per *ready* replica."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from scaling.engine.hpa_spec import (
    DEFAULT_SCALE_UP_RULES,
    DEFAULT_TOLERANCE,
    PENDING,
    Behavior,
    ControllerOptions,
    HpaSpec,
    HpaState,
    MetricSpec,
    MetricTarget,
    Pod,
    ScalingPolicy,
    ScalingRules,
)
from scaling.engine.replicas import HpaError, MetricObservation, decide, metrics_recommendation

QUEUE_DEPTH_METRIC = "vllm:num_requests_waiting"

# Scale-up as fast as the HPA default allows (a queue is a user waiting); scale-down slowly
# (a GPU replica costs 45-90 s or more of cold start to get back): 5-minute window, then at most
# one replica or 10 % per minute, whichever removes more.
HEADROOM_QUEUE_BEHAVIOR = Behavior(
    scale_up=DEFAULT_SCALE_UP_RULES,
    scale_down=ScalingRules(
        stabilization_window_s=300,
        select_policy="Max",
        policies=(ScalingPolicy("Pods", 1, 60), ScalingPolicy("Percent", 10, 60)),
    ),
)


@dataclass(frozen=True)
class QueueDepthPolicy:
    target_waiting_per_replica: float = 5.0
    min_replicas: int = 1
    max_replicas: int = 64
    tolerance: float = DEFAULT_TOLERANCE
    behavior: Behavior = field(default=HEADROOM_QUEUE_BEHAVIOR)


@dataclass(frozen=True)
class QueueDepthDecision:
    desired_replicas: int | None  # None: the signal is unknown, hold (never scale down on it)
    metric_recommendation: int | None
    reason: str
    state: HpaState


@lru_cache(maxsize=256)
def _pods(ready: int, arriving: int) -> tuple[Pod, ...]:
    """The HPA's pods for a pool of `ready` ready and `arriving` loading replicas (built once: every tick
    of a replay asks for the same few)."""
    return (tuple(Pod(name=f"ready-{i}") for i in range(ready))
            + tuple(Pod(name=f"arriving-{i}", phase=PENDING, ready=False) for i in range(arriving)))


# Built once per policy: hashing a frozen policy (its behaviour's rules) every tick costs more than the spec.
_HPA_SPECS: dict[tuple[int, int, float, float], tuple[Behavior, HpaSpec, ControllerOptions]] = {}


def _hpa_spec(policy: QueueDepthPolicy) -> tuple[HpaSpec, ControllerOptions]:
    """The HPA's spec and options for a queue-depth policy (the same policy every tick of a pool)."""
    key = (policy.min_replicas, policy.max_replicas, policy.target_waiting_per_replica, policy.tolerance)
    cached = _HPA_SPECS.get(key)
    if cached is None or (cached[0] is not policy.behavior and cached[0] != policy.behavior):
        spec = HpaSpec(
            max_replicas=policy.max_replicas,
            min_replicas=policy.min_replicas,
            metrics=(
                MetricSpec(
                    "Pods", MetricTarget("AverageValue", average_value_milli=round(policy.target_waiting_per_replica * 1000))
                ),
            ),
            behavior=policy.behavior,
        )
        if len(_HPA_SPECS) >= 256:
            _HPA_SPECS.clear()
        cached = _HPA_SPECS[key] = (policy.behavior, spec, ControllerOptions(tolerance=policy.tolerance))
    return cached[1], cached[2]


def decide_on_queue_depth(
    waiting_per_ready_replica: Sequence[float | None],
    arriving_replicas: int,
    current_replicas: int,
    state: HpaState,
    now_s: float,
    policy: QueueDepthPolicy = QueueDepthPolicy(),
) -> QueueDepthDecision:
    """The HPA core on `vllm:num_requests_waiting` per *ready* replica.

    Ready replicas carry their queue (None when unknown for that replica: a missing pod in HPA
    terms). Arriving replicas are pods still loading (Pending in HPA terms): they count as empty
    on a scale-up, so capacity already on its way is credited, and are ignored on a scale-down.
    """
    if not any(value is not None and math.isfinite(value) for value in waiting_per_ready_replica):
        return QueueDepthDecision(None, None, "QueueDepthUnknown", state)
    pods = _pods(len(waiting_per_ready_replica), arriving_replicas)
    values: list[int | None] = [
        None if value is None or not math.isfinite(value) else round(max(value, 0.0) * 1000)
        for value in waiting_per_ready_replica
    ]
    spec, options = _hpa_spec(policy)
    observations = [MetricObservation(pod_values=tuple(values))]
    outcome = decide(spec, current_replicas, state, now_s, pods=pods, observations=observations, options=options)
    recommendation = outcome.metric_recommendation
    if recommendation is None:
        # Outside min/max (or at 0 with min > 0) the HPA moves to the bound without reading the
        # metric; the queue still says how many replicas it needs, and a pool below its minimum
        # with a deep queue needs more than the minimum.
        try:
            recommendation = metrics_recommendation(spec, current_replicas, pods, observations, options)
        except HpaError:
            recommendation = None
    return QueueDepthDecision(outcome.desired_replicas, recommendation, outcome.reason, outcome.state)
