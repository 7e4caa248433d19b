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

ORACLE_BISECTION_STEPS = 7
ORACLE_MAX_UTILISATION = 4.0
# The utilisation bounds tried before the bisection (u > 1: a burst may wait into the next bins).
ORACLE_UTILISATION_GRID = (0.25, 0.4, 0.55, 0.7, 0.85, 1.0, 1.5, 2.0, 3.0)
# The second bin width, in SLO periods: a plan sized on 10-s work holds a level through 1-s bursts
# (on bursty, prefill-bound traffic the 1-s plan's peaks over a lead time cost more than the misses).
ORACLE_SMOOTH_BIN_S = 10
# The baselines as their users would set them: chosen by `bench/tune_baselines.py` on the training
# trace only (Azure `code` as recorded, request mode, 10-minute warm-up): the cheapest setting of a
# small grid meeting the objective there, else the one with the highest attainment. The defaults
# of the tools (5 waiting requests a replica, 80 % utilisation) reach 0.76 / 0.75 on that trace.
TUNED_HPA_TARGET_UTILISATION = 0.3  # grid 0.2-0.8: 0.3 meets 99 % (0.9905) at 5.16 GPU-h, 0.2 at 7.76
TUNED_KEDA_TARGET_QUEUE = 0.25  # grid 0.25-5: none meets 99 %; 0.25 reaches the most (0.8371)
# Where no pool size meets the objective, reaching the best attainment any size reaches less this
# counts as reaching it (attainment is reported to 4 decimals; a plateau is flat to about this).
BEST_ATTAINMENT_TOLERANCE = 0.0005


class ReplayScore(Protocol):
    """The part of a SimResult the searches read (SimResult imports policies: no cycle)."""

    slo_attainment: float
    gpu_hours: float


@dataclass
class PolicyContext:
    workload: Workload
    config: SimConfig
    evaluate: Callable[[Policy], ReplayScore]  # replays a policy in the simulator that will score it
    static_replicas: int | None = None  # `static` size; None sizes it for the peak
    _peak_replicas: int | None = None
    _target: float | None = None

    def attainment_target(self) -> float:
        """The SLO objective, or where no number of replicas meets it, the best attainment any number
        reaches (a warm pool at max replicas, less `BEST_ATTAINMENT_TOLERANCE`)."""
        if self._target is None:
            objective = self.config.slo_objective
            best = self.evaluate(StaticPolicy(self.config.max_replicas)).slo_attainment
            self._target = objective if best >= objective else best - BEST_ATTAINMENT_TOLERANCE
        return self._target

    def meets_slo(self, policy: Policy) -> bool:
        return self.evaluate(policy).slo_attainment >= self.attainment_target()

    def smallest_static(self, target: float) -> int:
        """The smallest static pool whose replay reaches `target` attainment (max replicas if none does)."""
        low, high = self.config.min_replicas, self.config.max_replicas
        while low < high:
            middle = (low + high) // 2
            if self.evaluate(StaticPolicy(middle)).slo_attainment >= target:
                high = middle
            else:
                low = middle + 1
        return low

    def peak_replicas(self) -> int:
        """The smallest static pool reaching the attainment target (the objective where any size can)."""
        if self._peak_replicas is None:
            self._peak_replicas = self.smallest_static(self.attainment_target())
        return self._peak_replicas


def _static(context: PolicyContext) -> Policy:
    return StaticPolicy(context.static_replicas or context.peak_replicas())


def _hpa_util(context: PolicyContext) -> Policy:
    return HpaUtilPolicy(context.config.min_replicas, context.config.max_replicas,
                         target_utilisation=TUNED_HPA_TARGET_UTILISATION)


def _keda_queue(context: PolicyContext) -> Policy:
    return KedaQueuePolicy(context.config.min_replicas, context.config.max_replicas,
                           target_queue_per_replica=TUNED_KEDA_TARGET_QUEUE)


