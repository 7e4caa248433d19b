"""One entry point for a replay: build the policy (searching where it must), run the chosen mode."""
from __future__ import annotations

import dataclasses
from typing import Callable

from scaling.sim.config import SimConfig
from scaling.sim.fluid_mode import run_fluid_mode
from scaling.sim.policies import Policy, PolicyContext, build_policy
from scaling.sim.request_mode import ProgressFn, run_request_mode
from scaling.sim.result import SimResult
from scaling.sim.route_mode import FallbackRoute, run_route_mode, route_for
from scaling.sim.workload import Workload

MODES: dict[str, Callable[..., SimResult]] = {"request": run_request_mode, "fluid": run_fluid_mode}
# Policies sized by search (`static` at peak, `clairvoyant`) replay many times; past these sizes the
# search replays in fluid mode with coarser steps so that a two-week trace stays interactive.
SEARCH_MAX_REQUESTS = 2_000_000
SEARCH_MAX_STEPS = 200_000


def simulate(
    workload: Workload,
    config: SimConfig,
    policy_name: str,
    mode: str = "request",
    static_replicas: int | None = None,
    progress: ProgressFn | None = None,
    fallback: FallbackRoute | None = None,
) -> SimResult:
    """`fallback` (request mode only): replay a route over the primary pool and that fallback pool;
    its plan and capacity are filled in here (`route_for`)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known modes: {', '.join(MODES)}")
    if fallback is not None and mode != "request":
        raise ValueError("a fallback route is replayed in request mode only")
    context = PolicyContext(workload, config, _search_evaluator(workload, config, mode), static_replicas)
    policy = build_policy(policy_name, context)
    if fallback is not None:
        route = route_for(config, workload, policy, fallback)
        return run_route_mode(workload, config, policy, route, progress)
    return MODES[mode](workload, config, policy, progress)


def _search_evaluator(workload: Workload, config: SimConfig, mode: str) -> Callable[[Policy], SimResult]:
    search_mode, search_config = mode, config
    if mode == "request" and workload.expected_requests > SEARCH_MAX_REQUESTS:
        search_mode = "fluid"
    if search_mode == "fluid" and workload.span_s / config.fluid_step_s > SEARCH_MAX_STEPS:
        search_config = dataclasses.replace(config, fluid_step_s=workload.span_s / SEARCH_MAX_STEPS)
    run = MODES[search_mode]
    return lambda policy: run(workload, search_config, policy)
