"""`static`: a fixed number of replicas, all warm from the start."""
from __future__ import annotations

from dataclasses import dataclass

from scaling.sim.policies.base import Observation


@dataclass(frozen=True)
class StaticPolicy:
    replicas: int
    name: str = "static"
    tick_s: float = 15.0

    def new_state(self) -> None:
        return None

    def decide(self, now: float, observation: Observation, state: None) -> int:
        return self.replicas
