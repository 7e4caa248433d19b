"""Route mode: one route over a primary pool and its fallback pool (a smaller model), request by request.

Each pool serves as in request mode (`request_mode.py`: per-replica FIFO prefill, batch slots,
least-outstanding routing, the same lifecycle). In front of them the route splits the traffic:
every tick the *same* fallback step as the live loop (`scaling.engine.fallback.fallback_step`)
reads the primary's signals and the route's request rate and sets the share of the
fallback-eligible traffic that goes to the fallback pool until the next tick. A `priority_share`
of the requests is the priority class, which never falls back.

The primary's policy scales the primary and sees the route's whole request rate (what the pool
would get alone: the planner must not read the diverted share as a fall in demand), and the rate
the primary was sent beside it (`Observation.served_rate_rps`: its capacity correction learns
latency against the load its replicas carried), as the live loop gives them; the fallback pool is a
static, warm pool of `fallback_replicas`. Both pools are billed.

Client timeouts, retries and a router queue limit are not modelled here (the replay refuses them
with `--fallback`).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from dataclasses import dataclass, field
from heapq import heappop, heappush, heapreplace
from typing import Any

import numpy as np

from scaling.engine.fallback import (FallbackDecision, FallbackPolicy, FallbackState, PRIORITY, STANDARD,
                                     fallback_step)
from scaling.engine.planner import PoolPlan
from scaling.engine.spillover import spill_after_s as spill_after, spills
from scaling.sim.config import SimConfig, effective_slots
from scaling.sim.lifecycle import ReplicaSet
from scaling.sim.policies.base import LATENCY_WINDOW_S, Observation, Policy
from scaling.sim.policies.headroom import HeadroomPolicy, measured_capacity_rps, pool_plan_for, signals_of
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.profiles import SCHEDULING_POLICIES, PoolProfile, inter_token_seconds
from scaling.sim.request_mode import ProgressFn
from scaling.sim.result import Percentiles, SimResult, pool_costs
from scaling.sim.router import LeastOutstandingRouter
from scaling.sim.workload import Workload

TAIL_LIMIT_S = 86_400.0
CLASS_SEED = 0x5EED  # the class and split draws use their own stream: the trace's draws stay as they are


@dataclass(frozen=True)
class FallbackRoute:
    """The replay's route: the fallback pool and the split's parameters."""

    profile: PoolProfile
    replicas: int = 2
    priority_share: float = 0.0
    policy: FallbackPolicy = FallbackPolicy()
    primary_plan: PoolPlan | None = None  # the primary's planning profile (capacity at the SLO)
    fallback_capacity_rps: float | None = None  # per fallback replica, at the SLO
    # An eligible request the draw left on the primary goes to the fallback anyway when the primary's
    # least-loaded replica would start it later than this share of the SLO, whether a fallback is active
    # or not (a gateway's per-request spill-over); None: the share alone decides.
    spillover_wait_share: float | None = None
    # How each replica picks its next waiting request, as vLLM's `--scheduling-policy`: "fcfs" in arrival
    # order, "priority" the priority class first (the class's requests sent with a higher priority).
    scheduling_policy: str = "fcfs"

    def __post_init__(self) -> None:
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(f"--scheduling-policy must be one of {', '.join(SCHEDULING_POLICIES)}")
        if self.replicas < 1:
            raise ValueError("--fallback-replicas must be at least 1")
        if not 0.0 <= self.priority_share <= 1.0:
            raise ValueError("--priority-share must be between 0 and 1")
        if self.spillover_wait_share is not None and not self.spillover_wait_share > 0.0:
            raise ValueError("--fallback-spillover must be positive")


@dataclass
class RouteResult(SimResult):
    fallback_share: float = 0.0  # of the scored requests, served by the fallback model
    slo_attainment_by_class: dict[str, float] = field(default_factory=dict)
    slo_attainment_by_model: dict[str, float] = field(default_factory=dict)
    pools: dict[str, dict[str, object]] = field(default_factory=dict)
    fallback_events: list[list[object]] = field(default_factory=list)  # [time s, event, reason]

    def as_json(self) -> dict[str, object]:
        out = super().as_json()
        out.update(fallback_share=self.fallback_share, slo_attainment_by_class=self.slo_attainment_by_class,
                   slo_attainment_by_model=self.slo_attainment_by_model, pools=self.pools,
                   fallback_events=self.fallback_events)
        return out


@dataclass
class _Requests:
    """The route's requests, shared by both pools: what each needs to be served, and its latencies."""

    origin: list[float]
    outputs_minus_one: list[int]
    priority: list[bool]
    ttft: list[float]
    e2e: list[float]


