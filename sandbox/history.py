"""History backfill: the sandbox's past hours, so charts and forecasts have data from the start.

The scenario's traffic for the last `hours` is split between the pools by route weight and replayed
offline through each pool's emulated engine (one replica, a `ManualClock`, no HTTP). Every
`step_s` the engine's metrics are written as OpenMetrics samples with timestamps, which
`promtool tsdb create-blocks-from openmetrics` turns into TSDB blocks before Prometheus starts.
Series carry the same labels as live scrapes (job, instance, namespace, pod); each pool's replicas
are summed into one pod, `<deployment>-history-00000` (named as a Deployment's pods are).
"""
from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from scaling.sim.profiles import inter_token_seconds, prefill_seconds

from sandbox.clock import ManualClock
from sandbox.engine import Engine
from sandbox.kube.cluster import PoolSpec
from sandbox.traffic import TraceRequest
from sandbox.vllm_metrics import FINISHED_REASONS, Histogram, HistogramSpec, VllmMetrics

GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success")
HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
              "vllm:request_queue_time_seconds", "vllm:inter_token_latency_seconds")


@dataclass
class _ReplicaReplay:
    clock: ManualClock
    metrics: VllmMetrics
    engine: Engine

    @classmethod
    def of(cls, spec: PoolSpec) -> _ReplicaReplay:
        clock = ManualClock()
        metrics = VllmMetrics(spec.served_model, 32768, spec.profile.kv_cache_tokens)
        return cls(clock, metrics, Engine(spec.profile, metrics, clock))

    def advance(self, t: float) -> None:
        self.clock.t = t
        self.engine.advance_to(t)


@dataclass
class _PoolReplay:
    """A pool's replicas, written as one series set (pod `<deployment>-history-00000`): sums by
    model or Deployment come out right, and the backfill stays small."""

    spec: PoolSpec
    replicas: list[_ReplicaReplay]

    @property
    def labels(self) -> str:
        spec = self.spec
        return (f'engine="0",instance="history-{spec.name}",job="vllm",'
                f'model_name="{spec.served_model}",namespace="{spec.namespace}",pod="{spec.name}-history-00000"')

    def least_busy(self) -> _ReplicaReplay:
        return min(self.replicas, key=lambda replica: replica.engine.in_flight)


@dataclass
class _Families:
    """OpenMetrics lines per family; families must not interleave, so they are kept apart."""

    lines: dict[str, list[str]] = field(default_factory=dict)

    def add(self, family: str, line: str) -> None:
        self.lines.setdefault(family, []).append(line)

    def sample(self, pool: _PoolReplay, timestamp: float) -> None:
        metrics = [replica.metrics for replica in pool.replicas]
        labels, at = pool.labels, f"{timestamp:.3f}"
        kv_capacity = sum(m.kv_cache_tokens for m in metrics) or 1
        values = {"vllm:num_requests_running": sum(m.running for m in metrics),
                  "vllm:num_requests_waiting": sum(m.waiting for m in metrics),
                  "vllm:kv_cache_usage_perc": sum(m.kv_cache_usage * m.kv_cache_tokens for m in metrics) / kv_capacity}
        for name in GAUGES:
            self.add(name, f"{name}{{{labels}}} {values[name]} {at}")
        prompt_tokens = sum(m.prompt_tokens for m in metrics)
        self.add("vllm:prompt_tokens", f"vllm:prompt_tokens_total{{{labels}}} {prompt_tokens} {at}")
        self.add("vllm:generation_tokens",
                 f"vllm:generation_tokens_total{{{labels}}} {sum(m.generation_tokens for m in metrics)} {at}")
        for reason in FINISHED_REASONS:
            self.add("vllm:request_success", f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} '
                                             f"{sum(m.success[reason] for m in metrics)} {at}")
        for spec in metrics[0].specs:
            if spec.name in HISTOGRAMS:
                self._histogram(spec, [m.histograms[spec.name] for m in metrics], labels, at)

    def _histogram(self, spec: HistogramSpec, histograms: list[Histogram], labels: str, at: str) -> None:
        cumulative = 0
        for index, bound in enumerate((*spec.buckets, float("inf"))):
            cumulative += sum(h.counts[index] for h in histograms)
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            self.add(spec.name, f'{spec.name}_bucket{{{labels},le="{le}"}} {cumulative} {at}')
        self.add(spec.name, f"{spec.name}_count{{{labels}}} {sum(h.count for h in histograms)} {at}")
        self.add(spec.name, f"{spec.name}_sum{{{labels}}} {sum(h.total for h in histograms)} {at}")

    def render(self) -> str:
        kinds = {**{name: "gauge" for name in GAUGES}, **{name: "counter" for name in COUNTERS},
                 **{name: "histogram" for name in HISTOGRAMS}}
        out: list[str] = []
        for family, lines in self.lines.items():
            out.append(f"# TYPE {family} {kinds[family]}")
            out.extend(lines)
        out.append("# EOF")
        return "\n".join(out) + "\n"


