"""Drills: a playbook practised against the sandbox, scored, its timeline kept.

`manage.py drill PLAYBOOK --scenario …` starts the sandbox's Kubernetes API emulator with one pool of
emulated vLLM replicas on an accelerated clock, registers it as a pool of the playbook's team (in a
cluster `drill-<team>` of its own, so no real cluster is touched), and plays the scenario's traffic
against the replicas that are Ready. The first tick whose TTFT p95 breaks the P1 threshold opens the
drill incident and starts the playbook in it. People act in the incident page as they would for real
(or `--auto-respond USER` acts for them: acknowledge, tick, run and approve each step at once), and
every action goes through the same services: proposals, approvals, scale writes to the emulated
Deployment, replicas turning Ready after their (scaled) cold start.

A drill never pages anyone: the outbox skips a drill pool's proposals, its notify steps record what
they would have sent, and the incident is opened here, not by the alert rules. The pool, its
proposals and the incident stay afterwards, so the drill's timeline can be read like any incident's;
the finished `Drill` row retires the pool (the control loop leaves it out: its emulator is gone). A drill
that ends early (an error, Ctrl-C) is finished and its incident resolved all the same; one that ends
before its incident opened deletes its pool, which holds nothing to read.

The traffic model is a fluid queue (arrivals over the Ready replicas' capacity): what the sandbox's
replicas would show under the scenario's load, computed rather than sent, so a drill takes seconds
on two CPU cores. Human reaction times are measured on the wall clock; the scenario's times (and the
SLO attainment) on the model clock.
"""
from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import AuditAction, Channel as ActorChannel, Role
from controlplane.errors import ServiceError
from controlplane.models import Cluster, Pool
from incidents import incidents, playbooks
from incidents.choices import IncidentEventKind, IncidentState, PlaybookStepKind, RunStepState
from incidents.models import Drill, Incident, IncidentEvent, Playbook, PlaybookRun
from sandbox.fleet import Fleet
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from scaling import services as scaling
from scaling.choices import ProposalState
from scaling.drivers.registry import cluster_driver, workload_of
from scaling.models import PlannerMemory, Proposal, SignalSample
from scaling.sim.profiles import get_profile

TICK_S = 15.0  # model seconds between two drill ticks, as the control loop's beat
SLO_TTFT_S = 1.0  # the P1 rule's threshold: the drill's incident opens above it, its requests are judged by it
MAX_ERROR_RATE = 0.01
REPLICA_CAPACITY_RPS = 4.0  # what one emulated replica serves within the SLO
BASE_TTFT_S = 0.25
ABANDON_S = 30.0
DRILL_ACTOR = core.Actor(None, ActorChannel.CLI)  # who registers and retires the drill's cluster and pool


class DrillError(Exception):
    """A drill that cannot start: the message names what is wrong."""


@dataclass(frozen=True)
class Scenario:
    name: str
    base_rps: float
    peak_factor: float
    surge_at_s: float
    cold_start_s: float  # model seconds
    dead_replicas: int = 0  # from the surge on, this many ready replicas answer only errors
    replicas: int = 1  # at the start, Ready before the first tick
    ramp_s: float = 15.0

    def rate_at(self, t: float) -> float:
        if t < self.surge_at_s:
            return self.base_rps
        share = min(1.0, (t - self.surge_at_s) / self.ramp_s)
        return self.base_rps * (1 + (self.peak_factor - 1) * share)


SCENARIOS = {
    "surge-10x": Scenario("surge-10x", base_rps=3.0, peak_factor=10.0, surge_at_s=30.0, cold_start_s=60.0),
    "slow-cold-start": Scenario("slow-cold-start", base_rps=3.0, peak_factor=3.0, surge_at_s=30.0, cold_start_s=240.0),
    "dead-endpoint": Scenario("dead-endpoint", base_rps=3.0, peak_factor=1.5, surge_at_s=30.0, cold_start_s=60.0,
                              dead_replicas=1, replicas=2),
}


@dataclass
class Fluid:
    """The pool's queue under the scenario: arrivals above the healthy ready capacity wait."""

    queue: float = 0.0

    def step(self, rate: float, ready: int, dead: int, dt: float) -> dict[str, float]:
        healthy = max(0, ready - dead)
        capacity = healthy * REPLICA_CAPACITY_RPS
        # A dead replica takes its share of requests and answers each with an error at once.
        error_rate = min(1.0, dead / ready) if ready else 1.0
        arriving = rate * (1 - error_rate)
        # Clients give up after ABANDON_S: the queue holds at most that much of the arrivals.
        self.queue = min(arriving * ABANDON_S, max(0.0, self.queue + (arriving - capacity) * dt))
        ttft = BASE_TTFT_S + (self.queue / capacity if capacity else 60.0)
        return {"queue_depth": round(self.queue, 1), "ttft_p95_s": round(min(ttft, 60.0), 3),
                "error_rate": round(error_rate, 4)}


