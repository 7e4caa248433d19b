"""The HPA's inputs and memory as plain values: spec (autoscaling/v2 subset), pods, controller
options, and `HpaState`, the history the real HPA keeps in memory and loses on restart.
Values are milli-units (int), as Kubernetes quantities are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_TOLERANCE = 0.1
# kube-controller-manager flag defaults (--horizontal-pod-autoscaler-*).
DEFAULT_CPU_INITIALIZATION_PERIOD_S = 300.0
DEFAULT_INITIAL_READINESS_DELAY_S = 30.0
DEFAULT_DOWNSCALE_STABILIZATION_S = 300
SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0
# A pod whose start time is unknown is treated as started long before any initialization period.
_LONG_AGO_S = 1e12

RUNNING, PENDING, FAILED, SUCCEEDED = "Running", "Pending", "Failed", "Succeeded"


class HpaError(Exception):
    """What Kubernetes reports as an error instead of a replica count."""


# ---------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class MetricTarget:
    type: str  # "Utilization" | "Value" | "AverageValue"
    average_utilization: int | None = None  # percent of request
    value_milli: int | None = None
    average_value_milli: int | None = None


@dataclass(frozen=True)
class MetricSpec:
    type: str  # "Resource" | "Pods" | "Object" | "External"
    target: MetricTarget
    resource_name: str = ""  # Resource metrics only: "cpu", "memory"


@dataclass(frozen=True)
class ScalingPolicy:
    type: str  # "Pods" | "Percent"
    value: int
    period_s: int


@dataclass(frozen=True)
class ScalingRules:
    stabilization_window_s: int | None = None  # None: the controller default (scale-down only)
    select_policy: str = "Max"  # "Max" | "Min" | "Disabled"
    policies: tuple[ScalingPolicy, ...] = ()
    tolerance: float | None = None  # per-direction tolerance (HPAConfigurableTolerance)


DEFAULT_SCALE_UP_RULES = ScalingRules(
    stabilization_window_s=0,
    select_policy="Max",
    policies=(ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)),
)
DEFAULT_SCALE_DOWN_RULES = ScalingRules(
    stabilization_window_s=None, select_policy="Max", policies=(ScalingPolicy("Percent", 100, 15),)
)


@dataclass(frozen=True)
class Behavior:
    scale_up: ScalingRules = DEFAULT_SCALE_UP_RULES
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN_RULES


@dataclass(frozen=True)
class HpaSpec:
    max_replicas: int
    min_replicas: int = 1
    metrics: tuple[MetricSpec, ...] = ()
    behavior: Behavior | None = None  # None: no behavior set (the legacy normalization)


@dataclass(frozen=True)
class ControllerOptions:
    """kube-controller-manager settings that change answers."""

    tolerance: float = DEFAULT_TOLERANCE
    cpu_initialization_period_s: float = DEFAULT_CPU_INITIALIZATION_PERIOD_S
    initial_readiness_delay_s: float = DEFAULT_INITIAL_READINESS_DELAY_S
    downscale_stabilization_s: int = DEFAULT_DOWNSCALE_STABILIZATION_S


@dataclass(frozen=True)
class Pod:
    """A pod as the HPA sees it. Times are seconds before now."""

    name: str
    phase: str = RUNNING
    ready: bool | None = True  # None: no Ready condition at all
    deleting: bool = False
    cpu_request_milli: int | None = None
    started_s_ago: float | None = None  # None: long before any initialization period
    ready_transition_s_ago: float | None = None  # None: at start
    metric_sample_s_ago: float = 0.0
    metric_window_s: float = 60.0


# ---------------------------------------------------------------------------- state


@dataclass(frozen=True)
class TimedRecommendation:
    at_s: float
    replicas: int


@dataclass(frozen=True)
class ScaleEvent:
    at_s: float
    replica_change: int  # magnitude; the list it sits in says the direction


@dataclass(frozen=True)
class HpaState:
    """What the HPA remembers between ticks; persist it to survive restarts."""

    recommendations: tuple[TimedRecommendation, ...] = ()
    scale_up_events: tuple[ScaleEvent, ...] = ()
    scale_down_events: tuple[ScaleEvent, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommendations": [[r.at_s, r.replicas] for r in self.recommendations],
            "scale_up_events": [[e.at_s, e.replica_change] for e in self.scale_up_events],
            "scale_down_events": [[e.at_s, e.replica_change] for e in self.scale_down_events],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HpaState:
        return cls(
            recommendations=tuple(TimedRecommendation(float(t), int(r)) for t, r in data.get("recommendations", [])),
            scale_up_events=tuple(ScaleEvent(float(t), int(c)) for t, c in data.get("scale_up_events", [])),
            scale_down_events=tuple(ScaleEvent(float(t), int(c)) for t, c in data.get("scale_down_events", [])),
        )


@dataclass(frozen=True)
class Outcome:
    desired_replicas: int
    state: HpaState
    reason: str
    metric_recommendation: int | None = None