class _Pool:
    """One pool's replicas and serving state (request mode's, without client timeouts).

    First come, first served (vLLM's default `--scheduling-policy fcfs`): a request's start is fixed
    as it arrives, at its replica's next free batch slot and prefill. With `priority_first` (vLLM's
    `--scheduling-policy priority`) each replica keeps its waiting requests and starts the priority
    class's first, each class in arrival order; a start is fixed once the replica is free and every
    request that could compete for it has arrived. Running requests are not preempted (vLLM preempts
    only when the KV cache runs out, which the replay does not model).
    """

    def __init__(self, config: SimConfig, policy: Policy, prompt_tokens: np.ndarray, mean_tokens: float,
                 requests: _Requests, observes_latency: bool, priority_first: bool = False) -> None:
        self.config, self.policy, self.requests = config, policy, requests
        profile = config.profile
        self.prompt_s = (prompt_tokens / profile.prefill_tokens_per_s).tolist()
        self.slots = effective_slots(profile, mean_tokens)
        self.itl_by_batch = [inter_token_seconds(profile, b) for b in range(self.slots + 1)]
        self.replicas = ReplicaSet(config.cold_start, np.random.default_rng(config.seed))
        self.router = LeastOutstandingRouter()
        self.slot_free_at: list[list[float]] = []
        self.prefill_free_at: list[float] = []
        self.last_end: list[float] = []
        self.waiting_exits: list[deque[float]] = []
        # Priority scheduling: per replica, the waiting (request, requests in flight as it arrived) of each
        # class, priority first; `due` holds (when the replica's next start can be, replica) for each replica
        # with a waiting request. The sent-in-order schedule (`fcfs_slots`, `fcfs_prefill`) is the wait a new
        # standard request would see, which spill-over reads; without priority scheduling it is the schedule.
        self.priority_first = priority_first
        self.waiting_by_class: list[tuple[deque[tuple[int, int]], deque[tuple[int, int]]]] = []
        self.due: list[tuple[float, int]] = []
        self.queued = 0
        self.fcfs_slots = [] if priority_first else self.slot_free_at
        self.fcfs_prefill = [] if priority_first else self.prefill_free_at
        self.completions: list[tuple[float, int]] = []
        self.router_queue: deque[int] = deque()  # requests held while no replica is ready
        self.state: Any = policy.new_state()
        self.tick_sent = 0
        self.tick_prefill_s = 0.0
        self.observes_latency = observes_latency
        self.first_tokens: list[tuple[float, float]] = []
        self.recent_ttft: deque[tuple[float, float]] = deque()
        self.samples: list[Observation] = []
        first = Observation(0.0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0)
        self.replicas.start_warm(self.clamp(policy.decide(0.0, first, self.state)))
        self._add_serving()
        for replica_id in self.replicas.ready_ids:
            self.router.make_routable(replica_id)

    def clamp(self, desired: int) -> int:
        return max(self.config.min_replicas, min(self.config.max_replicas, int(desired)))

    def _add_serving(self) -> None:
        while len(self.router.outstanding) < len(self.replicas.replicas):
            self.waiting_exits.append(deque())
            self.slot_free_at.append([0.0] * self.slots)
            self.prefill_free_at.append(0.0)
            self.last_end.append(0.0)
            if self.priority_first:
                self.fcfs_slots.append([0.0] * self.slots)
                self.fcfs_prefill.append(0.0)
                self.waiting_by_class.append((deque(), deque()))
            self.router.add_replica()

    def earliest_start_s(self, now: float) -> float:
        """When the least-loaded ready replica could start a new request's prefill (inf: none ready)."""
        best = math.inf
        for r in self.router.routable_ids:
            start = max(self.fcfs_slots[r][0], self.fcfs_prefill[r], now)
            if start < best:
                best = start
        return best

    def _timing(self, k: int, start: float, in_flight: int) -> tuple[float, float, float]:
        """(prefill done, first token, last token) of request `k` started at `start`."""
        itl = self.itl_by_batch[in_flight + 1 if in_flight < self.slots else self.slots]
        prefill_done = start + self.prompt_s[k]
        first_token = prefill_done + itl
        return prefill_done, first_token, first_token + self.requests.outputs_minus_one[k] * itl

    def serve(self, k: int, now: float) -> None:
        if self.due:
            self._start_due(now)
        completions, router = self.completions, self.router
        while completions and completions[0][0] <= now:
            router.finish(heappop(completions)[1])
        if not router.routable_ids:
            self.router_queue.append(k)
            return
        r = router.pick()
        in_flight = router.outstanding[r] - 1
        self.tick_prefill_s += self.prompt_s[k]  # the prefill work sent this tick
        if not self.priority_first:
            heap = self.slot_free_at[r]
            start = heap[0] if heap[0] > now else now
            if self.prefill_free_at[r] > start:
                start = self.prefill_free_at[r]
            self._start(r, k, start, in_flight, now)
            return
        heap = self.fcfs_slots[r]
        prefill_done, _, end = self._timing(k, max(heap[0], self.fcfs_prefill[r], now), in_flight)
        heapreplace(heap, end)
        self.fcfs_prefill[r] = prefill_done
        first, second = self.waiting_by_class[r]
        idle = not first and not second
        (first if self.requests.priority[k] else second).append((k, in_flight))
        self.queued += 1
        if idle:
            heappush(self.due, (self._next_start_s(self.waiting_by_class[r], self.slot_free_at[r],
                                                   self.prefill_free_at[r]), r))
            self._start_due(now)

    def _start(self, r: int, k: int, start: float, in_flight: int, now: float) -> None:
        requests = self.requests
        prefill_done, first_token, end = self._timing(k, start, in_flight)
        heapreplace(self.slot_free_at[r], end)
        self.prefill_free_at[r] = prefill_done
        ttft = requests.ttft[k] = first_token - requests.origin[k]
        requests.e2e[k] = end - requests.origin[k]
        if self.observes_latency:
            heappush(self.first_tokens, (first_token, ttft))
        if start > now:
            self.waiting_exits[r].append(start)
        heappush(self.completions, (end, r))
        if end > self.last_end[r]:
            self.last_end[r] = end

    def _next_start_s(self, queues: tuple[deque[tuple[int, int]], ...], slots: list[float],
                      prefill_free: float) -> float:
        """When a replica's next waiting request (in `queues`) can start: a slot and the prefill free, the
        request there."""
        origin = self.requests.origin
        return max(slots[0], prefill_free, min(origin[queue[0][0]] for queue in queues if queue))

    def _next_waiting(self, queues: tuple[deque[tuple[int, int]], ...], when: float) -> deque[tuple[int, int]]:
        """The class queue whose head starts at `when`: the priority class's, if its head has arrived by then."""
        first, second = queues
        return first if first and self.requests.origin[first[0][0]] <= when else second

    def _start_due(self, now: float) -> None:
        """Start every waiting request whose start is due by `now` (priority scheduling)."""
        due = self.due
        while due and due[0][0] <= now:
            when, r = heappop(due)
            queues = self.waiting_by_class[r]
            k, in_flight = self._next_waiting(queues, when).popleft()
            self.queued -= 1
            self._start(r, k, when, in_flight, now)
            if queues[0] or queues[1]:
                heappush(due, (self._next_start_s(queues, self.slot_free_at[r], self.prefill_free_at[r]), r))

    def _drained_end_s(self, r: int) -> float:
        """When replica `r` ends its last request: its waiting ones started in order, as they will be once
        no request comes (a replica that stops taking requests)."""
        queues = self.waiting_by_class[r] if self.priority_first else ((), ())
        if not queues[0] and not queues[1]:
            return self.last_end[r]
        queues = (deque(queues[0]), deque(queues[1]))
        slots, prefill_free, last = list(self.slot_free_at[r]), self.prefill_free_at[r], self.last_end[r]
        while queues[0] or queues[1]:
            when = self._next_start_s(queues, slots, prefill_free)
            k, in_flight = self._next_waiting(queues, when).popleft()
            prefill_free, _, end = self._timing(k, when, in_flight)
            heapreplace(slots, end)
            last = max(last, end)
        return last

    def observe(self, now: float, tick_s: float, demand_rps: float) -> Observation:
        if self.due:
            self._start_due(now)
        completions, router = self.completions, self.router
        while completions and completions[0][0] <= now:
            router.finish(heappop(completions)[1])
        waiting = self.queued
        for exits in self.waiting_exits:
            while exits and exits[0] <= now:
                exits.popleft()
            waiting += len(exits)
        ready = self.replicas.ready_count
        running = sum(router.outstanding) - waiting
        utilisation = 0.0
        if ready:
            utilisation = min(1.0, max(self.tick_prefill_s / (ready * tick_s), running / (ready * self.slots)))
        p95, p99 = self._ttft_percentiles(now) if self.observes_latency else (math.nan, math.nan)
        self.tick_sent, self.tick_prefill_s = 0, 0.0
        return Observation(now, ready, self.replicas.starting_count, self.replicas.desired_count,
                           float(waiting + len(self.router_queue)), float(running), utilisation, demand_rps, p95, p99)

    def _ttft_percentiles(self, now: float) -> tuple[float, float]:
        while self.first_tokens and self.first_tokens[0][0] <= now:
            self.recent_ttft.append(heappop(self.first_tokens))
        while self.recent_ttft and self.recent_ttft[0][0] <= now - LATENCY_WINDOW_S:
            self.recent_ttft.popleft()
        if not self.recent_ttft:
            return math.nan, math.nan
        p95, p99 = np.percentile([latency for _, latency in self.recent_ttft], (95, 99))
        return float(p95), float(p99)

    def scale(self, now: float, observation: Observation) -> None:
        self.samples.append(observation)
        desired = self.clamp(self.policy.decide(now, observation, self.state))
        for replica_id in self.replicas.scale_to(desired, now, self._drained_end_s):
            self.router.stop_routing(replica_id)
        self._add_serving()

    def promote(self, now: float) -> None:
        promoted = self.replicas.promote_due(now)
        for replica_id in promoted:
            self.router.make_routable(replica_id)
        if promoted:
            queued, self.router_queue = self.router_queue, deque()
            for k in queued:
                self.serve(k, now)

    @property
    def end_s(self) -> float:
        return max(self.last_end, default=0.0)


