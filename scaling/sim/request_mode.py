"""Request mode: every request is simulated, in time order (discrete events on heaps).

Serving model of one replica (see docs/simulator.md):
- prompts are prefilled one after another at the profile's prefill throughput (FIFO, the GPU is
  compute-bound during prefill), and a request needs a free batch slot to start its prefill;
- a request is "waiting" (vllm:num_requests_waiting) until its prefill starts, "running" after;
- decoding runs in up to `effective_slots` concurrent sequences; the inter-token latency is set by
  the batch size when the request is admitted, which is what makes a one-pass sweep possible;
- the router sends each request to the ready replica with the fewest outstanding requests; with no
  ready replica it holds requests (counted in the queue) until one is ready;
- a client gives up at its timeout (a request not yet started never uses the GPU; one started is
  aborted and frees its slot) and retries after an exponential, jittered backoff.
"""
from __future__ import annotations

import math
import random
import time
from collections import deque
from dataclasses import dataclass
from heapq import heappop, heappush, heapreplace
from typing import Any, Callable

import numpy as np

from scaling.sim.config import SimConfig, effective_slots
from scaling.sim.lifecycle import ReplicaSet
from scaling.sim.policies.base import LATENCY_WINDOW_S, Observation, Policy
from scaling.sim.profiles import inter_token_seconds
from scaling.sim.result import Percentiles, SimResult, pool_costs
from scaling.sim.router import LeastOutstandingRouter
from scaling.sim.workload import Workload

SERVED, REJECTED, TIMED_OUT = 1, 2, 3
TAIL_LIMIT_S = 86_400.0  # after the last arrival, wait at most this long for a replica to serve the rest
ProgressFn = Callable[[float, float], None]  # (simulated seconds done, simulated seconds total)


@dataclass
class _ReplicaServing:
    """Per-replica serving state, held in parallel lists indexed by replica id (fast in the hot loop)."""

    slot_free_at: list[list[float]]  # a heap per replica: when each batch slot frees up
    prefill_free_at: list[float]
    last_end: list[float]
    router: LeastOutstandingRouter
    waiting_exits: list[deque[float]]  # per replica: when its waiting requests start their prefill

    def add(self, slots: int) -> None:
        self.waiting_exits.append(deque())
        self.slot_free_at.append([0.0] * slots)
        self.prefill_free_at.append(0.0)
        self.last_end.append(0.0)
        self.router.add_replica()


