"""`hpa-util`: the Kubernetes HPA on GPU utilisation (busy share or batch fill), target 80 %.

It runs the conformant HPA core (`scaling/engine/replicas.py`, the one that passes Kubernetes' own
test cases) with the utilisation as a per-pod metric (`AverageValue` 0.8) and the documented
default behaviour (scale-up at most max(+4 pods, +100 %) per 15 s, scale-down to the highest
recommendation of the last 300 s, at most -100 % per 15 s). Ready replicas report the pool's mean
utilisation; replicas still starting are Pending pods: set aside, counted at 0 on a scale-up.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from scaling.engine.hpa_spec import PENDING, Behavior, HpaError, HpaSpec, HpaState, MetricSpec, MetricTarget, Pod
from scaling.engine.replicas import MetricObservation, decide
from scaling.sim.policies.base import Observation


@dataclass
class HpaUtilState:
    hpa: HpaState = field(default_factory=HpaState)


@dataclass(frozen=True)
class HpaUtilPolicy:
    min_replicas: int
    max_replicas: int
    target_utilisation: float = 0.8
    behavior: Behavior = field(default_factory=Behavior)
    name: str = "hpa-util"
    tick_s: float = 15.0  # the HPA controller's sync period

    def new_state(self) -> HpaUtilState:
        return HpaUtilState()

    def decide(self, now: float, observation: Observation, state: HpaUtilState) -> int:
        current = observation.desired_replicas
        spec = HpaSpec(
            max_replicas=self.max_replicas, min_replicas=self.min_replicas, behavior=self.behavior,
            metrics=(MetricSpec("Pods", MetricTarget("AverageValue",
                                                     average_value_milli=round(self.target_utilisation * 1000))),),
        )
        pods = [Pod(f"ready-{i}") for i in range(observation.ready_replicas)]
        pods += [Pod(f"starting-{i}", phase=PENDING, ready=False) for i in range(observation.starting_replicas)]
        value = round(observation.utilisation * 1000)
        metric = MetricObservation(pod_values=(value,) * observation.ready_replicas)
        try:
            outcome = decide(spec, current, state.hpa, now, pods=pods, observations=[metric])
        except HpaError:
            return current  # no pod reports a metric: the HPA keeps the scale
        state.hpa = outcome.state
        return outcome.desired_replicas