def run_route_mode(workload: Workload, config: SimConfig, policy: Policy, route: FallbackRoute,
                   progress: ProgressFn | None = None) -> RouteResult:
    """Replay `workload` through the route; `config` is the primary's, `policy` scales the primary."""
    started = time.perf_counter()
    if route.primary_plan is None or route.fallback_capacity_rps is None:
        raise ValueError("the route needs the primary's plan and the fallback's capacity (see route_for)")
    trace = workload.to_requests(config.seed)
    total = len(trace)
    origin = trace.arrival_s.tolist()
    outputs_minus_one = np.maximum(trace.output_tokens - 1, 0).tolist()
    mean_tokens = float(np.mean(trace.prompt_tokens + trace.output_tokens)) if total else 1.0
    draws = np.random.default_rng([config.seed, CLASS_SEED]).random((2, total))
    priority = (draws[0] < route.priority_share).tolist()
    split_draw = draws[1].tolist()
    fallback_config = dataclasses.replace(
        SimConfig.for_profile(route.profile), slo_ttft_s=config.slo_ttft_s, slo_objective=config.slo_objective,
        min_replicas=route.replicas, max_replicas=route.replicas, seed=config.seed, warmup_s=config.warmup_s)
    tick_s = config.tick_s or policy.tick_s
    requests = _Requests(origin, outputs_minus_one, priority, [math.nan] * total, [math.nan] * total)
    priority_first = route.scheduling_policy == "priority"
    primary = _Pool(config, policy, trace.prompt_tokens, mean_tokens, requests, observes_latency=True,
                    priority_first=priority_first)
    fallback = _Pool(fallback_config, StaticPolicy(route.replicas, tick_s=tick_s), trace.prompt_tokens, mean_tokens,
                     requests, observes_latency=False, priority_first=priority_first)
    pools = (primary, fallback)
    may_priority, may_standard = route.policy.may_fall_back(PRIORITY), route.policy.may_fall_back(STANDARD)
    eligible_share = route.priority_share * may_priority + (1.0 - route.priority_share) * may_standard

    served_by = [0] * total  # 0: primary, 1: fallback
    state = FallbackState()
    share = 0.0
    events: list[list[object]] = []
    route_sent = 0
    spill_after_s = (None if route.spillover_wait_share is None
                     else spill_after(route.spillover_wait_share, config.slo_ttft_s))

    def control(now: float, next_tick: float) -> float:
        nonlocal state, share, route_sent
        for pool in pools:
            pool.promote(now)
        if now >= next_tick:
            sent, route_sent = route_sent, 0
            demand = sent / tick_s
            # The primary's policy plans for the route's demand and learns its capacity from what it was sent
            # (read before `observe`, which starts the next tick's count).
            served = primary.tick_sent / tick_s
            observation = dataclasses.replace(primary.observe(now, tick_s, demand), served_rate_rps=served)
            # While no fallback is active, what the fallback took is the gateway's spill-over: the live loop
            # reads it from the pools' rates (scaling.fallbacks.decide).
            spilled = fallback.tick_sent / sent if share <= 0.0 and sent else None
            decision: FallbackDecision = fallback_step(
                now, signals_of(observation), route.primary_plan, state, route.policy, demand_rps=demand,
                eligible_share=eligible_share,
                arriving_requested_at_s=tuple(r.requested_at for r in primary.replicas.starting),
                fallback_capacity_rps=fallback.replicas.ready_count * route.fallback_capacity_rps,
                routed_share=spilled)
            state, share = decision.state, decision.share
            if decision.event is not None:
                events.append([round(now, 1), decision.event, "; ".join(decision.reasons)])
            primary.scale(now, observation)
            fallback.scale(now, fallback.observe(now, tick_s, fallback.tick_sent / tick_s))
            next_tick += tick_s
        return next_tick

    def next_ready() -> float:
        return min(primary.replicas.next_ready_at(), fallback.replicas.next_ready_at())

    next_tick = tick_s
    next_control = min(next_tick, next_ready())
    last_report = time.perf_counter()
    span = trace.span_s
    for k in range(total):
        now = origin[k]
        while next_control <= now:
            next_tick = control(next_control, next_tick)
            next_control = min(next_tick, next_ready())
        route_sent += 1
        eligible = may_priority if priority[k] else may_standard
        pool = fallback if share > 0.0 and eligible and split_draw[k] < share else primary
        # The replay knows the primary's schedule, so its wait is exact; the class is checked first as
        # well because the wait scans every replica.
        if pool is primary and spill_after_s is not None and eligible and spills(
                eligible=eligible, start_wait_s=primary.earliest_start_s(now) - now, after_s=spill_after_s):
            pool = fallback
        if pool is fallback:
            served_by[k] = 1
        pool.tick_sent += 1
        pool.serve(k, now)
        if progress is not None and not k % (1 << 14) and time.perf_counter() - last_report > 2.0:
            progress(now, span)
            last_report = time.perf_counter()

    end_s = max(span, primary.end_s, fallback.end_s)
    while True:
        next_control = min(next_tick, next_ready())
        if next_control == math.inf or next_control > span + TAIL_LIMIT_S:
            break
        if next_control > end_s and not any(pool.router_queue or pool.queued for pool in pools):
            break
        next_tick = control(next_control, next_tick)
        end_s = max(end_s, primary.end_s, fallback.end_s)

    return _route_result(policy.name, config, fallback_config, route, trace.arrival_s, np.array(requests.ttft),
                         np.array(requests.e2e),
                         np.array(served_by, dtype=bool), np.array(priority, dtype=bool), primary, fallback, end_s,
                         events, started)