def run_request_mode(
    workload: Workload, config: SimConfig, policy: Policy, progress: ProgressFn | None = None
) -> SimResult:
    started = time.perf_counter()
    trace = workload.to_requests(config.seed)
    profile, client = config.profile, config.client
    total = len(trace)
    origin = trace.arrival_s.tolist()
    prompt_s = (trace.prompt_tokens / profile.prefill_tokens_per_s).tolist()
    outputs_minus_one = np.maximum(trace.output_tokens - 1, 0).tolist()
    slots = effective_slots(profile, float(np.mean(trace.prompt_tokens + trace.output_tokens)) if total else 1.0)
    itl_by_batch = [inter_token_seconds(profile, b) for b in range(slots + 1)]
    timeout = client.timeout_s if client.timeout_s is not None else math.inf
    retry_rng = random.Random(config.seed)

    replicas = ReplicaSet(config.cold_start, np.random.default_rng(config.seed))
    router = LeastOutstandingRouter()
    serving = _ReplicaServing([], [], [], router, [])
    tick_s = config.tick_s or policy.tick_s
    policy_state: Any = policy.new_state()

    def clamp(desired: int) -> int:
        return max(config.min_replicas, min(config.max_replicas, int(desired)))

    first = Observation(0.0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0)
    replicas.start_warm(clamp(policy.decide(0.0, first, policy_state)))
    for replica_id in replicas.ready_ids:
        serving.add(slots)
        router.make_routable(replica_id)
    slot_free_at, prefill_free_at, last_end = serving.slot_free_at, serving.prefill_free_at, serving.last_end
    outstanding, pick, finish, routable_ids = router.outstanding, router.pick, router.finish, router.routable_ids

    # Python lists while replaying (numpy item writes cost more than the rest of a request).
    ttft = [math.nan] * total
    e2e = [math.nan] * total
    outcome = [0] * total
    completions: list[tuple[float, int]] = []
    waiting_until: list[float] = []  # heap: when each waiting request starts its prefill or gives up
    router_queue: deque[tuple[int, float, int]] = deque()  # (request, sent at, attempt): no replica ready
    retry_heap: list[tuple[float, int, int]] = []  # (send at, request, attempt)
    retries = tick_sent = 0
    tick_prefill_s = 0.0
    waits_in_order = client.timeout_s is None and config.queue_limit is None
    waiting_by_replica = serving.waiting_exits  # used when waits_in_order, else waiting_until
    samples: list[Observation] = []
    queue_limit = config.queue_limit
    # TTFT percentiles cost a heap push per request: only for a policy that reads them.
    observes_latency = bool(getattr(policy, "observes_latency", False))
    first_tokens: list[tuple[float, float, float]] = []  # heap: (first token at, TTFT, queue time) not yet observed
    recent_ttft: deque[tuple[float, float, float]] = deque()  # first tokens inside the latency window

    def fail(k: int, at: float, attempt: int, code: int) -> None:
        if attempt < client.max_retries:
            jitter = 1.0 + client.backoff_jitter * (2.0 * retry_rng.random() - 1.0)
            heappush(retry_heap, (at + client.backoff_s(attempt + 1) * jitter, k, attempt + 1))
            nonlocal retries
            retries += 1
        else:
            outcome[k] = code

    def serve(k: int, now: float, sent: float, attempt: int) -> None:
        """Route request k (sent at `sent`, routed at `now`) and fix its timeline."""
        while completions and completions[0][0] <= now:
            finish(heappop(completions)[1])
        if queue_limit is not None:
            while waiting_until and waiting_until[0] <= now:
                heappop(waiting_until)
            if len(waiting_until) + len(router_queue) >= queue_limit:
                fail(k, now, attempt, REJECTED)  # 503 from the router
                return
        if not routable_ids:
            router_queue.append((k, sent, attempt))
            return
        r = pick()
        heap = slot_free_at[r]
        start = heap[0] if heap[0] > now else now
        if prefill_free_at[r] > start:
            start = prefill_free_at[r]
        in_flight = outstanding[r] - 1
        itl = itl_by_batch[in_flight + 1 if in_flight < slots else slots]
        prefill_done = start + prompt_s[k]
        first_token = prefill_done + itl
        end = first_token + outputs_minus_one[k] * itl
        deadline = sent + timeout
        nonlocal tick_prefill_s
        tick_prefill_s += prompt_s[k]
        if end <= deadline:
            heapreplace(heap, end)
            prefill_free_at[r] = prefill_done
            ttft[k] = first_token - origin[k]
            if observes_latency:
                heappush(first_tokens, (first_token, ttft[k], start - sent))
            e2e[k] = end - origin[k]
            outcome[k] = SERVED
        else:
            if start < deadline:  # started, then aborted when the client hung up
                heapreplace(heap, deadline)
                prefill_free_at[r] = min(prefill_done, deadline)
            end = deadline
            fail(k, deadline, attempt, TIMED_OUT)
        if start > now:
            if waits_in_order:  # FIFO per replica and nobody gives up: exits come in order
                waiting_by_replica[r].append(start)
            else:
                heappush(waiting_until, min(start, end))
        heappush(completions, (end, r))
        if end > last_end[r]:
            last_end[r] = end

    def observe(now: float) -> Observation:
        while completions and completions[0][0] <= now:
            finish(heappop(completions)[1])
        while waiting_until and waiting_until[0] <= now:
            heappop(waiting_until)
        waiting = len(waiting_until)
        for exits in waiting_by_replica:
            while exits and exits[0] <= now:
                exits.popleft()
            waiting += len(exits)
        ready = replicas.ready_count
        running = sum(outstanding) - waiting
        utilisation = 0.0
        nonlocal tick_prefill_s, tick_sent
        if ready:
            prefill_share = tick_prefill_s / (ready * tick_s)
            utilisation = min(1.0, max(prefill_share, running / (ready * slots)))
        ttft_p95, ttft_p99, queue_p95, queue_p99 = latency_percentiles(now) if observes_latency else (math.nan,) * 4
        observation = Observation(
            now=now,
            ready_replicas=ready,
            starting_replicas=replicas.starting_count,
            desired_replicas=replicas.desired_count,
            queue_depth=float(waiting + len(router_queue)),
            running=float(running),
            utilisation=utilisation,
            arrival_rate_rps=tick_sent / tick_s,
            ttft_p95_s=ttft_p95,
            ttft_p99_s=ttft_p99,
            queue_time_p95_s=queue_p95,
            queue_time_p99_s=queue_p99,
        )
        tick_sent, tick_prefill_s = 0, 0.0
        return observation

    def latency_percentiles(now: float) -> tuple[float, float, float, float]:
        """TTFT p95, p99 and queue-time p95, p99 of the last window's first tokens (NaN: none)."""
        while first_tokens and first_tokens[0][0] <= now:
            recent_ttft.append(heappop(first_tokens))
        while recent_ttft and recent_ttft[0][0] <= now - LATENCY_WINDOW_S:
            recent_ttft.popleft()
        if not recent_ttft:
            return math.nan, math.nan, math.nan, math.nan
        p95, p99 = np.percentile([latency for _, latency, _ in recent_ttft], (95, 99))
        q95, q99 = np.percentile([queued for _, _, queued in recent_ttft], (95, 99))
        return float(p95), float(p99), float(q95), float(q99)

    def control(now: float, next_tick: float) -> float:
        """Ready transitions and policy ticks due at `now`; returns the next tick time."""
        promoted = replicas.promote_due(now)
        for replica_id in promoted:
            router.make_routable(replica_id)
        if promoted:
            while router_queue:
                k, sent, attempt = router_queue.popleft()
                if sent + timeout <= now:
                    fail(k, max(now, sent + timeout), attempt, TIMED_OUT)
                else:
                    serve(k, now, sent, attempt)
        if now >= next_tick:
            observation = observe(now)
            samples.append(observation)
            desired = clamp(policy.decide(now, observation, policy_state))
            for replica_id in replicas.scale_to(desired, now, last_end.__getitem__):
                router.stop_routing(replica_id)
            while len(outstanding) < len(replicas.replicas):
                serving.add(slots)
            next_tick += tick_s
        return next_tick

    next_tick = tick_s
    next_ready = replicas.next_ready_at()
    i = 0
    span = trace.span_s
    report_every = 1 << 14
    last_report = time.perf_counter()
    next_control = min(next_tick, next_ready)
    while True:
        now = origin[i] if i < total else math.inf
        from_retry = bool(retry_heap) and retry_heap[0][0] < now
        if from_retry:
            now = retry_heap[0][0]
        if now == math.inf:
            break
        if next_control <= now:
            next_tick = control(next_control, next_tick)
            next_ready = replicas.next_ready_at()
            next_control = min(next_tick, next_ready)
            continue
        tick_sent += 1
        if from_retry:
            _, k, attempt = heappop(retry_heap)
            serve(k, now, now, attempt)
        else:
            serve(i, now, now, 0)
            i += 1
            if progress is not None and not i % report_every and time.perf_counter() - last_report > 2.0:
                progress(now, span)
                last_report = time.perf_counter()

    # Let the pool finish (and the policy scale down) before closing the books.
    end_s = max([span, *last_end])
    while True:
        next_control = min(next_tick, next_ready)
        if next_control == math.inf or next_control > span + TAIL_LIMIT_S:
            break
        if next_control > end_s and not router_queue:
            break
        next_tick = control(next_control, next_tick)
        next_ready = replicas.next_ready_at()
        end_s = max([end_s, *last_end])
    for k, _, _ in router_queue:
        outcome[k] = TIMED_OUT  # no replica ever became ready for it

    return _result(policy.name, config, total, np.array(outcome, dtype=np.int8), np.array(ttft), np.array(e2e),
                   retries, replicas, end_s, samples, started, trace.arrival_s)


