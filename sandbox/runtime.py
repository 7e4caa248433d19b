"""The whole sandbox in one object: fleet, Kubernetes API, route gateway, Prometheus and traffic.

`manage.py sandbox` is a thin shell around `Sandbox`; tests and the demo can use it directly:

    with Sandbox(SandboxConfig(pools=2, scenario="idle", cold_start_s=1)) as sandbox:
        print(sandbox.describe())
"""
from __future__ import annotations

import dataclasses
import re
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaling.sim.profiles import PROFILES, PoolProfile

from sandbox.fleet import Fleet
from sandbox.gateway import FallbackRouting, Gateway
from sandbox.history import history_openmetrics, rate_openmetrics
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from sandbox.prometheus import PrometheusError, PrometheusLauncher
from sandbox.replica import wait_until
from sandbox.scenarios import (BASE_RPS_PER_POOL, continued, scenario_trace, story_history_rate,
                               surge_history_rate)
from sandbox.traffic import ClientOptions, TrafficGenerator


@dataclass(frozen=True)
class SandboxConfig:
    pools: int = 2
    scenario: str = "steady"
    speed: float = 1.0
    replicas: int = 1  # per pool, at start
    cold_start_s: float | None = None  # model seconds; None: each profile's p50
    prometheus: bool = True
    scrape_interval_s: float = 5.0
    namespace: str = "sandbox"
    # Real profiles batch 256 sequences; 8 lets queues form at request rates two CPU cores can
    # emulate. Latency per token still follows the profile.
    max_num_seqs: int = 8
    traces_dir: Path | None = None
    history_hours: float = 0.0  # backfill Prometheus with this much past traffic (scenario's, replayed)
    stream: bool = False  # clients stream answers (and so record their time to first token)
    # Hold the traffic until the starting replicas are Ready, so a run starts from a serving pool
    # (as a replay does) rather than from a cold start answering 503.
    traffic_after_ready: bool = False
    # A warm fallback pool (FALLBACK_PROFILE, a smaller model) with this many replicas, on the same route at
    # weight 0: it takes only what a fallback policy diverts, and adds no traffic of its own (0: none).
    fallback_replicas: int = 0
    # The gateway spills a request over to the fallback pool, at any weights, when the primary would start
    # it more than this many model seconds late (sandbox/gateway.py); None: never.
    spill_after_s: float | None = None
    # With `history_hours`, backfill request rates alone: the base load and, a day before the scenario's
    # surge, a 30-minute peak of this many times it (scenarios.surge_history_rate); 0: the scenario's own
    # traffic, replayed through the engines.
    history_peak_factor: float = 0.0


CLIENT_TIMEOUT_S = 120.0  # model seconds a client waits for an answer


def client_timeout_s(speed: float) -> float:
    """The clients' timeout in wall seconds (never under 5 s, so Python's own overhead cannot trip it)."""
    return max(5.0, CLIENT_TIMEOUT_S / speed)


def _dns_label(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:50]


FALLBACK_PROFILE = "llama-3.2-1b-l4"


def _scaled(profile: PoolProfile, config: SandboxConfig) -> PoolProfile:
    return dataclasses.replace(profile, max_num_seqs=min(profile.max_num_seqs, config.max_num_seqs),
                               kv_cache_tokens=min(profile.kv_cache_tokens, 200_000))


def pool_specs(config: SandboxConfig) -> list[PoolSpec]:
    """One pool per profile, cycling through the simulator's profiles; weights split the route evenly.
    With `fallback_replicas`, the fallback pool comes last (weight 0, kept at least that many replicas)."""
    profiles = list(PROFILES.values())
    specs = []
    for index in range(config.pools):
        profile: PoolProfile = profiles[index % len(profiles)]
        scaled = _scaled(profile, config)
        name = "vllm-" + _dns_label(profile.name) + (f"-{index // len(profiles) + 1}" if index >= len(profiles) else "")
        weight = 100 // config.pools + (100 % config.pools if index == 0 else 0)
        specs.append(PoolSpec(name=name, profile=scaled, namespace=config.namespace, replicas=config.replicas,
                              cold_start_s=config.cold_start_s, weight=weight, min_replicas=1, max_replicas=10))
    if config.fallback_replicas > 0:
        profile = _scaled(PROFILES[FALLBACK_PROFILE], config)
        specs.append(PoolSpec(name=f"vllm-{_dns_label(profile.name)}-fallback", profile=profile,
                              namespace=config.namespace, replicas=config.fallback_replicas,
                              cold_start_s=config.cold_start_s, weight=0, min_replicas=config.fallback_replicas,
                              max_replicas=max(10, config.fallback_replicas)))
    return specs