@dataclass(frozen=True)
class DrillResult:
    drill: Drill
    score: dict[str, Any]


def _drill_pool(playbook: Playbook, kube: SandboxCluster, namespace: str) -> Pool:
    """The drill's cluster (one per team, pointed at this drill's emulator) and a fresh pool in it, audited."""
    team = playbook.team
    with transaction.atomic():
        cluster, created = Cluster.objects.select_for_update().get_or_create(
            name=f"drill-{team.slug}"[:63], defaults={"team": team, "region": "sandbox"})
        before = None if created else core.snapshot(cluster)
        cluster.kube_api_url = kube.url  # this drill's emulator; a later drill points it at its own
        cluster.save(update_fields=["kube_api_url"])
        core.record(DRILL_ACTOR, AuditAction.CREATE if created else AuditAction.UPDATE, cluster, before=before)
        pool = Pool.objects.create(
            cluster=cluster, team=team, name=namespace, namespace=namespace, deployment="vllm-drill", model_name="drill",
            gpu_type="H100", min_replicas=1, max_replicas=12, replica_capacity_rps=REPLICA_CAPACITY_RPS,
            approval_policy={"auto_approve_reactive": False, "auto_approve_off_hours": False})
        core.record(DRILL_ACTOR, AuditAction.CREATE, pool)
    return pool


def _finish(drill: Drill, ticks: list[dict[str, Any]], ending: str | None = None) -> dict[str, Any]:
    """Keep the ticks and the score, and resolve the incident: from here on the loop leaves the pool out.
    `ending` says why a drill stopped early; None is a drill played to its end."""
    Drill.objects.filter(pk=drill.pk).update(ticks=ticks, finished_at=timezone.now())
    drill.refresh_from_db()
    result = score(drill)
    Drill.objects.filter(pk=drill.pk).update(score=result)
    incidents.close_drill(drill.incident_id, ending or f"drill over: SLO attainment {result['slo_attainment']}")
    return result


def _retire_early(pool: Pool, drill: Drill | None, ticks: list[dict[str, Any]], error: BaseException) -> None:
    """A drill that stopped before its end: finish it, or delete its pool when no incident opened yet."""
    if drill is None:
        core.delete_with_audit(DRILL_ACTOR, pool)
        return
    interrupted = isinstance(error, KeyboardInterrupt)
    _finish(drill, ticks, "drill interrupted" if interrupted else f"drill failed: {type(error).__name__}: {error}")


def _open(pool: Pool, playbook: Playbook, scenario: Scenario, first: dict[str, float], now: datetime) -> Drill:
    with transaction.atomic():
        incident = Incident.objects.create(team=pool.team, cluster=pool.cluster, pool=pool, severity="P1", opened_at=now,
                                           title=f"Drill: {scenario.name} on {pool.name} (playbook {playbook.name})")
        IncidentEvent.objects.create(incident=incident, at=now, kind=IncidentEventKind.OPENED, to_state=incident.state,
                                     actor_name="drill:system", text=f"drill {scenario.name}: TTFT p95 "
                                                                     f"{first['ttft_p95_s']:.2f} s over {SLO_TTFT_S} s")
        drill = Drill.objects.create(playbook=playbook, scenario=scenario.name, incident=incident, pool=pool, started_at=now)
        core.record(incidents.AUTO, "open_drill", incident, after={"playbook": playbook.name, "scenario": scenario.name},
                    team=pool.team)
    return drill


def _record_signals(pool: Pool, tick: dict[str, Any], now: datetime) -> None:
    """What the control loop would store for the pool at this tick: the charts, the pre-scale step's
    warm pool and a shift's guard read it."""
    signals = {"request_rate_rps": tick["rate_rps"], "queue_depth": tick["queue_depth"],
               "ttft_p95_s": tick["ttft_p95_s"], "error_rate": tick["error_rate"]}
    PlannerMemory.objects.update_or_create(pool=pool, defaults={
        "last_signals": signals, "last_decision": {"at": now.isoformat(), "capacity_per_replica_rps": REPLICA_CAPACITY_RPS}})
    SignalSample.objects.create(pool=pool, at=now, request_rate_rps=tick["rate_rps"], queue_depth=tick["queue_depth"],
                                ttft_p95_s=tick["ttft_p95_s"], error_rate=tick["error_rate"], ready_replicas=tick["ready"],
                                desired_replicas=tick["desired"])


