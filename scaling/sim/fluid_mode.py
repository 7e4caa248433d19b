"""Fluid mode: fixed time steps of aggregated arrivals and service, for days and weeks of traffic.

Same lifecycle, policies and observations as request mode; the pool is one pooled prefill backlog
(GPU-seconds of prompt work) served by the ready replicas, feeding a decode stage limited by
batch slots. A step's arrivals all see the step's mean backlog; their TTFTs spread with the
workload's prompt-length distribution, which is how SLO attainment is scored.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from scaling.sim.config import SimConfig, effective_slots
from scaling.sim.lifecycle import ReplicaSet
from scaling.sim.policies.base import Observation, Policy
from scaling.sim.profiles import inter_token_seconds
from scaling.sim.request_mode import ProgressFn
from scaling.sim.result import Percentiles, SimResult, pool_costs
from scaling.sim.workload import Workload

TTFT_POINTS = 8  # prompt-length quantiles per step used for latency percentiles


@dataclass
class _Steps:
    """Per-step outcomes, filled in the loop and scored afterwards with numpy."""

    served_first_try: list[float]  # requests on their first attempt that were served
    backlog_wait_s: list[float]  # wait behind the fluid backlog
    load: list[float]  # prefill work arriving (smoothed) / prefill capacity
    service_s: list[float]  # mean prefill time of the step's requests
    itl_s: list[float]

    def add(self, served: float, wait: float, load: float, service: float, itl: float) -> None:
        self.served_first_try.append(served)
        self.backlog_wait_s.append(wait)
        self.load.append(load)
        self.service_s.append(service)
        self.itl_s.append(itl)


def mean_backlog(start: float, slope: float, step_s: float) -> float:
    """Time-average of max(0, start + slope * s) for s in [0, step_s]."""
    if slope >= 0 or start + slope * step_s >= 0:
        return max(0.0, start + slope * step_s / 2)
    return start * (start / -slope) / (2 * step_s)


LOAD_SMOOTHING_S = 30.0
RANDOM_LOAD_CAP = 0.9  # above it the fluid backlog term carries the queueing


def random_wait(load: np.ndarray, service_s: np.ndarray, service_scv: float) -> tuple[np.ndarray, np.ndarray]:
    """Waits caused by randomness inside a step, which the fluid backlog does not see.

    Each replica keeps its own FIFO queue, so this is the M/G/1 wait of one replica: it waits
    with probability rho, then for an exponential time with mean E[S] (1 + cs^2) / 2 / (1 - rho)
    (their product is Pollaczek-Khinchine's mean wait). Returns (probability, conditional mean).
    """
    rho = np.clip(load, 0.0, RANDOM_LOAD_CAP)
    return rho, service_s * (1 + service_scv) / 2 / (1 - rho)


def run_fluid_mode(workload: Workload, config: SimConfig, policy: Policy, progress: ProgressFn | None = None) -> SimResult:
    started = time.perf_counter()
    profile, client = config.profile, config.client
    step_s = config.fluid_step_s
    bins = workload.bins(step_s)
    prompt_sample, output_sample = workload.token_sample()
    slots = effective_slots(profile, float(np.mean(prompt_sample) + np.mean(output_sample)))
    itl_by_batch = [inter_token_seconds(profile, b) for b in range(slots + 1)]
    mean_prefill_s = float(np.mean(prompt_sample)) / profile.prefill_tokens_per_s
    mean_output = float(np.mean(output_sample))
    timeout = client.timeout_s if client.timeout_s is not None else math.inf
    tick_s = config.tick_s or policy.tick_s
    n_steps = len(bins.requests)
    horizon = n_steps + int(math.ceil((timeout if timeout < math.inf else 0) * (client.max_retries + 1) / step_s)) + 1

    replicas = ReplicaSet(config.cold_start, np.random.default_rng(config.seed))
    policy_state: Any = policy.new_state()

    def clamp(desired: int) -> int:
        return max(config.min_replicas, min(config.max_replicas, int(desired)))

    replicas.start_warm(clamp(policy.decide(0.0, Observation(0.0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0), policy_state)))

    requests_in = bins.requests.tolist()
    work_in = (bins.prompt_tokens / profile.prefill_tokens_per_s).tolist()
    output_in = bins.output_tokens.tolist()
    decode_done = [0.0] * (horizon + 2)  # sequences finishing decode at each step
    retry_in: dict[int, list[tuple[int, float]]] = {}  # step -> [(attempt, requests)]
    leaves_queue = [0.0] * (horizon + 2)  # requests that gave up waiting, leaving at each step
    steps = _Steps([], [], [], [], [])
    backlog_s = waiting = decoding = prefilling = 0.0
    abandoning = 0.0  # requests in the queue that will give up (their work is not in backlog_s)
    rejected = timed_out = retries = 0.0
    tick_sent = tick_work = 0.0
    next_tick, next_ready = tick_s, replicas.next_ready_at()
    samples: list[Observation] = []
    smoothed_work = 0.0  # prefill work per step, averaged over LOAD_SMOOTHING_S: the load the random waits see
    smoothing = min(1.0, step_s / LOAD_SMOOTHING_S)
    last_report = time.perf_counter()

    t = 0
    while t < n_steps or backlog_s > 1e-9 or decoding > 1e-9 or retry_in:
        if t >= horizon:
            break
        now = t * step_s
        if next_ready <= now:
            replicas.promote_due(now)
            next_ready = replicas.next_ready_at()
        ready = replicas.ready_count
        abandoning -= leaves_queue[t]
        waiting -= leaves_queue[t]
        decoding -= decode_done[t]
        if now >= next_tick:
            busy = max(tick_work / (ready * tick_s), decoding / (ready * slots)) if ready else 0.0
            observation = Observation(
                now, ready, len(replicas.starting), replicas.desired_count, max(0.0, waiting),
                max(0.0, decoding) + prefilling, min(1.0, busy), tick_sent / tick_s,
            )
            samples.append(observation)
            tail_s = mean_output * itl_by_batch[min(slots, int(decoding / ready) + 1)] if ready else 0.0
            replicas.scale_to(clamp(policy.decide(now, observation, policy_state)), now, lambda _: now + tail_s)
            next_ready = replicas.next_ready_at()
            ready = replicas.ready_count
            tick_sent = tick_work = 0.0
            next_tick += tick_s

        cohorts = [(0, requests_in[t], work_in[t], output_in[t])] if t < n_steps else []
        for attempt, count in retry_in.pop(t, ()):
            cohorts.append((attempt, count, count * mean_prefill_s, count * mean_output))
        arriving = sum(c[1] for c in cohorts)
        if not arriving and backlog_s <= 0.0 and decoding <= 0.0:
            steps.add(0.0, 0.0, 0.0, 0.0, 0.0)
            t += 1
            continue
        work = sum(c[2] for c in cohorts)
        if config.queue_limit is not None and waiting + arriving > config.queue_limit:
            keep = max(0.0, config.queue_limit - waiting) / arriving
            for attempt, count, _, _ in cohorts:
                retries_here = _schedule_retries(retry_in, client, t, step_s, attempt, count * (1 - keep))
                retries += retries_here
                rejected += count * (1 - keep) - retries_here
            cohorts = [(a, c * keep, w * keep, o * keep) for a, c, w, o in cohorts]
            arriving, work = arriving * keep, work * keep
        tick_sent += arriving
        tick_work += work

        capacity = ready * step_s
        if ready:
            wait = mean_backlog(backlog_s, work / step_s - ready, step_s) / ready
        else:
            wait = next_ready - now + backlog_s
        itl = itl_by_batch[min(slots, int(decoding / ready) + 1)] if ready else itl_by_batch[1]
        expected_e2e = wait + mean_prefill_s + itl * mean_output
        waiting += arriving
        if expected_e2e > timeout:  # everyone arriving now gives up; those still queued never use the GPU
            give_up_step = t + max(1, int(timeout / step_s))
            if wait > timeout:
                abandoning += arriving
                leaves_queue[min(give_up_step, horizon)] += arriving
                work = 0.0
            for attempt, count, _, _ in cohorts:
                retries_here = _schedule_retries(retry_in, client, give_up_step, step_s, attempt, count)
                retries += retries_here
                timed_out += count - retries_here
            served_first_try = 0.0
        else:
            served_first_try = cohorts[0][1] if cohorts and cohorts[0][0] == 0 else 0.0
        smoothed_work += (work - smoothed_work) * smoothing
        steps.add(served_first_try, wait, smoothed_work / capacity if ready else 0.0, work / arriving if arriving else 0.0, itl)

        backlog_s += work
        served_work = min(backlog_s, capacity)
        queued = max(waiting - abandoning, 0.0)
        started_n = queued * (served_work / backlog_s) if backlog_s > 0 else queued
        free_slots = max(0.0, ready * slots - decoding)
        if started_n > free_slots:  # batch slots, not prefill, are the limit this step
            served_work *= free_slots / started_n
            started_n = free_slots
        backlog_s -= served_work
        waiting -= started_n
        decoding += started_n
        prefilling = served_work / step_s  # busy prefill servers, i.e. requests in their prefill
        if started_n > 0:  # they leave decode after their decode time, split over two steps
            decode_steps = itl * mean_output / step_s
            finish, late_share = t + 1 + int(decode_steps), decode_steps - int(decode_steps)
            decode_done[min(finish, horizon)] += started_n * (1 - late_share)
            decode_done[min(finish + 1, horizon)] += started_n * late_share
        if progress is not None and not t % 65536 and time.perf_counter() - last_report > 2.0:
            progress(now, n_steps * step_s)
            last_report = time.perf_counter()
        t += 1

    end_s = max(t, n_steps) * step_s
    return _score(policy.name, config, workload, steps, prompt_sample, output_sample, timed_out, rejected, retries,
                  replicas, end_s, samples, started)


def _schedule_retries(
    retry_in: dict[int, list[tuple[int, float]]], client: Any, at_step: int, step_s: float, attempt: int, count: float
) -> float:
    """Queue the next attempt of `count` failed requests; returns how many will retry."""
    if attempt >= client.max_retries or count <= 0:
        return 0.0
    delay_steps = max(1, int(round(client.backoff_s(attempt + 1) / step_s)))
    retry_in.setdefault(at_step + delay_steps, []).append((attempt + 1, count))
    return count


def _score(
    policy_name: str,
    config: SimConfig,
    workload: Workload,
    steps: _Steps,
    prompt_sample: np.ndarray,
    output_sample: np.ndarray,
    timed_out: float,
    rejected: float,
    retries: float,
    replicas: ReplicaSet,
    end_s: float,
    samples: list[Observation],
    started: float,
) -> SimResult:
    profile = config.profile
    offered = workload.expected_requests
    first_try = np.array(steps.served_first_try)
    active = first_try > 0
    backlog_wait = np.array(steps.backlog_wait_s)[active]
    itl = np.array(steps.itl_s)[active]
    scv = float(np.var(prompt_sample) / np.mean(prompt_sample) ** 2)
    probability, mean = random_wait(np.array(steps.load)[active], np.array(steps.service_s)[active], scv)
    # Each step's requests: TTFT_POINTS quantiles of the random wait, each paired with a
    # prompt-length quantile (a fixed shuffle, so the two are sampled independently).
    levels = (np.arange(TTFT_POINTS) + 0.5) / TTFT_POINTS
    tail = np.clip((levels[None, :] - (1 - probability[:, None])) / np.maximum(probability[:, None], 1e-12), 0, None)
    random_part = np.where(tail > 0, -mean[:, None] * np.log(np.clip(1 - tail, 1e-12, 1)), 0.0)
    wait = backlog_wait[:, None] + random_part + itl[:, None]

    rate = profile.prefill_tokens_per_s
    sorted_prompt = np.sort(prompt_sample)
    share_within = np.searchsorted(sorted_prompt, (config.slo_ttft_s - wait) * rate, side="right") / len(sorted_prompt)
    within_slo = float(np.sum(first_try[active, None] / TTFT_POINTS * share_within))

    shuffle = np.random.default_rng(0).permutation(TTFT_POINTS)
    ttft_points = wait + np.quantile(prompt_sample, levels)[shuffle][None, :] / rate
    output_points = np.quantile(output_sample, levels)[np.roll(shuffle, 1)]
    e2e_points = ttft_points + itl[:, None] * np.maximum(output_points[None, :] - 1, 0)
    weights = np.repeat(first_try[active] / TTFT_POINTS, TTFT_POINTS)
    served = max(0.0, offered - timed_out - rejected)
    return SimResult(
        policy=policy_name,
        mode="fluid",
        requests=int(round(offered)),
        served=int(round(served)),
        rejected=int(round(rejected)),
        timed_out=int(round(timed_out)),
        retries=int(round(retries)),
        slo_attainment=round(min(1.0, within_slo / offered), 4) if offered else 1.0,
        ttft_ms=Percentiles.of(ttft_points.ravel(), weights),
        e2e_ms=Percentiles.of(e2e_points.ravel(), weights),
        wall_s=round(time.perf_counter() - started, 3),
        samples=samples,
        **pool_costs(replicas, config, end_s),  # type: ignore[arg-type]
    )
