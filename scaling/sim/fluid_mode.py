"""Fluid mode: fixed time steps of aggregated arrivals and service, for days and weeks of traffic.

Same lifecycle, policies and observations as request mode; the pool is one pooled prefill backlog
(GPU-seconds of prompt work) served by the ready replicas, feeding a decode stage limited by
batch slots. A step's arrivals all see the step's mean backlog; their TTFTs spread with the
workload's prompt-length distribution, which is how SLO attainment is scored.
"""
from __future__ import annotations

import copy
import math
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scaling.sim.config import SimConfig, effective_slots
from scaling.sim.lifecycle import ReplicaSet
from scaling.sim.policies.base import LATENCY_WINDOW_S, Observation, Policy
from scaling.sim.profiles import inter_token_seconds
from scaling.sim.request_mode import ProgressFn
from scaling.sim.result import Percentiles, SimResult, paired_quantiles, pool_costs, quantile_buckets
from scaling.sim.workload import Workload

TTFT_POINTS = 8  # prompt-length quantiles per step used for latency percentiles
_LEVELS = (np.arange(TTFT_POINTS) + 0.5) / TTFT_POINTS
# Wait quantiles pair with prompt-length quantiles in a fixed shuffle, so the two are sampled independently.
_PAIRING = np.random.default_rng(0).permutation(TTFT_POINTS)


@dataclass
class _Steps:
    """Per-step outcomes, filled in the loop and scored afterwards with numpy."""

    served_first_try: Sequence[float]  # requests on their first attempt that were served
    backlog_wait_s: Sequence[float]  # wait behind the fluid backlog
    load: Sequence[float]  # prefill work arriving (smoothed) / prefill capacity
    service_s: Sequence[float]  # mean prefill time of the step's requests
    itl_s: Sequence[float]
    variability: Sequence[float]  # (arrival SCV + service SCV) / 2: Kingman's factor for the random wait



LOAD_SMOOTHING_S = 30.0
RANDOM_LOAD_CAP = 0.9  # above it the fluid backlog term carries the queueing