def _respond(run: PlaybookRun, responder: core.Actor) -> None:
    """What `--auto-respond` does each tick: acknowledge, then take each step in turn as far as it goes."""
    incident = run.incident
    incident.refresh_from_db()
    if incident.state == IncidentState.OPEN:
        try:
            incidents.acknowledge(incident.pk, responder, "drill responder")
        except ServiceError:
            pass  # a person acknowledged it a moment ago: they lead

    playbooks.refresh(run)
    for step in run.steps.order_by("position"):
        if step.state in (RunStepState.DONE, RunStepState.SKIPPED):
            continue
        if step.kind == PlaybookStepKind.CHECKLIST:
            if step.position == run.steps.count() and _earlier_unfinished(run, step.position):
                return  # the last check ("it drained") waits for the actions before it
            playbooks.complete(run.pk, step.position, responder)
            continue
        if step.state == RunStepState.PENDING:
            step = playbooks.run_step(run.pk, step.position, responder)
        if step.state == RunStepState.WAITING_APPROVAL and step.proposal_id:
            proposal = Proposal.objects.get(pk=step.proposal_id)
            if proposal.state == ProposalState.PENDING:
                try:
                    scaling.approve(proposal.pk, responder, "drill responder")
                except ServiceError:
                    pass  # decided by someone else, or it needs a second person: the drill waits, as it would

        if step.state == RunStepState.FAILED:
            playbooks.skip(run.pk, step.position, responder, f"drill responder: {step.reason}")
        return  # one action at a time, as a person would


def _earlier_unfinished(run: PlaybookRun, position: int) -> bool:
    return run.steps.filter(position__lt=position).exclude(state__in=[RunStepState.DONE, RunStepState.SKIPPED]).exists()


def _execute(pool: Pool, driver: Any) -> None:
    """The execution worker's part, for this pool only: run approved proposals, follow them to Ready."""
    for proposal in Proposal.objects.filter(pool=pool, state__in=[ProposalState.APPROVED, ProposalState.EXECUTING]):
        if proposal.state == ProposalState.APPROVED or proposal.applied_at is None:
            scaling.execute(proposal.pk, driver)
        else:
            scaling.track_readiness(proposal, driver)


def score(drill: Drill) -> dict[str, Any]:
    """Time to acknowledge and to approve (wall seconds, what people took), time to ready, and SLO attainment
    (requests answered within the TTFT SLO without error, from the surge to the end, on the model clock)."""
    incident = drill.incident
    run = incident.playbook_runs.first()
    proposals = list(Proposal.objects.filter(pool=drill.pool).order_by("created_at"))
    decided = next((p for p in proposals if p.decided_at), None)
    ready = next((p for p in proposals if p.state == ProposalState.SUCCEEDED), None)
    seconds = lambda later, earlier: round((later - earlier).total_seconds(), 1) if later and earlier else None  # noqa: E731
    scored = [tick for tick in drill.ticks if tick["t"] >= SCENARIOS[drill.scenario].surge_at_s]
    total = sum(tick["requests"] for tick in scored)
    good = sum(tick["good_requests"] for tick in scored)
    return {
        "scenario": drill.scenario, "playbook": drill.playbook.name if drill.playbook else "", "incident": incident.pk,
        "time_to_acknowledge_s": seconds(incident.acknowledged_at, incident.opened_at),
        "time_to_approve_s": seconds(decided.decided_at, decided.created_at) if decided else None,
        "time_to_ready_s": seconds(ready.finished_at, ready.created_at) if ready else None,
        "slo_attainment": round(good / total, 4) if total else None,
        "requests": round(total), "peak_ttft_p95_s": max((tick["ttft_p95_s"] for tick in scored), default=None),
        "peak_ready_replicas": max((tick["ready"] for tick in drill.ticks), default=0),
        "steps": [{"position": s.position, "title": s.title, "kind": s.kind, "state": s.state, "reason": s.reason}
                  for s in run.steps.order_by("position")] if run else [],
    }