def clairvoyant(context: PolicyContext, target: float | None = None) -> tuple[OraclePolicy, ReplayScore]:
    """The cheapest plan found that reaches `target` attainment (default: the context's target), with its score.

    The family (`oracle.py`): a utilisation bound u applied to every bin's known work, replicas
    requested one lead time ahead. Both lead times are tried, the cold start's p95 and its p50 (plus
    a tick): knowing the future, a schedule may start replicas as late as it can afford. For each, u
    is the largest of `ORACLE_UTILISATION_GRID` that reaches the target, refined by bisection up to
    the next grid point (at most 4); u -> 0 is a warm pool at the
    smallest static size reaching it, so the plan never costs more than that pool. The cheaper of the
    plans wins. The whole search runs for two bin widths, one SLO period and ten (`ORACLE_SMOOTH_BIN_S`).

    The plans are capped at the smallest static pool reaching the target; at a `target` of its own also
    at the context's cap, and the cheaper wins: a smaller cap is not always cheaper. On the suite's
    long-prompt case at 0.9803 the cap of 82 found 45.30 GPU-hours, the context's 94 found 23.68.
    """
    config = context.config
    tick_s = config.tick_s or 15.0
    goal = context.attainment_target() if target is None else target
    bin_s = max(config.slo_ttft_s, config.fluid_step_s)
    caps = {context.peak_replicas()} if target is None else {context.smallest_static(goal), context.peak_replicas()}
    best: tuple[OraclePolicy, ReplayScore] | None = None
    leads = sorted({config.cold_start.p95_s + tick_s, config.cold_start.p50_s + tick_s}, reverse=True)
    for width in (bin_s, ORACLE_SMOOTH_BIN_S * bin_s):
        demand = OracleDemand.of(context.workload, config, bin_s=width)
        for cap in sorted(caps):
            best = _best_of(context, demand, leads, goal, cap, tick_s, best)
    assert best is not None
    return best


def bound_at(context: PolicyContext, attainment: float) -> ReplayScore:
    """The bound check's clairvoyant: the cheapest plan found reaching a causal policy's `attainment`.

    Where no pool size meets the objective, attainment is a plateau whose last decimal is a few
    requests that any change of plan moves either way: on the suite's long-prompt case, plans that
    only raise a floor under the same schedule (1 to 82 replicas, 29.4 to 66.2 GPU-hours) reach
    0.9795 to 0.9804 with no trend. There the bound is searched at the attainment less
    `BEST_ATTAINMENT_TOLERANCE`, as the clairvoyant's own target is; elsewhere at the attainment itself.
    Never costlier than the clairvoyant at the context's target, when that reaches the attainment (the
    search at a lower target tries the context's cap too).
    """
    out_of_reach = context.attainment_target() < context.config.slo_objective
    return clairvoyant(context, attainment - BEST_ATTAINMENT_TOLERANCE if out_of_reach else attainment)[1]


def _best_of(context: PolicyContext, demand: OracleDemand, leads: list[float], goal: float, cap: int, tick_s: float,
             best: tuple[OraclePolicy, ReplayScore] | None) -> tuple[OraclePolicy, ReplayScore] | None:
    """The cheapest plan reaching `goal` of one bin width, over the lead times, against `best` so far."""
    config = context.config
    for lead_s in leads:
        def plan(utilisation: float) -> OraclePolicy:
            return demand.plan(utilisation, lead_s, config.min_replicas, cap, tick_s)

        found: tuple[OraclePolicy, ReplayScore] | None = None
        # Attainment falls as u rises, but not monotonically near the target: a few requests more or
        # less miss where a bin's replicas change (on the suite's conv x4 surge 3:15 at 0.9976, a
        # bisection from (0, 1) stopped at a plan of 13.15 GPU-hours, the grid finds 8.97). So the grid
        # first, for the largest u reaching the goal (the cheapest: higher u, fewer replicas), then a
        # bisection between it and the next grid point.
        feasible = 0.0
        for utilisation in ORACLE_UTILISATION_GRID:
            candidate = plan(utilisation)
            score = context.evaluate(candidate)
            if score.slo_attainment >= goal:
                found, feasible = (candidate, score), utilisation
        above = [u for u in ORACLE_UTILISATION_GRID if u > feasible]
        infeasible = above[0] if above else ORACLE_MAX_UTILISATION
        for _ in range(ORACLE_BISECTION_STEPS):
            middle = (feasible + infeasible) / 2
            candidate = plan(middle)
            score = context.evaluate(candidate)
            if score.slo_attainment >= goal:
                feasible, found = middle, (candidate, score)
            else:
                infeasible = middle
        if found is None:
            candidate = plan(0.0)
            found = (candidate, context.evaluate(candidate))
        if best is None or (found[1].slo_attainment >= goal and
                            (best[1].slo_attainment < goal or found[1].gpu_hours < best[1].gpu_hours)):
            best = found
    return best


def _clairvoyant(context: PolicyContext) -> Policy:
    return clairvoyant(context)[0]


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
