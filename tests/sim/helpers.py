"""Small synthetic workloads and scripted policies for simulator tests."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaling.sim.policies.base import Observation
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.workload import Trace


def poisson_trace(rate_rps: float, duration_s: float, prompt: int = 500, output: int = 100, seed: int = 1) -> Trace:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate_rps, int(rate_rps * duration_s * 1.2)))
    arrivals = arrivals[arrivals < duration_s]
    count = len(arrivals)
    return Trace("poisson", arrivals, np.full(count, prompt), np.full(count, output))


@dataclass(frozen=True)
class ScriptedPolicy:
    """Replicas by time: the last step whose start is <= now."""

    steps: tuple[tuple[float, int], ...]
    name: str = "scripted"
    tick_s: float = 1.0

    def new_state(self) -> None:
        return None

    def decide(self, now: float, observation: Observation, state: None) -> int:
        return [replicas for start, replicas in self.steps if start <= now][-1]


@dataclass(frozen=True)
class LatencyReadingStatic(StaticPolicy):
    """`static` that asks the simulator for TTFT percentiles (as the headroom policy does)."""

    observes_latency: bool = True