def run_drill(playbook: Playbook, scenario_name: str, *, responder: AbstractBaseUser | None = None,
              speed: float = 10.0, duration_s: float = 600.0,
              on_tick: Callable[[dict[str, Any]], None] | None = None) -> DrillResult:
    """Play `scenario_name` against a fresh sandbox pool and run `playbook` in the incident it opens."""
    if scenario_name not in SCENARIOS:
        raise DrillError(f"unknown scenario {scenario_name!r}; scenarios: {', '.join(SCENARIOS)}")
    if not playbook.steps.exists():
        raise DrillError(f"playbook {playbook} has no steps")
    if responder is not None and not core.has_role(responder, playbook.team, Role.OPERATOR):
        raise DrillError(f"{responder.get_username()} is not an operator of team {playbook.team}")
    scenario = SCENARIOS[scenario_name]
    namespace = f"drill-{secrets.token_hex(3)}"
    actor = core.Actor(responder, ActorChannel.WEB) if responder is not None else None
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="drill", max_num_seqs=2)
    with Fleet(speed=speed) as fleet, SandboxCluster(fleet, route_namespace=namespace) as kube, \
            override_settings(KUBERNETES_ENABLED=True):  # the sandbox's own emulated API, nothing else
        kube.add_pool(PoolSpec(name="vllm-drill", profile=profile, namespace=namespace, replicas=scenario.replicas,
                               cold_start_s=scenario.cold_start_s, max_replicas=12))
        wait = scenario.cold_start_s / speed + 10
        if not all(replica.wait_ready(timeout=wait) for replica in kube.replicas(namespace, "vllm-drill")):
            raise DrillError(f"the sandbox's first replicas were not Ready within {wait:.0f} s")
        pool = _drill_pool(playbook, kube, namespace)
        play = _Play(pool, playbook, scenario, actor, on_tick)
        try:
            _wait_for_the_deployment(pool, scenario, wait)
            play.run(speed, duration_s)
            if play.drill is None:
                raise DrillError(f"the scenario {scenario_name} never broke the SLO; nothing to practise")
        except BaseException as error:  # Ctrl-C too: an unfinished drill's incident would stay open for good
            _retire_early(pool, play.drill, play.ticks, error)
            raise
        drill = play.drill
        result = _finish(drill, play.ticks)
    drill.refresh_from_db()
    return DrillResult(drill, result)


def _wait_for_the_deployment(pool: Pool, scenario: Scenario, wait: float) -> None:
    # The Deployment's status counts the Ready replicas a moment after they are: a first tick that read 0
    # ready opened the incident before the scenario began and sized the pre-scale from the calm rate.
    driver = cluster_driver(pool.cluster)
    deadline = time.monotonic() + wait
    while driver.status(workload_of(pool)).ready < scenario.replicas:
        if time.monotonic() > deadline:
            raise DrillError(f"the sandbox's Deployment did not report {scenario.replicas} Ready within {wait:.0f} s")
        time.sleep(0.05)


class _Play:
    """The scenario's ticks against the pool; what it opened and recorded stays readable if it stops early."""

    def __init__(self, pool: Pool, playbook: Playbook, scenario: Scenario, actor: core.Actor | None,
                 on_tick: Callable[[dict[str, Any]], None] | None) -> None:
        self.pool, self.playbook, self.scenario, self.actor, self.on_tick = pool, playbook, scenario, actor, on_tick
        self.fluid = Fluid()
        self.ticks: list[dict[str, Any]] = []
        self.drill: Drill | None = None
        self.playbook_run: PlaybookRun | None = None

    def run(self, speed: float, duration_s: float) -> None:
        driver = cluster_driver(self.pool.cluster)
        started = time.monotonic()
        for number in range(int(duration_s / TICK_S) + 1):
            time.sleep(max(0.0, started + number * TICK_S / speed - time.monotonic()))
            self.tick(driver, number * TICK_S, timezone.now())

    def tick(self, driver: Any, t: float, now: datetime) -> None:
        pool, scenario = self.pool, self.scenario
        status = driver.status(workload_of(pool))
        scaling.record_status(pool, status, now)
        rate = scenario.rate_at(t)
        dead = min(scenario.dead_replicas, status.ready) if t >= scenario.surge_at_s else 0
        signals = self.fluid.step(rate, status.ready, dead, TICK_S)
        within = signals["ttft_p95_s"] <= SLO_TTFT_S
        tick = {"t": t, "rate_rps": rate, "ready": status.ready, "desired": status.desired, **signals,
                "requests": rate * TICK_S, "good_requests": rate * TICK_S * (1 - signals["error_rate"]) * within}
        self.ticks.append(tick)
        _record_signals(pool, tick, now)
        if self.drill is None and (not within or signals["error_rate"] > MAX_ERROR_RATE):
            self.drill = _open(pool, self.playbook, scenario, signals, now)
            self.playbook_run = playbooks.start_run(self.drill.incident, self.playbook, incidents.AUTO, now)
        if self.playbook_run is not None and self.actor is not None:
            _respond(self.playbook_run, self.actor)
        _execute(pool, driver)
        if self.on_tick:
            self.on_tick(tick)


__all__ = ["SCENARIOS", "DrillError", "DrillResult", "run_drill", "score"]
