"""`hpa-util`: the Kubernetes HPA on GPU utilisation (busy share or batch fill), target 80 %."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from scaling.sim.policies.base import Observation
from scaling.sim.policies.hpa import TOLERANCE, HpaBehavior, HpaState, proposal, stabilise


@dataclass(frozen=True)
class HpaUtilPolicy:
    min_replicas: int
    max_replicas: int
    target_utilisation: float = 0.8
    behavior: HpaBehavior = field(default_factory=HpaBehavior)
    name: str = "hpa-util"
    tick_s: float = 15.0  # the HPA controller's sync period

    def new_state(self) -> HpaState:
        return HpaState()

    def decide(self, now: float, observation: Observation, state: HpaState) -> int:
        current = observation.desired_replicas
        if observation.ready_replicas == 0:
            return current  # no pod reports a metric: the HPA holds
        ratio = observation.utilisation / self.target_utilisation
        recommended = proposal(observation.ready_replicas, ratio)
        if ratio > 1.0 and observation.starting_replicas:
            # Pods still starting have no metric; when scaling up the HPA counts them at 0 % and
            # holds if that recount lands within tolerance or changes direction.
            counted = observation.ready_replicas + observation.starting_replicas
            recount = observation.utilisation * observation.ready_replicas / (self.target_utilisation * counted)
            recommended = current if recount <= 1.0 + TOLERANCE else math.ceil(recount * counted)
        return stabilise(now, current, recommended, state, self.behavior, self.min_replicas, self.max_replicas)
