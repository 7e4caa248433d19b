"""Policy registry. Every policy is built from a `PolicyContext` by a factory registered here.

Later issues add `headroom` with `register_policy("headroom", factory)`; nothing else changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from scaling.sim.config import SimConfig
from scaling.sim.policies.base import Observation, Policy
from scaling.sim.policies.headroom import build_headroom
from scaling.sim.policies.hpa_util import HpaUtilPolicy
from scaling.sim.policies.keda_queue import KedaQueuePolicy
from scaling.sim.policies.oracle import OracleDemand, OraclePolicy
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.workload import Workload

__all__ = ["ALIASES", "Observation", "Policy", "PolicyContext", "POLICIES", "build_policy", "register_policy"]

ORACLE_BISECTION_STEPS = 8


class ReplayScore(Protocol):
    """The part of a SimResult the searches read (SimResult imports policies: no cycle)."""

    slo_attainment: float


@dataclass
class PolicyContext:
    workload: Workload
    config: SimConfig
    evaluate: Callable[[Policy], ReplayScore]  # replays a policy in the simulator that will score it
    static_replicas: int | None = None  # `static` size; None sizes it for the peak
    _peak_replicas: int | None = None

    def meets_slo(self, policy: Policy) -> bool:
        return self.evaluate(policy).slo_attainment >= self.config.slo_objective

    def peak_replicas(self) -> int:
        """The smallest static pool whose replay meets the SLO (max replicas if none does)."""
        if self._peak_replicas is None:
            low, high = self.config.min_replicas, self.config.max_replicas
            while low < high:
                middle = (low + high) // 2
                if self.meets_slo(StaticPolicy(middle)):
                    high = middle
                else:
                    low = middle + 1
            self._peak_replicas = low
        return self._peak_replicas




def _static(context: PolicyContext) -> Policy:
    return StaticPolicy(context.static_replicas or context.peak_replicas())


def _hpa_util(context: PolicyContext) -> Policy:
    return HpaUtilPolicy(context.config.min_replicas, context.config.max_replicas)


def _keda_queue(context: PolicyContext) -> Policy:
    return KedaQueuePolicy(context.config.min_replicas, context.config.max_replicas)


def _clairvoyant(context: PolicyContext) -> Policy:
    config = context.config
    tick_s = config.tick_s or 15.0
    demand = OracleDemand.of(context.workload, config, bin_s=max(config.slo_ttft_s, config.fluid_step_s))
    cap = context.peak_replicas()

    def plan(utilisation: float) -> OraclePolicy:
        return demand.plan(utilisation, config.cold_start.p95_s + tick_s, config.min_replicas, cap, tick_s)

    if context.meets_slo(plan(1.0)):
        return plan(1.0)
    feasible, infeasible = 0.0, 1.0
    for _ in range(ORACLE_BISECTION_STEPS):
        middle = (feasible + infeasible) / 2
        if context.meets_slo(plan(middle)):
            feasible = middle
        else:
            infeasible = middle
    return plan(feasible)


POLICIES: dict[str, Callable[[PolicyContext], Policy]] = {
    "static": _static,
    "hpa-util": _hpa_util,
    "keda-queue": _keda_queue,
    "clairvoyant": _clairvoyant,
    "headroom": build_headroom,
}
# Earlier names still accepted: the clairvoyant schedule was called the oracle.
ALIASES: dict[str, str] = {"oracle": "clairvoyant"}


def register_policy(name: str, factory: Callable[[PolicyContext], Policy]) -> None:
    POLICIES[name] = factory


def build_policy(name: str, context: PolicyContext) -> Policy:
    try:
        factory = POLICIES[ALIASES.get(name, name)]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known policies: {', '.join(sorted(POLICIES))}") from None
    return factory(context)
