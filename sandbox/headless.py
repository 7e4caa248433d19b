"""`manage.py demo --headless`: the demo's scenario with no browser and no web server, scored as one JSON object.

The run is the live demo minus the UI: the sandbox (emulated vLLM pools behind the Kubernetes API
emulator, Prometheus scraping them), the real control loop ticking in-process every 15 scenario
seconds, and clients streaming real HTTP requests through the route gateway. Proposals that policy
does not approve are approved by a simulated on-call `auto_approve_after_s` scenario seconds after
they were proposed. Latency comes from the clients' own records; times are scenario (model) seconds.

The baseline is the same scenario in a second, fresh sandbox (same traffic seed, same cold start,
one Ready replica at the start) scaled by KEDA as its users configure it for vLLM: the simulator's
`keda-queue` policy fed from the sandbox's Prometheus and writing the Deployment's `/scale`. Both runs
are measured the same way, by the same clients. `baseline.simulator` replays the same requests in the
simulator under both policies, to show how far the simulator agrees with the emulated fleet.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import requests
from django.db import close_old_connections

from scaling.sim.config import ClientConfig, ColdStart, SimConfig
from scaling.sim.policies.base import Observation
from scaling.sim.policies.keda_queue import KedaQueuePolicy
from scaling.sim.runner import simulate
from scaling.sim.workload import Trace

from sandbox.prometheus import PrometheusError
from sandbox.registration import CLUSTER_NAME
from sandbox.runtime import CLIENT_TIMEOUT_S, Sandbox, SandboxConfig
from sandbox.scenarios import SURGE_END_S, SURGE_START_S, scenario_trace
from sandbox.traffic import ClientOptions, RequestRecord

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


@dataclass
class ReplicaLog:
    """Pods and Ready pods over the run, integrated in scenario seconds."""

    pod_seconds: float = 0.0
    max_ready: int = 0
    ready_at: list[tuple[float, int]] = field(default_factory=list)


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
    spec: Any


Controller = Callable[[threading.Event, _Clock, Sandbox], None]


def run(options: HeadlessOptions, progress: Progress) -> dict[str, Any]:
    """Run the scenario under Headroom, then under keda-queue, in the sandbox; the JSON report."""
    from django.contrib.auth.models import User

    from sandbox.registration import register, retire_previous

    # Eager Celery logs every task it runs; the progress lines are what a reader wants on stderr.
    logging.getLogger("celery.app.trace").setLevel(logging.WARNING)
    progress(retire_previous())
    on_call = User.objects.get(username=ON_CALL_USER)
    approved_by_on_call: set[int] = set()

    def headroom(stop: threading.Event, clock: _Clock, sandbox: Sandbox) -> None:
        progress(register(sandbox, team_slug=options.team_slug))
        _loop(stop, clock, options, on_call, approved_by_on_call, progress)

    ours = _run_in_sandbox(options, "headroom", headroom, progress)
    report = {
        "scenario": options.scenario,
        "speed": options.speed,
        "auto_approve_after_s": options.auto_approve_after_s,
        **_scores(ours, options.speed),
        "proposals": _proposals(ours.clock, approved_by_on_call),
        "fallback_share": None,
        "fallback": "not configured",
        **_incidents_and_alerts(ours.clock),
    }
    keda = KedaController(options.speed, ours.spec)
    theirs = _run_in_sandbox(options, "keda-queue", keda.run, progress)
    progress("replaying the same trace in the simulator (cross-check)")
    report["baseline"] = {"policy": "keda-queue", "how": KEDA_HOW, **_scores(theirs, options.speed),
                          "scale_events": keda.events, "simulator": _simulated(options, ours.spec)}
    return report


def _run_in_sandbox(options: HeadlessOptions, policy: str, controller: Controller, progress: Progress) -> SandboxRun:
    """Start a fresh sandbox, let `controller` scale it while the scenario plays, stop it."""
    config = SandboxConfig(pools=1, scenario=options.scenario, speed=options.speed, cold_start_s=options.cold_start_s,
                           prometheus=True, scrape_interval_s=max(0.5, 5.0 / options.speed), stream=True,
                           traffic_after_ready=True)
    progress(f"[{policy}] starting the sandbox ({options.scenario} at {options.speed:g}x)")
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
        records = sandbox.traffic.report().records if sandbox.traffic else []
    finally:
        stop.set()
        sandbox.stop()
    return SandboxRun(clock, records, replicas, sandbox.specs[0])


def _scores(run: SandboxRun, speed: float) -> dict[str, Any]:
    gpu_hours = run.replicas.pod_seconds / 3600 * run.spec.profile.gpus_per_replica
    return {**_latency(run.records, speed, SLO_TTFT_S), "max_ready_replicas": run.replicas.max_ready,
            "gpu_hours": round(gpu_hours, 4), "cost_usd": round(gpu_hours * run.spec.profile.gpu_hour_usd, 2)}


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
          progress: Progress) -> None:
    """The demo's in-process loop at scenario pace, plus the simulated on-call."""
    from controlplane.models import Pool
    from scaling import loop, tasks

    while not stop.wait(TICK_EVERY_S / options.speed):
        try:
            close_old_connections()
            _approve_waiting(clock, options, on_call, approved, progress)
            tasks.advance_executions()
            pools = list(Pool.objects.filter(cluster__name=CLUSTER_NAME).select_related("cluster", "team")
                         .prefetch_related("slos", "schedules"))
            for pool in loop.tick(pools).pools:
                for action in pool.did:
                    progress(f"t={clock.now_s():.0f} s  [loop] {pool.pool}: {action}")
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
        pods = ready = 0
        for spec in sandbox.specs:
            running = sandbox.cluster.replicas(spec.namespace, spec.name)
            pods += len(running)
            ready += sum(1 for replica in running if replica.ready)
        log.pod_seconds += pods * (now - last) * clock.speed
        log.max_ready = max(log.max_ready, ready)
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
        # Every request counts: one that failed or timed out missed the SLO.
        "slo_attainment": round(met / len(records), 4) if records else None,
        "slo": {"indicator": "ttft", "threshold_ms": slo_ttft_s * 1000},
        "ttft_ms": {"overall": _percentiles_ms(series(served, "ttft_s")),
                    "surge": _percentiles_ms(series(in_surge, "ttft_s"))},
        "e2e_ms": {"overall": _percentiles_ms(series(served, "e2e_s")),
                   "surge": _percentiles_ms(series(in_surge, "e2e_s"))},
        "surge_window_s": [SURGE_START_S, SURGE_END_S],
    }


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