def _result(
    policy_name: str,
    config: SimConfig,
    total: int,
    outcome: np.ndarray,
    ttft: np.ndarray,
    e2e: np.ndarray,
    retries: int,
    replicas: ReplicaSet,
    end_s: float,
    samples: list[Observation],
    started: float,
    arrival_s: np.ndarray,
) -> SimResult:
    scored = arrival_s >= config.warmup_s  # the warm-up is seen by the policy, not scored
    outcome, ttft, e2e, arrival_s = outcome[scored], ttft[scored], e2e[scored], arrival_s[scored]
    total = len(outcome)
    served = outcome == SERVED
    met = served & (np.nan_to_num(ttft, nan=np.inf) <= config.slo_ttft_s)
    within_slo = int(np.count_nonzero(met))
    missed = np.bincount((arrival_s[~met] // 60).astype(np.int64)) if total else np.zeros(0, np.int64)
    return SimResult(
        policy=policy_name,
        mode="request",
        requests=total,
        served=int(served.sum()),
        rejected=int(np.count_nonzero(outcome == REJECTED)),
        timed_out=int(np.count_nonzero(outcome == TIMED_OUT)),
        retries=retries,
        slo_attainment=round(within_slo / total, 4) if total else 1.0,
        ttft_ms=Percentiles.of(ttft[served]),
        e2e_ms=Percentiles.of(e2e[served]),
        e2e_mean_s=float(np.mean(e2e[served])) if served.any() else float("nan"),
        wall_s=round(time.perf_counter() - started, 3),
        samples=samples,
        misses_by_minute={int(minute): int(count) for minute, count in enumerate(missed) if count},
        **pool_costs(replicas, config, end_s),  # type: ignore[arg-type]
    )
