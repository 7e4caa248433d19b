"""`manage.py demo --headless`: the demo's scenario with no browser and no web server, scored as one JSON object.

The run is the live demo minus the UI: the sandbox (emulated vLLM pools behind the Kubernetes API
emulator, Prometheus scraping them), the real control loop ticking in-process every 15 scenario
seconds, and clients streaming real HTTP requests through the route gateway. Proposals that policy
does not approve are approved by a simulated on-call `auto_approve_after_s` scenario seconds after
they were proposed. Latency comes from the clients' own records; times are scenario (model) seconds.

With the fallback (the default; `--no-fallback` leaves it out) the Headroom run has a second pool on
the same route: a smaller model (`llama-3.2-1b-l4`) at weight 0, warm from the start with enough Ready
replicas to take the surge's overflow, and a FallbackPolicy on the primary. `fallbacks.advance()` runs
after each loop tick (as the beat's `advance-fallbacks` does), so the overflow goes to the fallback while
the primary's new replicas start, and comes back once they serve it. The scenario's traffic is the
primary's alone: the fallback pool adds none. `fallback_share` is the share of the requests the fallback
answered (the gateway's `x-sandbox-pool` on each answer); those requests count against the same TTFT SLO.

The baseline is the same scenario in a second, fresh sandbox (same traffic seed, same cold start,
one Ready replica at the start) scaled by KEDA as its users configure it for vLLM: the simulator's
`keda-queue` policy fed from the sandbox's Prometheus and writing the Deployment's `/scale`. Both runs
are measured the same way, by the same clients. `baseline.simulator` replays the same requests in the
simulator under both policies, to show how far the simulator agrees with the emulated fleet.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import requests
from django.db import close_old_connections

from scaling.engine.spillover import spill_after_s
from scaling.sim.config import ClientConfig, ColdStart, SimConfig
from scaling.sim.policies.base import Observation
from scaling.sim.policies.keda_queue import KedaQueuePolicy
from scaling.sim.runner import simulate
from scaling.sim.workload import Trace

from sandbox import beat
from sandbox.prometheus import PrometheusError
from sandbox.fleet import replica_capacity_rps
from sandbox.registration import CLUSTER_NAME
from sandbox.runtime import CLIENT_TIMEOUT_S, Sandbox, SandboxConfig, pool_specs
from sandbox import scenarios
from sandbox.scenarios import SURGE_END_S, SURGE_FACTOR, SURGE_START_S, scenario_trace
from sandbox.traffic import ClientOptions, RequestRecord

SPILLOVER_WAIT_SHARE = 0.2  # the replay's --fallback-spillover, fitted on seed 1 (docs/benchmarks.md)
HISTORY_HOURS = 26.0  # yesterday's peak, and the day before it as quiet (as the story's)
YESTERDAY_PEAK_FACTOR = 10.0  # yesterday's peak at the surge's hour, times the base load (scenarios.surge_history_rate)
HEADLESS_SCENARIOS = ("surge-10x",)  # finite scenarios: a headless run needs an end
TICK_EVERY_S = 15.0  # scenario seconds between control-loop ticks, as the beat's 15 s
SAMPLE_EVERY_S = 0.25  # wall seconds between replica counts (GPU hours, max ready)
SIMULATED_ON_CALL = "simulated-on-call"
ON_CALL_USER = "bob"  # seed_demo's approver for ML Platform

Progress = Callable[[str], None]


@dataclass(frozen=True)
class HeadlessOptions:
    scenario: str = "surge-10x"
    speed: float = 4.0
    auto_approve_after_s: float = 60.0  # scenario seconds a proposal waits before the on-call approves it
    cold_start_s: float | None = None  # model seconds; None: the profile's p50
    team_slug: str = "ml-platform"
    fallback: bool = True  # the Headroom run has a warm fallback pool and a fallback policy
    # With the fallback, the gateway spills a request over to it when the primary would start the request
    # later than this share of the SLO; None: off.
    spillover_wait_share: float | None = SPILLOVER_WAIT_SHARE
    # Hours of yesterday backfilled into the Headroom run's Prometheus: the base load, and a day before the
    # surge the day's peak (YESTERDAY_PEAK_FACTOR x for 30 minutes), which the loop forecasts and proposes
    # to pre-scale for; 0: no history, the surge comes unforeseen.
    history_hours: float = HISTORY_HOURS


# The engine keeps the primary, and the fallback, at this share of their ready capacity (FallbackPolicy).
FALLBACK_TARGET_UTILISATION = 0.85
BUCKET_S = 15.0  # scenario seconds per bucket of the misses' timeline


def fallback_replicas(config: SandboxConfig) -> int:
    """Ready fallback replicas that take the surge's overflow on their own while the primary's replicas start:
    the surge's rate less what the primary's starting replicas serve, plus the primary's backlog drained
    alongside (one replica's worth), at the engine's target utilisation of each fallback replica."""
    primary = pool_specs(dataclasses.replace(config, fallback_replicas=0))
    fallback = pool_specs(dataclasses.replace(config, fallback_replicas=1))[-1]
    surge_rps = scenarios.BASE_RPS_PER_POOL * SURGE_FACTOR * len(primary)
    primary_rps = sum(spec.replicas * replica_capacity_rps(spec.profile) for spec in primary)
    per_replica = replica_capacity_rps(fallback.profile) * FALLBACK_TARGET_UTILISATION
    overflow = max(0.0, surge_rps - primary_rps * FALLBACK_TARGET_UTILISATION)
    return math.ceil(overflow / per_replica) + 1


@dataclass
class ReplicaLog:
    """Pods and Ready pods of each pool over the run, pods integrated in scenario seconds."""

    pod_seconds: dict[str, float] = field(default_factory=dict)
    max_ready: dict[str, int] = field(default_factory=dict)


class _Clock:
    """Scenario seconds since the traffic started (wall seconds times the speed)."""

    def __init__(self, speed: float) -> None:
        self.speed, self.started = speed, time.time()

    def now_s(self) -> float:
        return (time.time() - self.started) * self.speed

    def of(self, at: datetime | None) -> float | None:
        return None if at is None else round((at.timestamp() - self.started) * self.speed, 1)


@dataclass
class SandboxRun:
    """What one run of the scenario in the sandbox left: the clients' records and the replica log."""

    clock: _Clock
    records: list[RequestRecord]
    replicas: ReplicaLog
    spec: Any  # the primary pool's
    fallback_spec: Any = None
    spilled: int = 0  # attempts the gateway spilled over to the fallback (a retried request's each)
    spill_after_s: float | None = None  # model seconds; None: no spill-over
    retries: int = 0  # the clients' attempts after a timeout, connection error or 5xx


Controller = Callable[[threading.Event, _Clock, Sandbox], None]


def run(options: HeadlessOptions, progress: Progress) -> dict[str, Any]:
    """Run the scenario under Headroom, then under keda-queue, in the sandbox; the JSON report."""
    from django.contrib.auth.models import User

    from sandbox.registration import register, retire_previous

    progress(retire_previous())
    on_call = User.objects.get(username=ON_CALL_USER)
    approved_by_on_call: set[int] = set()
    ticks_s: list[float] = []  # scenario time each Headroom loop tick ended

    def headroom(stop: threading.Event, clock: _Clock, sandbox: Sandbox) -> None:
        progress(register(sandbox, team_slug=options.team_slug))
        _loop(stop, clock, options, on_call, approved_by_on_call, progress, ticks_s)

    warm = fallback_replicas(_sandbox_config(options, 0)) if options.fallback else 0
    ours = _run_in_sandbox(options, "headroom", headroom, progress, fallback_replicas=warm,
                           history_hours=options.history_hours)
    second_tick = second_tick_after_surge_s(ticks_s)
    report = {
        "scenario": options.scenario,
        "speed": options.speed,
        "auto_approve_after_s": options.auto_approve_after_s,
        "history": ({"hours": options.history_hours,
                     "yesterday": f"the base load, and from the surge's onset a day before a {YESTERDAY_PEAK_FACTOR:g}x "
                                  f"peak for {scenarios.YESTERDAY_PEAK_WALL_S / 60:g} wall minutes (today: the "
                                  f"{(SURGE_END_S - SURGE_START_S) / 60:g}-minute surge)"}
                    if options.history_hours > 0 else "none (--history 0): the surge comes unforeseen"),
        **_scores(ours, options.speed, second_tick),
        "proposals": _proposals(ours.clock, approved_by_on_call),
        **_fallback(ours, warm),
        **_incidents_and_alerts(ours.clock),
    }
    keda = KedaController(options.speed, ours.spec)
    theirs = _run_in_sandbox(options, "keda-queue", keda.run, progress)
    progress("replaying the same trace in the simulator (cross-check)")
    report["baseline"] = {"policy": "keda-queue", "how": KEDA_HOW, **_scores(theirs, options.speed, second_tick),
                          "scale_events": keda.events, "simulator": _simulated(options, ours.spec)}
    return report


def _sandbox_config(options: HeadlessOptions, fallback_replicas: int, history_hours: float = 0.0) -> SandboxConfig:
    spill = (spill_after_s(options.spillover_wait_share, SLO_TTFT_S)
             if fallback_replicas and options.spillover_wait_share is not None else None)
    return SandboxConfig(pools=1, scenario=options.scenario, speed=options.speed, cold_start_s=options.cold_start_s,
                         prometheus=True, scrape_interval_s=max(0.5, 5.0 / options.speed), stream=True,
                         traffic_after_ready=True, fallback_replicas=fallback_replicas, spill_after_s=spill,
                         history_hours=history_hours,
                         history_peak_factor=YESTERDAY_PEAK_FACTOR if history_hours > 0 else 0.0)


def _run_in_sandbox(options: HeadlessOptions, policy: str, controller: Controller, progress: Progress,
                    fallback_replicas: int = 0, history_hours: float = 0.0) -> SandboxRun:
    """Start a fresh sandbox, let `controller` scale it while the scenario plays, stop it. Only Headroom's run
    gets history: the baseline reads none."""
    config = _sandbox_config(options, fallback_replicas, history_hours)
    with_fallback = f", {fallback_replicas} warm fallback replicas" if fallback_replicas else ""
    with_history = f", {history_hours:g} h of history" if history_hours > 0 else ""
    progress(f"[{policy}] starting the sandbox ({options.scenario} at {options.speed:g}x{with_fallback}{with_history})")
    sandbox = Sandbox(config).start()
    clock = _Clock(options.speed)
    stop = threading.Event()
    replicas = ReplicaLog()
    try:
        if sandbox.prometheus is None:
            raise RuntimeError("Prometheus did not start: nothing would see the load (make system-deps)")
        threads = [threading.Thread(target=controller, args=(stop, clock, sandbox), name=policy, daemon=True),
                   threading.Thread(target=_count_replicas, args=(stop, clock, sandbox, replicas),
                                    name="replica-count", daemon=True)]
        for thread in threads:
            thread.start()
        _wait_for_traffic(sandbox, clock, f"[{policy}] ", progress)
        stop.set()
        for thread in threads:
            thread.join(30)
        traffic = sandbox.traffic.report() if sandbox.traffic else None
    finally:
        stop.set()
        sandbox.stop()
    return SandboxRun(clock, traffic.records if traffic else [], replicas, sandbox.primary_specs[0],
                      sandbox.fallback_spec, sandbox.gateway.spilled, config.spill_after_s,
                      traffic.retries if traffic else 0)


def _gpu_hours(run: SandboxRun, spec: Any) -> float:
    return run.replicas.pod_seconds.get(spec.name, 0.0) / 3600 * spec.profile.gpus_per_replica


def second_tick_after_surge_s(ticks_s: list[float]) -> float:
    """When the second Headroom tick after the surge's onset ended (scenario s): the first one done after
    the onset is the first that can have seen it and entered the fallback, and requests due after the
    second are the ones a share sized on the surge should serve (docs/sandbox.md). The schedule's time
    (onset + two ticks) when the loop did not tick twice."""
    after = [at for at in ticks_s if at >= SURGE_START_S]
    return round(after[1], 1) if len(after) >= 2 else SURGE_START_S + 2 * TICK_EVERY_S


def slo_attainment_from(records: list[RequestRecord], speed: float, slo_ttft_s: float, from_s: float) -> float | None:
    """The SLO attainment of the requests due at or after `from_s` (scenario s); a failed request missed."""
    due = [r for r in records if r.t_s >= from_s]
    met = sum(1 for r in due if r.ttft_s is not None and r.e2e_s is not None and r.ttft_s * speed <= slo_ttft_s)
    return round(met / len(due), 4) if due else None


def _scores(run: SandboxRun, speed: float, second_tick_s: float) -> dict[str, Any]:
    """Latency of every request (whichever pool answered it); GPU hours and cost of every pool, the warm
    fallback's included; the primary's Ready peak."""
    specs = [run.spec] + ([run.fallback_spec] if run.fallback_spec is not None else [])
    gpu_hours = sum(_gpu_hours(run, spec) for spec in specs)
    cost = sum(_gpu_hours(run, spec) * spec.profile.gpu_hour_usd for spec in specs)
    latency = _latency(run.records, speed, SLO_TTFT_S)
    latency["requests"]["retries"] = run.retries
    return {**latency,
            # Both runs are cut at Headroom's second tick: the same requests on both sides.
            "second_tick_after_surge_s": second_tick_s,
            "slo_attainment_after_second_tick": slo_attainment_from(run.records, speed, SLO_TTFT_S, second_tick_s),
            "max_ready_replicas": run.replicas.max_ready.get(run.spec.name, 0),
            "gpu_hours": round(gpu_hours, 4), "cost_usd": round(cost, 2)}


def _fallback(run: SandboxRun, warm: int) -> dict[str, Any]:
    """`fallback_share` (of the requests sent, answered by the fallback pool) and what the fallback did."""
    spec = run.fallback_spec
    if spec is None:
        return {"fallback_share": None, "fallback": "not configured (--no-fallback)"}
    from scaling.models import FallbackActivation, FallbackEvent, FallbackPolicy

    served = [r for r in run.records if r.pool == spec.name]
    met = sum(1 for r in served if r.ttft_s is not None and r.ttft_s * run.clock.speed <= SLO_TTFT_S)
    policy = FallbackPolicy.objects.filter(pool__cluster__name=CLUSTER_NAME, pool__name=run.spec.name).first()
    activations = FallbackActivation.objects.filter(pool__cluster__name=CLUSTER_NAME).order_by("started_at")
    events = FallbackEvent.objects.filter(activation__pool__cluster__name=CLUSTER_NAME).order_by("at", "pk")
    gpu_hours = _gpu_hours(run, spec)
    return {
        "fallback_share": round(len(served) / len(run.records), 4) if run.records else None,
        "fallback": {
            "pool": spec.name, "model": spec.served_model, "of": run.spec.name,
            "warm_replicas": warm,
            "warm_sized_from": (f"({scenarios.BASE_RPS_PER_POOL * SURGE_FACTOR:g} req/s surge - {run.spec.replicas} primary x "
                                f"{replica_capacity_rps(run.spec.profile):g} req/s x {FALLBACK_TARGET_UTILISATION}) / "
                                f"({replica_capacity_rps(spec.profile):g} req/s per fallback replica x "
                                f"{FALLBACK_TARGET_UTILISATION}), rounded up, + 1 for the primary's backlog"),
            "policy": ({"entry_after_s": round(policy.entry_after_s * run.clock.speed, 1),
                        "exit_after_s": round(policy.exit_after_s * run.clock.speed, 1),
                        "return_step_hold_s": round(policy.return_step_hold_s * run.clock.speed, 1),
                        "max_share": policy.max_share} if policy else None),
            "requests": len(served),
            "slo_attainment": round(met / len(served), 4) if served else None,
            "spillover": ({"after_s": run.spill_after_s, "spilled_requests": run.spilled}
                          if run.spill_after_s is not None else "off (--no-spillover)"),
            "max_ready_replicas": run.replicas.max_ready.get(spec.name, 0),
            "gpu_hours": round(gpu_hours, 4), "cost_usd": round(gpu_hours * spec.profile.gpu_hour_usd, 2),
            "activations": [{"id": a.pk, "phase": a.phase, "entered_s": run.clock.of(a.started_at),
                             "finished_s": run.clock.of(a.finished_at), "route_percent": a.route_percent}
                            for a in activations],
            "events": [{"at_s": run.clock.of(e.at), "kind": e.kind, "phase": e.to_phase, "share": round(e.share, 3),
                        "target_percent": e.data.get("target_percent"), "comment": e.comment[:200]}
                       for e in events],
        },
    }


KEDA_HOW = ("the same sandbox, traffic (same seed) and cold start, scaled by KEDA as its users configure it for vLLM: "
            "a ScaledObject on vllm:num_requests_waiting (Prometheus), target 5 per replica, 30 s polling, the HPA's "
            "default behaviour every 15 s (scaling.sim.policies.keda_queue, the simulator's policy), min 1, max 10")


class KedaController:
    """KEDA and the HPA on the sandbox: the simulator's keda-queue policy, fed from Prometheus, writing /scale."""

    def __init__(self, speed: float, spec: Any) -> None:
        self.speed = speed
        self.policy = KedaQueuePolicy(spec.min_replicas, spec.max_replicas)
        self.events: list[dict[str, Any]] = []

    def run(self, stop: threading.Event, clock: _Clock, sandbox: Sandbox) -> None:
        state = self.policy.new_state()
        spec = sandbox.specs[0]
        url = (f"{sandbox.cluster.url}/apis/apps/v1/namespaces/{spec.namespace}/deployments/{spec.name}/scale")
        query = f'sum(vllm:num_requests_waiting{{model_name="{spec.served_model}"}})'
        while not stop.wait(self.policy.tick_s / self.speed):
            try:
                result = sandbox.prometheus.query(query) if sandbox.prometheus else []
                desired = requests.get(url, timeout=5).json()["spec"]["replicas"]
            except (requests.RequestException, PrometheusError, KeyError, ValueError):
                continue  # KEDA keeps the last scale when its metric or the API is unavailable
            queue = float(result[0]["value"][1]) if result else 0.0
            pods = sandbox.cluster.replicas(spec.namespace, spec.name)
            ready = sum(1 for replica in pods if replica.ready)
            observation = Observation(now=clock.now_s(), ready_replicas=ready, starting_replicas=len(pods) - ready,
                                      desired_replicas=desired, queue_depth=queue, running=0.0, utilisation=0.0,
                                      arrival_rate_rps=0.0)
            target = self.policy.decide(clock.now_s(), observation, state)
            if target != desired:
                requests.patch(url, json={"spec": {"replicas": target}}, timeout=5,
                               headers={"Content-Type": "application/merge-patch+json"})
                self.events.append({"at_s": round(clock.now_s(), 1), "from": desired, "to": target,
                                    "queue_depth": queue})


SLO_TTFT_S = 1.0  # the TTFT p95 objective registration gives each sandbox pool (1000 ms)


def _wait_for_traffic(sandbox: Sandbox, clock: _Clock, prefix: str, progress: Progress) -> None:
    """Until the trace is sent and every request answered (or given up), with a progress line every ~10 s."""
    traffic = sandbox.traffic
    assert traffic is not None
    said = time.monotonic()
    while traffic.sending():
        time.sleep(0.5)
        if time.monotonic() - said >= 10:
            said = time.monotonic()
            progress(f"{prefix}t={clock.now_s():.0f} s  {sandbox.status_line()}")
    traffic.wait()
    progress(f"{prefix}t={clock.now_s():.0f} s  all requests answered")


def _loop(stop: threading.Event, clock: _Clock, options: HeadlessOptions, on_call: Any, approved: set[int],
          progress: Progress, ticks_s: list[float]) -> None:
    """The demo's in-process beat at scenario pace (sandbox/beat.py: the tick, executions, shifts, the
    fallback decisions, breakers), plus the simulated on-call."""
    from scaling.models import FallbackEvent

    said_event = 0

    while not stop.wait(TICK_EVERY_S / options.speed):
        try:
            close_old_connections()
            _approve_waiting(clock, options, on_call, approved, progress)
            beat.run_once(lambda line: progress(f"t={clock.now_s():.0f} s  {line}"))
            ticks_s.append(clock.now_s())  # when the tick's decisions are on the route (a tick takes seconds)
            for event in FallbackEvent.objects.filter(activation__pool__cluster__name=CLUSTER_NAME,
                                                      pk__gt=said_event).order_by("pk"):
                said_event = event.pk
                progress(f"t={clock.now_s():.0f} s  [fallback] {event.kind} ({event.to_phase}, "
                         f"share {event.share:.0%}): {event.comment[:160]}")
        except Exception as error:  # noqa: BLE001 - as in the demo: the next tick tries again
            progress(f"[loop] tick failed: {type(error).__name__}: {error}")
    close_old_connections()


def _approve_waiting(clock: _Clock, options: HeadlessOptions, on_call: Any, approved: set[int],
                     progress: Progress) -> None:
    """Approve, as the on-call would, each proposal that has waited `auto_approve_after_s` for a person."""
    from controlplane import services as core
    from controlplane.choices import Channel
    from scaling import services
    from scaling.choices import ProposalState
    from scaling.models import Proposal

    due = time.time() - options.auto_approve_after_s / options.speed
    waiting = Proposal.objects.filter(pool__cluster__name=CLUSTER_NAME, state=ProposalState.PENDING,
                                      created_at__lte=datetime.fromtimestamp(due).astimezone())
    for proposal in waiting:
        comment = f"{SIMULATED_ON_CALL}: approved after {options.auto_approve_after_s:g} s (headless demo)"
        try:
            services.approve(proposal.pk, core.Actor(user=on_call, channel=Channel.CLI), comment)
        except services.ProposalError as error:
            progress(f"t={clock.now_s():.0f} s  [on-call] #{proposal.pk} not approved: {error}")
            continue
        approved.add(proposal.pk)
        progress(f"t={clock.now_s():.0f} s  [on-call] approved #{proposal.pk} "
                 f"{proposal.current_replicas} → {proposal.target_replicas}")


def _count_replicas(stop: threading.Event, clock: _Clock, sandbox: Sandbox, log: ReplicaLog) -> None:
    last = time.monotonic()
    while not stop.wait(SAMPLE_EVERY_S):
        now = time.monotonic()
        for spec in sandbox.specs:
            running = sandbox.cluster.replicas(spec.namespace, spec.name)
            ready = sum(1 for replica in running if replica.ready)
            log.pod_seconds[spec.name] = log.pod_seconds.get(spec.name, 0.0) + len(running) * (now - last) * clock.speed
            log.max_ready[spec.name] = max(log.max_ready.get(spec.name, 0), ready)
        last = now


def _percentiles_ms(values_s: list[float]) -> dict[str, float | None]:
    if not values_s:
        return {"p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.quantile(values_s, (0.5, 0.95, 0.99))
    return {"p50": round(p50 * 1000, 1), "p95": round(p95 * 1000, 1), "p99": round(p99 * 1000, 1)}


def _latency(records: list[RequestRecord], speed: float, slo_ttft_s: float) -> dict[str, Any]:
    """Requests, SLO attainment and latency percentiles (scenario ms), overall and during the surge."""
    served = [r for r in records if r.e2e_s is not None]
    in_surge = [r for r in served if SURGE_START_S <= r.t_s < SURGE_END_S]
    met = sum(1 for r in served if r.ttft_s is not None and r.ttft_s * speed <= slo_ttft_s)

    def series(rows: list[RequestRecord], name: str) -> list[float]:
        return [getattr(r, name) * speed for r in rows if getattr(r, name) is not None]

    return {
        "requests": {"sent": len(records), "succeeded": len(served), "failed": len(records) - len(served)},
        "misses_by_15s": _misses_by_bucket(records, speed, slo_ttft_s),
        # Every request counts: one that failed or timed out missed the SLO.
        "slo_attainment": round(met / len(records), 4) if records else None,
        "slo_attainment_surge": slo_attainment_from(
            [r for r in records if r.t_s < SURGE_END_S], speed, slo_ttft_s, SURGE_START_S),
        "slo": {"indicator": "ttft", "threshold_ms": slo_ttft_s * 1000},
        "ttft_ms": {"overall": _percentiles_ms(series(served, "ttft_s")),
                    "surge": _percentiles_ms(series(in_surge, "ttft_s"))},
        "e2e_ms": {"overall": _percentiles_ms(series(served, "e2e_s")),
                   "surge": _percentiles_ms(series(in_surge, "e2e_s"))},
        "surge_window_s": [SURGE_START_S, SURGE_END_S],
    }


def _misses_by_bucket(records: list[RequestRecord], speed: float, slo_ttft_s: float) -> list[dict[str, Any]]:
    """Where the SLO misses are: per 15 scenario seconds of due time that missed any, the requests sent and
    missed, and the misses by the pool that answered (`failed`: none did)."""
    buckets: dict[int, dict[str, Any]] = {}
    for record in records:
        bucket = buckets.setdefault(int(record.t_s // BUCKET_S), {"sent": 0, "missed": 0, "by_pool": {}})
        bucket["sent"] += 1
        if record.ttft_s is None or record.ttft_s * speed > slo_ttft_s:
            bucket["missed"] += 1
            where = record.pool if record.ttft_s is not None and record.pool else "failed"
            bucket["by_pool"][where] = bucket["by_pool"].get(where, 0) + 1
    return [{"from_s": index * BUCKET_S, **bucket} for index, bucket in sorted(buckets.items()) if bucket["missed"]]


def _proposals(clock: _Clock, approved_by_on_call: set[int]) -> list[dict[str, Any]]:
    from controlplane.choices import Channel
    from scaling.models import Proposal

    rows = []
    for proposal in Proposal.objects.filter(pool__cluster__name=CLUSTER_NAME).order_by("created_at", "pk"):
        if proposal.pk in approved_by_on_call:
            channel = SIMULATED_ON_CALL
        elif proposal.decided_channel == Channel.AUTO:
            channel = "policy"
        else:
            channel = proposal.decided_channel or None
        scaled_up = proposal.target_replicas > proposal.current_replicas
        rows.append({
            "id": proposal.pk, "pool": proposal.pool.name, "kind": proposal.kind, "state": proposal.state,
            "from": proposal.current_replicas, "to": proposal.target_replicas,
            # Policy approves in the tick that proposed, stamped with the tick's start: that is when it was made.
            "created_s": clock.of(min(proposal.created_at, proposal.decided_at or proposal.created_at)),
            "approved_s": clock.of(proposal.decided_at),
            "executed_s": clock.of(proposal.applied_at),
            "ready_s": clock.of(proposal.finished_at) if scaled_up and proposal.state == "succeeded" else None,
            "channel": channel,
        })
    return rows


def _incidents_and_alerts(clock: _Clock) -> dict[str, Any]:
    from incidents.models import Alert, Incident

    incidents = Incident.objects.filter(cluster__name=CLUSTER_NAME).order_by("opened_at")
    alerts = Alert.objects.filter(cluster__name=CLUSTER_NAME).order_by("started_at")
    return {
        "incidents": {"count": len(incidents), "items": [
            {"id": i.pk, "severity": i.severity, "state": i.state, "title": i.title,
             "opened_s": clock.of(i.opened_at)} for i in incidents]},
        "alerts": {"count": len(alerts), "items": [
            {"id": a.pk, "rule": a.rule, "tier": a.tier, "state": a.state, "fired_s": clock.of(a.fired_at)}
            for a in alerts]},
    }


def _simulated(options: HeadlessOptions, spec: Any) -> dict[str, Any]:
    """The same requests replayed in the simulator under keda-queue and headroom: how far it agrees with the sandbox."""
    requests_ = list(scenario_trace(options.scenario, 1) or [])
    clip = ClientOptions().max_prompt_tokens
    trace = Trace(options.scenario, np.array([r.t_s for r in requests_], dtype=float),
                  np.array([min(r.prompt_tokens, clip) for r in requests_], dtype=np.int64),
                  np.array([r.output_tokens for r in requests_], dtype=np.int64))
    cold_start_s = spec.profile.cold_start_p50_s if spec.cold_start_s is None else spec.cold_start_s
    sim_config = SimConfig.for_profile(
        spec.profile, cold_start=ColdStart(cold_start_s, cold_start_s), slo_ttft_s=SLO_TTFT_S,
        min_replicas=spec.min_replicas, max_replicas=spec.max_replicas, warmup_s=0.0,
        client=ClientConfig(timeout_s=CLIENT_TIMEOUT_S, max_retries=ClientOptions().retries))
    return {policy: {key: result[key] for key in ("slo_attainment", "ttft_ms", "max_replicas", "gpu_hours")}
            for policy in ("keda-queue", "headroom")
            for result in [simulate(trace, sim_config, policy).as_json()]}
