"""`keda-queue`: KEDA scaling on queue depth (vllm:num_requests_waiting), 5 per replica.

KEDA polls the metric every 30 s and serves the cached value to the HPA, which syncs every 15 s
and applies its default behaviour (AverageValue external metric: ceil(total / target)). At zero
replicas KEDA itself activates the pool (0 -> 1) when the queue is above 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from scaling.sim.policies.base import Observation
from scaling.sim.policies.hpa import HpaBehavior, HpaState, proposal, stabilise


@dataclass
class KedaState:
    hpa: HpaState = field(default_factory=HpaState)
    polled_at: float = -1e18
    queue_depth: float = 0.0


@dataclass(frozen=True)
class KedaQueuePolicy:
    min_replicas: int
    max_replicas: int
    target_queue_per_replica: float = 5.0
    polling_interval_s: float = 30.0
    behavior: HpaBehavior = field(default_factory=HpaBehavior)
    name: str = "keda-queue"
    tick_s: float = 15.0

    def new_state(self) -> KedaState:
        return KedaState()

    def decide(self, now: float, observation: Observation, state: KedaState) -> int:
        if now - state.polled_at >= self.polling_interval_s:
            state.polled_at, state.queue_depth = now, observation.queue_depth
        current = observation.desired_replicas
        if current == 0:
            # KEDA's activation: from zero to one replica once the metric is above its activation
            # threshold (0); the HPA takes over from there (it cannot scale from zero itself).
            return max(self.min_replicas, 1) if state.queue_depth > 0 else self.min_replicas
        ratio = state.queue_depth / (self.target_queue_per_replica * current)
        return stabilise(now, current, proposal(current, ratio), state.hpa, self.behavior, self.min_replicas, self.max_replicas)