# The backfilled history ends this long before the start: Prometheus looks back 5 minutes for a
# series' latest sample, so the history's stand-in pod must be gone from "now" when live scrapes begin
# (else its last, old sample makes every signal look stale).
HISTORY_GAP_S = 300.0


def _raise_open_files_limit() -> None:
    """Let the process use every descriptor the system allows (the soft limit is often 1024).

    Open-loop traffic against an overloaded pool keeps one connection per waiting request: a 10x
    surge on one replica holds about a thousand at once, which the usual soft limit cannot.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


class Sandbox:
    def __init__(self, config: SandboxConfig) -> None:
        if config.pools < 1:
            raise ValueError("a sandbox needs at least one pool")
        if config.fallback_replicas < 0:
            raise ValueError("fallback_replicas must be 0 or more")
        if config.spill_after_s is not None and config.fallback_replicas == 0:
            raise ValueError("spill_after_s needs a fallback pool (fallback_replicas)")
        if config.history_peak_factor < 0:
            raise ValueError("history_peak_factor must be 0 (off) or more")
        self.config = config
        self.trace = scenario_trace(config.scenario, config.pools, config.traces_dir, speed=config.speed)
        if (self.trace is not None and config.history_hours > 0 and config.scenario != "story"
                and not config.history_peak_factor):
            # Live traffic goes on where the backfilled history ends (same time of day).
            self.trace = continued(self.trace, config.history_hours * 3600.0 + HISTORY_GAP_S)
        self.fleet = Fleet(speed=config.speed)
        self.cluster = SandboxCluster(self.fleet, route_namespace=config.namespace)
        self.specs = pool_specs(config)
        spare = self.fallback_spec
        self.gateway = Gateway(self.cluster, fallback=None if spare is None else FallbackRouting(
            spare.namespace, spare.name, spill_after_s=config.spill_after_s))
        self.prometheus: PrometheusLauncher | None = None
        self.traffic: TrafficGenerator | None = None

    @property
    def fallback_spec(self) -> PoolSpec | None:
        """The warm fallback pool (the last spec) when the sandbox has one."""
        return self.specs[-1] if self.config.fallback_replicas > 0 else None

    @property
    def primary_specs(self) -> list[PoolSpec]:
        """The pools the scenario's traffic is meant for (every pool but the fallback)."""
        return self.specs[:-1] if self.config.fallback_replicas > 0 else list(self.specs)

    def start(self) -> Sandbox:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        _raise_open_files_limit()
        self.fleet.start()
        self.cluster.start()
        for spec in self.specs:
            self.cluster.add_pool(spec)
        self.gateway.start()
        # Prometheus starts after the pools exist, so its first discovery already lists every replica.
        if self.config.prometheus:
            self.prometheus = PrometheusLauncher(scrape_interval_s=self.config.scrape_interval_s)
            self.prometheus.follow(self.fleet)
            try:
                self._backfill(self.prometheus)
                self.prometheus.start()
            except PrometheusError as error:
                print(f"sandbox: running without Prometheus: {error}", file=sys.stderr)
                self.prometheus.stop()
                self.prometheus = None
        if self.trace is not None and self.config.traffic_after_ready:
            self._wait_for_starting_replicas()
        if self.trace is not None:
            options = ClientOptions(timeout_s=client_timeout_s(self.config.speed), stream=self.config.stream)
            self.traffic = TrafficGenerator(self.gateway.url, self.trace, speed=self.config.speed,
                                            options=options).start()

    def _wait_for_starting_replicas(self) -> None:
        def ready() -> bool:
            return all(len(self.cluster.ready_replicas(spec.namespace, spec.name)) >= spec.replicas for spec in self.specs)

        cold_start_s = max(self.config.cold_start_s or spec.profile.cold_start_p95_s for spec in self.specs)
        if not wait_until(ready, 30.0 + 2 * cold_start_s / self.config.speed, interval=0.1):
            raise RuntimeError("the starting replicas did not become Ready")

    def _backfill(self, prometheus: PrometheusLauncher) -> None:
        base, speed = BASE_RPS_PER_POOL * self.config.pools, self.config.speed
        if self.config.scenario == "story":
            self._backfill_rates(prometheus, lambda t: story_history_rate(t, base, speed))
            return
        if self.config.history_peak_factor:
            factor = self.config.history_peak_factor
            self._backfill_rates(prometheus, lambda t: surge_history_rate(t, base, speed, factor))
            return
        history = scenario_trace(self.config.scenario, self.config.pools, self.config.traces_dir, seed=1)
        if self.config.history_hours <= 0 or history is None:
            return
        started = time.monotonic()
        pools = [(spec, spec.weight) for spec in self.specs]
        end = time.time() - HISTORY_GAP_S
        prometheus.backfill(history_openmetrics(pools, history, self.config.history_hours, end))
        print(f"sandbox: backfilled {self.config.history_hours:g} h of {self.config.scenario} history in "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr)

    def _backfill_rates(self, prometheus: PrometheusLauncher, rate_at: Callable[[float], float]) -> None:
        """Yesterday as request rates per wall second (`rate_at(t)`, t from now; the live pool's rate at the
        speed), sampled three times per rate window (registration.sandbox_rate_window) so every window
        holds two samples: the story's, and the headless surge's."""
        if self.config.history_hours <= 0:
            return
        step_s = min(15.0, max(5.0, round(60.0 / self.config.speed)) / 3)
        pools = [(spec, spec.weight) for spec in self.primary_specs]
        prometheus.backfill(rate_openmetrics(pools, lambda t: rate_at(t - HISTORY_GAP_S),
                                             self.config.history_hours, time.time() - HISTORY_GAP_S, step_s))

    def stop(self) -> None:
        """Stop everything this sandbox started; safe to call twice."""
        for stop in (self.traffic and self.traffic.stop, self.gateway.stop, self.cluster.stop, self.fleet.stop,
                     self.prometheus and self.prometheus.stop):
            if stop:
                try:
                    stop()
                except Exception as error:  # keep stopping the rest
                    print(f"sandbox: while stopping: {error}", file=sys.stderr)
        self.traffic = None
        self.prometheus = None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> dict[str, Any]:
        """The addresses, as `manage.py sandbox --json` prints them on its first line."""
        return {
            "kube_api": self.cluster.url,
            "prometheus": self.prometheus.url if self.prometheus else None,
            "pools": [{"name": spec.name, "namespace": spec.namespace, "deployment": spec.name,
                       "model": spec.served_model, "route": self.cluster.route_name,
                       "replicas": [r.base_url for r in self.cluster.replicas(spec.namespace, spec.name)]}
                      for spec in self.specs],
        }

    def status_line(self) -> str:
        parts = []
        for spec in self.specs:
            replicas = self.cluster.replicas(spec.namespace, spec.name)
            ready = [r for r in replicas if r.ready]
            waiting = sum(r.metrics.waiting for r in ready)
            running = sum(r.metrics.running for r in ready)
            parts.append(f"{spec.name}: {len(ready)}/{len(replicas)} ready, {running} running, {waiting} waiting")
        if self.traffic is not None:
            report = self.traffic.report()
            parts.append(f"clients: {report.sent} sent, {report.succeeded} ok, {report.failed} failed, "
                         f"{report.retries} retries")
        return " | ".join(parts)