def random_wait(load: np.ndarray, service_s: np.ndarray, variability: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Waits caused by randomness inside a step, which the fluid backlog does not see.

    Each replica keeps its own FIFO queue, so this is the G/G/1 wait of one replica: it waits
    with probability rho, then for an exponential time with mean E[S] (ca^2 + cs^2) / 2 / (1 - rho)
    (`variability` is (ca^2 + cs^2) / 2; their product is Kingman's mean wait, Pollaczek-Khinchine's
    for Poisson arrivals, ca = 1). Bursty windows (ServeGen's `rate_weighted_mean_cv` > 1) wait
    longer at the same load. Returns (probability, conditional mean).
    """
    rho = np.minimum(np.maximum(load, 0.0), RANDOM_LOAD_CAP)  # np.clip, without its wrapper's cost every tick
    return rho, service_s * variability / (1 - rho)


def _same_input_until(requests: np.ndarray, prompt_tokens: np.ndarray, arrival_scv: np.ndarray | None = None) -> list[int]:
    """For each step, the first later step whose input differs from it."""
    differs = (np.diff(requests) != 0) | (np.diff(prompt_tokens) != 0)
    if arrival_scv is not None:
        differs |= np.diff(arrival_scv) != 0
    changes = np.flatnonzero(differs) + 1
    changes = np.append(changes, len(requests))
    return changes[np.searchsorted(changes, np.arange(len(requests)), side="right")].tolist()


# The run's state that changes step by step: what a fork copies (the per-step arrays, then the scalars).
_FORKED_LISTS = ("decode_done", "leaves_queue", "served_first_try", "backlog_wait", "load", "service", "itl_at",
                 "variability")
_FORKED_SCALARS = ("backlog_s", "waiting", "decoding", "prefilling", "abandoning", "rejected", "timed_out", "retries",
                   "tick_sent", "tick_work", "next_tick", "next_ready", "smoothed_work", "ready", "run_started",
                   "run_itl", "run_top", "run_len", "next_control_step", "at_warm_end", "t")


@dataclass
class Fork:
    """A shadow policy's replay from the tick where it first asked for other replicas than the run's
    policy (`run_fluid_with_shadows`): until then it observed what the run observed, so its replay
    is the run's up to that tick. Holds a copy of the run's state at that tick (taken after the
    observation, at the decision), the shadow's decision there and its state after it;
    `resume_fluid_mode` replays the rest, once (it carries on in the fork's own copies)."""

    policy: Policy
    policy_state: Any
    target: int
    # The run's variables by name (`_FORKED_LISTS`, `_FORKED_SCALARS`, retry_in, replicas, samples, window);
    # None where the shadow differed at its first decision, before the pool started: a replay from the start.
    state: dict[str, Any] | None


def run_fluid_mode(workload: Workload, config: SimConfig, policy: Policy, progress: ProgressFn | None = None,
                   misses_by_minute: bool = False) -> SimResult:
    """Replay `workload`; `misses_by_minute` also scores each minute (the warm-pool report's worst minute)."""
    return _run(workload, config, policy, progress, misses_by_minute)[0]


def run_fluid_with_shadows(workload: Workload, config: SimConfig, policy: Policy, shadows: Sequence[Policy],
                           progress: ProgressFn | None = None, misses_by_minute: bool = False
                           ) -> tuple[SimResult, list[Fork | None]]:
    """Replay `workload` under `policy`, each shadow policy deciding alongside it on the same observations.

    A shadow that asks for the same replicas at every tick replays to the same result, to the bit (the
    pool, its cold starts and the traffic are the same; only decisions differ): its entry is None. One
    that asks for other replicas at some tick gets a `Fork` there (its entry), to finish with
    `resume_fluid_mode`. Deciding costs less than half of a replay, so a warm-pool report replays the
    stretch its sizes share once, and a size whose floor never binds is not replayed at all."""
    return _run(workload, config, policy, progress, misses_by_minute, shadows)


def resume_fluid_mode(workload: Workload, config: SimConfig, fork: Fork, progress: ProgressFn | None = None,
                      misses_by_minute: bool = False) -> SimResult:
    """The rest of a forked replay (`run_fluid_with_shadows`): the same result as replaying its policy from the start."""
    return _run(workload, config, fork.policy, progress, misses_by_minute, fork=fork)[0]


def _run(workload: Workload, config: SimConfig, policy: Policy, progress: ProgressFn | None = None,
         misses_by_minute: bool = False, shadows: Sequence[Policy] = (), fork: Fork | None = None
         ) -> tuple[SimResult, list[Fork | None]]:
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
    policy_state: Any = policy.new_state() if fork is None else fork.policy_state
    shadowing = [(number, shadow, shadow.new_state()) for number, shadow in enumerate(shadows)]
    forks: list[Fork | None] = [None] * len(shadows)

    def clamp(desired: int) -> int:
        return max(config.min_replicas, min(config.max_replicas, int(desired)))

    if fork is None:
        start = Observation(0.0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0)
        first = policy.decide(0.0, start, policy_state)
        for number, shadow, state in shadowing:
            own = shadow.decide(0.0, start, state)
            if own != first:
                forks[number] = Fork(shadow, state, own, None)
        shadowing = [entry for entry in shadowing if forks[entry[0]] is None]
        replicas.start_warm(clamp(first))
    elif fork.state is None:
        replicas.start_warm(clamp(fork.target))

    requests_in = bins.requests.tolist() + [0.0] * (horizon - n_steps + 2)
    work_in = (bins.prompt_tokens / profile.prefill_tokens_per_s).tolist() + [0.0] * (horizon - n_steps + 2)
    # Per-step numbers are kept in arrays of doubles, not lists of floats: the same values, a quarter of
    # the memory, no float object made per write, and numpy reads them without a copy.
    decode_done = array("d", bytes(8 * (horizon + 2)))  # sequences finishing decode at each step
    retry_in: dict[int, list[tuple[int, float]]] = {}  # step -> [(attempt, requests)]
    leaves_queue = array("d", bytes(8 * (horizon + 2)))  # requests that gave up waiting, leaving at each step
    clients_act = timeout < math.inf or config.queue_limit is not None
    # Per-step outcomes, preallocated: the loop below runs a million times for two weeks at 1 s.
    served_first_try, backlog_wait, load, service, itl_at = (array("d", bytes(8 * (horizon + 1))) for _ in range(5))
    backlog_s = waiting = decoding = prefilling = 0.0
    abandoning = 0.0  # requests in the queue that will give up (their work is not in backlog_s)
    rejected = timed_out = retries = 0.0
    tick_sent = tick_work = 0.0
    next_tick, next_ready = tick_s, replicas.next_ready_at()
    samples: list[Observation] = []
    smoothed_work = 0.0  # prefill work per step, averaged over LOAD_SMOOTHING_S: the load the random waits see
    smoothing = min(1.0, step_s / LOAD_SMOOTHING_S)
    # TTFT percentiles of the last minute's steps, scored like the whole run (only for a policy that reads them).
    observes_latency = bool(getattr(policy, "observes_latency", False))
    window_steps = max(1, int(round(LATENCY_WINDOW_S / step_s)))
    scv = float(np.var(prompt_sample) / np.mean(prompt_sample) ** 2)
    prompt_levels = np.quantile(prompt_sample, _LEVELS)  # once: the policy reads latency every tick
    arrival_scv = bins.arrival_scv.tolist() if bins.arrival_scv is not None else [1.0] * n_steps
    variability = array("d", [(1.0 + scv) / 2]) * (horizon + 1)  # steps past the trace carry retries only: Poisson

    def kingman(pool_scv: float, ready_now: int) -> float:
        # The router splits the pool's arrivals over the ready replicas; a stream split n ways
        # keeps 1/n of its excess burstiness per replica (thinning: c^2 = 1 + (c_pool^2 - 1) / n).
        return (1.0 + (pool_scv - 1.0) / max(ready_now, 1) + scv) / 2

    # The window's steps with first-try requests, as rows of TTFT_POINTS: the buckets of their TTFT points
    # and queue times (`quantile_buckets`), and their weights. A step's inputs are final once the loop has
    # passed it, so each step's rows are made once, by the first tick whose window holds it, and kept
    # while later windows hold it (a tick's window overlaps the last one's by three quarters).
    window = {"step": np.empty(0, dtype=np.int64), "ttft": np.empty((0, TTFT_POINTS), dtype=np.int64),
              "queue": np.empty((0, TTFT_POINTS), dtype=np.int64), "weight": np.empty((0, TTFT_POINTS)), "upto": 0}

    def window_latency(t: int) -> tuple[float, float, float, float]:
        """TTFT p95, p99 and queue-time p95, p99 of the last minute's steps (NaN: no request)."""
        lo = max(0, t - window_steps)
        kept = int(np.searchsorted(window["step"], lo))
        start = max(lo, window["upto"])
        if start < t:
            first = np.asarray(served_first_try[start:t])
            active = np.flatnonzero(first > 0)
            columns = [np.asarray(column[start:t])[active] for column in (backlog_wait, load, service, itl_at, variability)]
            waits = _waits(*columns)
            added = {"step": active + start,
                     "ttft": quantile_buckets(_ttft_points(waits, prompt_levels, profile.prefill_tokens_per_s)),
                     "queue": quantile_buckets(waits - columns[3][:, None]),
                     "weight": np.broadcast_to((first[active] / TTFT_POINTS)[:, None], waits.shape)}
            for key, rows in added.items():
                window[key] = np.concatenate((window[key][kept:], rows))
            window["upto"] = t
        elif kept:
            for key in ("step", "ttft", "queue", "weight"):
                window[key] = window[key][kept:]
        if not len(window["step"]):
            return math.nan, math.nan, math.nan, math.nan
        (p95, p99), (q95, q99) = paired_quantiles(window["ttft"].ravel(), window["queue"].ravel(),
                                                  window["weight"].ravel(), (0.95, 0.99))
        return p95, p99, q95, q99
    decode_steps_by_batch = [itl * mean_output / step_s for itl in itl_by_batch]
    ready = replicas.ready_count
    last_report = time.perf_counter()
    same_until = _same_input_until(bins.requests, bins.prompt_tokens, bins.arrival_scv)
    # A steady run: steps that started every arrival at once with the same batch latency. When the
    # next steps bring the same input, they repeat the last one exactly and are filled in at once.
    run_started = run_itl = run_top = -1.0
    run_len = 0

    next_control_step = 0
    warm_steps = min(n_steps, int(math.ceil(config.warmup_s / step_s - 1e-9)))
    at_warm_end: tuple[float, float, float] | None = None  # (timed out, rejected, retries) during the warm-up
    t = 0
    # A fork re-enters the loop at the decision it was taken at: that step's start has already run.
    resuming = fork is not None and fork.state is not None
    if resuming:
        saved = fork.state  # type: ignore[union-attr]
        (decode_done, leaves_queue, served_first_try, backlog_wait, load, service, itl_at,
         variability) = (saved[name] for name in _FORKED_LISTS)
        (backlog_s, waiting, decoding, prefilling, abandoning, rejected, timed_out, retries, tick_sent, tick_work,
         next_tick, next_ready, smoothed_work, ready, run_started, run_itl, run_top, run_len, next_control_step,
         at_warm_end, t) = (saved[name] for name in _FORKED_SCALARS)
        retry_in, replicas, samples = saved["retry_in"], saved["replicas"], saved["samples"]
        window.clear()
        window.update(saved["window"])
    while t < horizon:
        if not resuming:
            if at_warm_end is None and t >= warm_steps:
                at_warm_end = (timed_out, rejected, retries)
            if t >= n_steps and backlog_s <= 1e-9 and decoding <= 1e-9 and not retry_in:
                break
            decoding -= decode_done[t]
        if t >= next_control_step:
            now = t * step_s
            if not resuming:
                if progress is not None and time.perf_counter() - last_report > 2.0:
                    progress(now, n_steps * step_s)
                    last_report = time.perf_counter()
                if now >= next_ready:
                    replicas.promote_due(now)
                    ready = replicas.ready_count
            if now >= next_tick:
                if resuming:
                    target, resuming = fork.target, False  # type: ignore[union-attr]
                else:
                    busy = max(tick_work / (ready * tick_s), decoding / (ready * slots)) if ready else 0.0
                    ttft_p95, ttft_p99, queue_p95, queue_p99 = window_latency(t) if observes_latency else (math.nan,) * 4
                    observation = Observation(
                        now, replicas.ready_count, replicas.starting_count, replicas.desired_count, max(0.0, waiting),
                        max(0.0, decoding) + prefilling, min(1.0, busy), tick_sent / tick_s, ttft_p95, ttft_p99,
                        queue_p95, queue_p99,
                    )
                    samples.append(observation)
                    target = policy.decide(now, observation, policy_state)
                    if shadowing:
                        alike = []
                        for number, shadow, state in shadowing:
                            own = shadow.decide(now, observation, state)
                            if own == target:
                                alike.append((number, shadow, state))
                                continue
                            # This run's state as it is now, copied (`_FORKED_LISTS`, `_FORKED_SCALARS`).
                            forked: dict[str, Any] = dict(zip(_FORKED_LISTS, (
                                decode_done[:], leaves_queue[:], served_first_try[:], backlog_wait[:], load[:],
                                service[:], itl_at[:], variability[:])))
                            forked.update(zip(_FORKED_SCALARS, (
                                backlog_s, waiting, decoding, prefilling, abandoning, rejected, timed_out, retries,
                                tick_sent, tick_work, next_tick, next_ready, smoothed_work, ready, run_started,
                                run_itl, run_top, run_len, next_control_step, at_warm_end, t)))
                            forked.update(retry_in={step: list(due) for step, due in retry_in.items()},
                                          replicas=copy.deepcopy(replicas), samples=list(samples), window=dict(window))
                            forks[number] = Fork(shadow, state, own, forked)
                        shadowing = alike
                tail_s = decode_steps_by_batch[min(slots, int(decoding / ready) + 1) if ready else 1] * step_s
                replicas.scale_to(clamp(target), now, lambda _: now + tail_s)
                tick_sent = tick_work = 0.0
                next_tick += tick_s
            next_ready = replicas.next_ready_at()
            ready = replicas.ready_count
            next_control_step = math.ceil(min(next_tick, next_ready) / step_s - 1e-9)

        arriving, work = requests_in[t], work_in[t]
        if arriving == 0.0 and backlog_s <= 0.0 and decoding <= 0.0 and not retry_in:
            t += 1
            continue
        capacity = ready * step_s
        if ready:  # mean backlog over the step: work arrives at a constant rate, `ready` GPUs drain it
            slope = work / step_s - ready
            if slope >= 0 or backlog_s + slope * step_s >= 0:
                wait = backlog_s + slope * step_s / 2
                wait = wait / ready if wait > 0.0 else 0.0
            else:
                wait = backlog_s * backlog_s / (-slope) / (2 * step_s) / ready
            batch = int(decoding / ready) + 1
            itl = itl_by_batch[batch if batch < slots else slots]
        else:
            wait, itl = next_ready - t * step_s + backlog_s, itl_by_batch[1]
        top = decoding
        if (
            run_len > itl * mean_output / step_s + 2
            and arriving > 0.0 and arriving == run_started and itl == run_itl and abs(top - run_top) <= 1e-9 * (1.0 + top)
            and backlog_s <= 0.0 and wait == 0.0 and not clients_act and not retry_in
        ):
            skip = min(same_until[t], next_control_step, n_steps) - t
            if skip >= 2:
                decode_steps = itl * mean_output / step_s
                whole = int(decode_steps)
                late_share = decode_steps - whole
                end = t + skip
                for s in range(max(t, end - whole - 2), end):  # decode exits that land after the run
                    finish = s + 1 + whole if s + 2 + whole <= horizon else horizon - 1
                    if finish >= end:
                        decode_done[finish] += arriving * (1 - late_share)
                    if finish + 1 >= end:
                        decode_done[finish + 1] += arriving * late_share
                served_first_try[t:end] = array("d", [arriving]) * skip
                service[t:end] = array("d", [work / arriving]) * skip
                itl_at[t:end] = array("d", [itl]) * skip
                variability[t:end] = array("d", [kingman(arrival_scv[t], ready)]) * skip
                for s in range(t, end):
                    smoothed_work += (work - smoothed_work) * smoothing
                    load[s] = smoothed_work / capacity
                    # One step at a time, as a step that is not skipped adds them: the rate a policy
                    # observes must not depend on whether its pool's state let steps be skipped (then
                    # every pool size replaying the same arrivals observes the same rates, to the bit).
                    tick_sent += arriving
                    tick_work += work
                decoding = top + arriving
                prefilling = work / step_s
                t = end
                continue
        first_try = arriving
        if clients_act or retry_in:
            abandoning -= leaves_queue[t]
            waiting -= leaves_queue[t]
            cohorts = [(0, arriving, work)]
            for attempt, count in retry_in.pop(t, ()):
                cohorts.append((attempt, count, count * mean_prefill_s))
            arriving, work = sum(c[1] for c in cohorts), sum(c[2] for c in cohorts)
            if config.queue_limit is not None and arriving > 0 and waiting + arriving > config.queue_limit:
                keep = max(0.0, config.queue_limit - waiting) / arriving
                for attempt, count, _ in cohorts:
                    retries_here = _schedule_retries(retry_in, client, t, step_s, attempt, count * (1 - keep))
                    retries += retries_here
                    rejected += count * (1 - keep) - retries_here
                first_try, arriving, work = first_try * keep, arriving * keep, work * keep
            if wait + mean_prefill_s + itl * mean_output > timeout:
                # Everyone arriving now gives up; those still queued then never use the GPU.
                give_up_step = min(t + max(1, int(timeout / step_s)), horizon)
                if wait > timeout:
                    abandoning += arriving
                    leaves_queue[give_up_step] += arriving
                    work = 0.0
                share = arriving / max(1e-12, sum(c[1] for c in cohorts))
                for attempt, count, _ in cohorts:
                    retries_here = _schedule_retries(retry_in, client, give_up_step, step_s, attempt, count * share)
                    retries += retries_here
                    timed_out += count * share - retries_here
                first_try = 0.0
        tick_sent += arriving
        tick_work += work
        waiting += arriving
        smoothed_work += (work - smoothed_work) * smoothing
        served_first_try[t] = first_try
        backlog_wait[t] = wait
        load[t] = smoothed_work / capacity if ready else 0.0
        service[t] = work / arriving if arriving else 0.0
        itl_at[t] = itl
        if t < n_steps:
            variability[t] = kingman(arrival_scv[t], ready)

        backlog_s += work
        served_work = backlog_s if backlog_s < capacity else capacity
        queued = waiting - abandoning if waiting > abandoning else 0.0
        started_n = queued * (served_work / backlog_s) if backlog_s > 0 else queued
        free_slots = ready * slots - decoding
        if started_n > free_slots:  # batch slots, not prefill, are the limit this step
            free_slots = max(0.0, free_slots)
            served_work *= free_slots / started_n
            started_n = free_slots
        backlog_s -= served_work
        waiting -= started_n
        decoding += started_n
        prefilling = served_work / step_s  # busy prefill servers, i.e. requests in their prefill
        if started_n > 0:  # they leave decode after their decode time, split over two steps
            decode_steps = itl * mean_output / step_s
            whole = int(decode_steps)
            finish = t + 1 + whole if t + 2 + whole <= horizon else horizon - 1
            decode_done[finish] += started_n * (1 + whole - decode_steps)
            decode_done[finish + 1] += started_n * (decode_steps - whole)
        if started_n == arriving and backlog_s <= 0.0 and started_n == run_started and itl == run_itl:
            run_len = run_len + 1 if abs(top - run_top) <= 1e-9 * (1.0 + top) else 1
        else:
            run_len = 1 if started_n == arriving and backlog_s <= 0.0 else 0
            run_started, run_itl = started_n, itl
        run_top = top
        t += 1

    # The warm-up is seen by the policy, not scored: its steps, requests and failures are left out.
    warm = min(warm_steps, t)
    steps = _Steps(served_first_try[warm:t], backlog_wait[warm:t], load[warm:t], service[warm:t], itl_at[warm:t],
                   variability[warm:t])
    end_s = max(t, n_steps) * step_s
    before = at_warm_end or (timed_out, rejected, retries)
    offered = workload.expected_requests - float(np.sum(bins.requests[:warm_steps]))
    result = _score(policy.name, config, offered, steps, prompt_sample, output_sample, timed_out - before[0],
                    rejected - before[1], retries - before[2], replicas, end_s, samples, started)
    if misses_by_minute:
        result.misses_by_minute = _misses_by_minute(steps, warm, step_s, config, prompt_sample)
    return result, forks


LOAD_RESOLUTION = 1e-3  # smoothed load is rounded to this before scoring, so steady stretches merge


@dataclass
class _MergedSteps:
    served_first_try: np.ndarray
    backlog_wait_s: np.ndarray
    load: np.ndarray
    service_s: np.ndarray
    itl_s: np.ndarray
    variability: np.ndarray


def _merge_repeats(steps: _Steps) -> _MergedSteps:
    """Steps with requests, consecutive identical ones merged (their requests added up).

    Two weeks at 1 s are a million steps, but long stretches repeat the same latency inputs."""
    first_try = np.array(steps.served_first_try)
    active = first_try > 0
    columns = [
        np.array(steps.backlog_wait_s)[active],
        np.round(np.array(steps.load)[active] / LOAD_RESOLUTION) * LOAD_RESOLUTION,
        np.array(steps.service_s)[active],
        np.array(steps.itl_s)[active],
        np.array(steps.variability)[active],
    ]
    first_try = first_try[active]
    if len(first_try) == 0:
        return _MergedSteps(first_try, *columns)
    starts = np.flatnonzero(np.concatenate([[True], np.any(np.diff(np.stack(columns)) != 0, axis=0)]))
    return _MergedSteps(np.add.reduceat(first_try, starts), *(column[starts] for column in columns))


def _misses_by_minute(steps: _Steps, first_step: int, step_s: float, config: SimConfig,
                      prompt_sample: np.ndarray) -> dict[int, int]:
    """Served requests slower than the TTFT SLO, by minute of arrival from the trace start, scored
    per step as `_score` scores the run (timed-out and rejected requests are not split by minute)."""
    first_try = np.asarray(steps.served_first_try)
    active = np.flatnonzero(first_try > 0)
    if not active.size:
        return {}
    columns = (np.asarray(column)[active] for column in (steps.backlog_wait_s, steps.load, steps.service_s, steps.itl_s,
                                                         steps.variability))
    wait = _waits(*columns)
    sorted_prompt = np.sort(prompt_sample)
    within = np.searchsorted(sorted_prompt, (config.slo_ttft_s - wait) * config.profile.prefill_tokens_per_s,
                             side="right") / len(sorted_prompt)
    missed = first_try[active] * (1.0 - within.mean(axis=1))
    by_minute = np.bincount(((first_step + active) * step_s // 60).astype(np.int64), weights=missed)
    return {int(minute): int(round(count)) for minute, count in enumerate(by_minute) if count >= 0.5}


def _schedule_retries(
    retry_in: dict[int, list[tuple[int, float]]], client: Any, at_step: int, step_s: float, attempt: int, count: float
) -> float:
    """Queue the next attempt of `count` failed requests; returns how many will retry."""
    if attempt >= client.max_retries or count <= 0:
        return 0.0
    delay_steps = max(1, int(round(client.backoff_s(attempt + 1) / step_s)))
    retry_in.setdefault(at_step + delay_steps, []).append((attempt + 1, count))
    return count


def _waits(backlog_wait: np.ndarray, load: np.ndarray, service_s: np.ndarray, itl: np.ndarray,
           variability: np.ndarray) -> np.ndarray:
    """Each step's requests: TTFT_POINTS quantiles of the wait before their first token (backlog,
    random wait, one token), one row per step."""
    probability, mean = random_wait(load, service_s, variability)
    # (np.minimum and np.maximum are np.clip without its wrapper's cost: this runs every tick)
    tail = np.maximum((_LEVELS[None, :] - (1 - probability[:, None])) / np.maximum(probability[:, None], 1e-12), 0)
    random_part = np.where(tail > 0, -mean[:, None] * np.log(np.minimum(np.maximum(1 - tail, 1e-12), 1)), 0.0)
    return backlog_wait[:, None] + random_part + itl[:, None]


def _ttft_points(wait: np.ndarray, prompt_levels: np.ndarray, prefill_tokens_per_s: float) -> np.ndarray:
    """TTFT points: each wait quantile plus the prefill of the prompt-length quantile it pairs with
    (`prompt_levels`: the prompt lengths at `_LEVELS`)."""
    return wait + prompt_levels[_PAIRING][None, :] / prefill_tokens_per_s


def _score(
    policy_name: str,
    config: SimConfig,
    offered: float,
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
    steps_in = _merge_repeats(steps)
    first_try, backlog_wait, itl = steps_in.served_first_try, steps_in.backlog_wait_s, steps_in.itl_s
    wait = _waits(backlog_wait, steps_in.load, steps_in.service_s, itl, steps_in.variability)

    rate = profile.prefill_tokens_per_s
    sorted_prompt = np.sort(prompt_sample)
    share_within = np.searchsorted(sorted_prompt, (config.slo_ttft_s - wait) * rate, side="right") / len(sorted_prompt)
    within_slo = float(np.sum(first_try[:, None] / TTFT_POINTS * share_within))

    ttft_points = _ttft_points(wait, np.quantile(prompt_sample, _LEVELS), rate)
    output_points = np.quantile(output_sample, _LEVELS)[np.roll(_PAIRING, 1)]
    e2e_points = ttft_points + itl[:, None] * np.maximum(output_points[None, :] - 1, 0)
    weights = np.repeat(first_try / TTFT_POINTS, TTFT_POINTS)
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