def replicas_for_peak(spec: PoolSpec, requests: list[TraceRequest], share: float, utilisation: float = 0.7) -> int:
    """Replicas that keep the busiest minute at `utilisation` of the pool's batch slots."""
    if not requests:
        return 1
    per_minute = Counter(int(r.t_s // 60) for r in requests)
    peak_rps = max(per_minute.values()) * share / 60.0
    prompt = sum(r.prompt_tokens for r in requests) / len(requests)
    output = sum(r.output_tokens for r in requests) / len(requests)
    slots = spec.profile.max_num_seqs
    service_s = prefill_seconds(spec.profile, int(prompt), slots) + output * inter_token_seconds(spec.profile, slots)
    return max(1, math.ceil(peak_rps * service_s / (utilisation * slots)))


def history_openmetrics(pools: list[tuple[PoolSpec, int]], trace: Iterable[TraceRequest], hours: float,
                        end_unix: float, step_s: float = 15.0, seed: int = 0) -> str:
    """OpenMetrics text for the `hours` before `end_unix`, from the first `hours` of `trace`.

    Each pool gets its route-weight share of the traffic and, so that the history shows demand
    rather than a pool drowning in it, enough replicas for its busiest minute (`replicas_for_peak`).
    """
    duration = hours * 3600.0
    requests = list(itertools.takewhile(lambda r: r.t_s < duration, trace))
    weighted = [(spec, weight) for spec, weight in pools if weight > 0] or [(spec, 1) for spec, _ in pools]
    total = sum(weight for _, weight in weighted)
    replays = [_PoolReplay(spec, [_ReplicaReplay.of(spec)
                                  for _ in range(replicas_for_peak(spec, requests, weight / total))])
               for spec, weight in weighted]
    chooser = random.Random(seed)
    start_unix = end_unix - duration
    families = _Families()
    next_sample = 0.0

    def sample_until(t: float) -> None:
        nonlocal next_sample
        while next_sample <= t and next_sample < duration:
            for pool in replays:
                for replica in pool.replicas:
                    replica.advance(next_sample)
                families.sample(pool, start_unix + next_sample)
            next_sample += step_s

    for request in requests:
        sample_until(request.t_s)
        replica = chooser.choices(replays, weights=[weight for _, weight in weighted])[0].least_busy()
        replica.advance(request.t_s)
        replica.engine.submit(request.prompt_tokens, max(1, request.output_tokens))
    sample_until(duration)
    return families.render()


def rate_openmetrics(pools: list[tuple[PoolSpec, int]], rate_at: Callable[[float], float], hours: float,
                     end_unix: float, step_s: float) -> str:
    """OpenMetrics text for the `hours` before `end_unix` with no replay: each pool's share (by route weight)
    of `rate_at(t)` requests per wall second (`t` in seconds from `end_unix`, negative) counted into
    `vllm:request_success_total`, with idle gauges. Enough for the loop's request-rate history (the
    forecasts), in milliseconds: what the story's history needs at any speed, where a replay through the
    engine would have to emulate `speed` times the requests."""
    weighted = [(spec, weight) for spec, weight in pools if weight > 0] or [(spec, 1) for spec, _ in pools]
    total = sum(weight for _, weight in weighted)
    families = _Families()
    steps = int(hours * 3600.0 // step_s)
    counts = [0.0] * len(weighted)
    for index in range(steps + 1):
        t = -hours * 3600.0 + index * step_s
        at = f"{end_unix + t:.3f}"
        for number, (spec, weight) in enumerate(weighted):
            labels = _PoolReplay(spec, []).labels
            if index:
                counts[number] += rate_at(t - step_s / 2) * step_s * weight / total
            families.add("vllm:num_requests_running", f"vllm:num_requests_running{{{labels}}} 0 {at}")
            families.add("vllm:num_requests_waiting", f"vllm:num_requests_waiting{{{labels}}} 0 {at}")
            families.add("vllm:request_success", f'vllm:request_success_total{{{labels},finished_reason="length"}} '
                                                 f"{counts[number]:.3f} {at}")
    return families.render()