def route_for(config: SimConfig, workload: Workload, policy: Policy, route: FallbackRoute) -> FallbackRoute:
    """`route` with the primary's plan (the headroom policy's own, else load-tested) and the fallback
    profile's capacity per replica at the same SLO, load-tested the same way."""
    if isinstance(policy, HeadroomPolicy):
        plan = policy.pool
    else:
        plan = pool_plan_for(config, workload, capacity_rps=measured_capacity_rps(config, workload))
    fallback_config = dataclasses.replace(SimConfig.for_profile(route.profile), slo_ttft_s=config.slo_ttft_s,
                                          slo_objective=config.slo_objective, seed=config.seed)
    return dataclasses.replace(route, primary_plan=plan,
                               fallback_capacity_rps=measured_capacity_rps(fallback_config, workload))


def _attainment(met: np.ndarray, mask: np.ndarray) -> float | None:
    count = int(np.count_nonzero(mask))
    return round(int(np.count_nonzero(met & mask)) / count, 4) if count else None


def _route_result(policy_name: str, config: SimConfig, fallback_config: SimConfig, route: FallbackRoute,
                  arrival_s: np.ndarray, ttft: np.ndarray, e2e: np.ndarray, on_fallback: np.ndarray,
                  priority: np.ndarray, primary: _Pool, fallback: _Pool, end_s: float, events: list[list[object]],
                  started: float) -> RouteResult:
    scored = arrival_s >= config.warmup_s
    arrival_s = arrival_s[scored]
    ttft, e2e, on_fallback, priority = ttft[scored], e2e[scored], on_fallback[scored], priority[scored]
    total = len(ttft)
    served = np.isfinite(ttft)  # never-served requests (no replica ever ready) stay NaN
    met = served & (np.nan_to_num(ttft, nan=np.inf) <= config.slo_ttft_s)
    missed = np.bincount((arrival_s[~met] // 60).astype(np.int64)) if total else np.zeros(0, np.int64)
    primary_cost = pool_costs(primary.replicas, config, end_s)
    fallback_cost = pool_costs(fallback.replicas, fallback_config, end_s)
    by_class = {name: _attainment(met, mask) for name, mask in ((PRIORITY, priority), (STANDARD, ~priority))}
    by_model = {config.profile.model: _attainment(met, ~on_fallback), route.profile.model: _attainment(met, on_fallback)}
    return RouteResult(
        policy=policy_name,
        mode="request",
        requests=total,
        served=int(served.sum()),
        rejected=0,
        timed_out=int(total - served.sum()),
        retries=0,
        slo_attainment=round(int(met.sum()) / total, 4) if total else 1.0,
        ttft_ms=Percentiles.of(ttft[served]),
        e2e_ms=Percentiles.of(e2e[served]),
        e2e_mean_s=float(np.mean(e2e[served])) if served.any() else float("nan"),
        gpu_hours=round(float(primary_cost["gpu_hours"]) + float(fallback_cost["gpu_hours"]), 4),
        cost_usd=round(float(primary_cost["cost_usd"]) + float(fallback_cost["cost_usd"]), 2),
        max_replicas=int(primary_cost["max_replicas"]),
        mean_ready_replicas=float(primary_cost["mean_ready_replicas"]),
        cold_starts=int(primary_cost["cold_starts"]),
        wall_s=round(time.perf_counter() - started, 3),
        samples=primary.samples,
        misses_by_minute={int(minute): int(count) for minute, count in enumerate(missed) if count},
        fallback_share=round(float(on_fallback.mean()), 4) if total else 0.0,
        slo_attainment_by_class={name: value for name, value in by_class.items() if value is not None},
        slo_attainment_by_model={name: value for name, value in by_model.items() if value is not None},
        pools={"primary": {"profile": config.profile.name, **primary_cost},
               "fallback": {"profile": route.profile.name, **fallback_cost}},
        fallback_events=events,
    )
