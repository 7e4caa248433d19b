"""Traffic shifts in the sandbox: real route weights in the Kubernetes API emulator, real requests through the
sandbox gateway to emulated vLLM replicas, PostgreSQL rows. The guard signals are what the control loop would
store for each pool at its tick (PlannerMemory); here they are measured from the requests this test sends."""
from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest
import requests
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel, Role
from controlplane.models import AuditEvent, Cluster, Membership, Pool, Team
from sandbox.fleet import Fleet
from sandbox.gateway import Gateway
from sandbox.kube import resources as res
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from scaling import loop, services, traffic
from scaling.choices import ShiftPhase
from scaling.drivers.cluster import ReplicaStatus
from scaling.drivers.registry import cluster_driver, route_router, workload_of
from scaling.engine.planner import Decision, PlannerState
from scaling.models import PlannerMemory, Proposal, TrafficShift
from scaling.sim.profiles import get_profile

from tests.core.conftest import alice, charlie, cluster, ml_team, search_team  # noqa: F401

NS = "inference"
ROUTE = "sandbox-route"
GIVING, RECEIVING = "vllm-chat-8b", "vllm-chat-8b-warm"
REQUESTS_PER_TICK = 20


@pytest.fixture
def sandbox(request, settings) -> Iterator[tuple[SandboxCluster, Gateway]]:  # noqa: ANN001
    """The pools behind an HTTPRoute, or an Istio VirtualService with `indirect` parametrization."""
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=4,
                                  itl_ms_base=1.0, itl_ms_per_seq=0.0)
    route_kind = getattr(request, "param", "httproute")
    with Fleet() as fleet, SandboxCluster(fleet, route_namespace=NS, route_kind=route_kind) as kube:
        kube.add_pool(PoolSpec(name=GIVING, profile=profile, namespace=NS, model="chat", cold_start_s=0, weight=100))
        kube.add_pool(PoolSpec(name=RECEIVING, profile=profile, namespace=NS, model="chat-warm", cold_start_s=0,
                               weight=0))
        for name in (GIVING, RECEIVING):
            assert all(replica.wait_ready(timeout=5) for replica in kube.replicas(NS, name))
        settings.KUBERNETES_ENABLED = True
        gateway = Gateway(kube).start()
        yield kube, gateway
        gateway.stop()


def _pool(cluster: Cluster, team: Team, name: str, deployment: str) -> Pool:  # noqa: F811
    return Pool.objects.create(cluster=cluster, team=team, name=name, namespace=NS, deployment=deployment,
                               model_name=name, gpu_type="H100", min_replicas=1, max_replicas=8,
                               replica_capacity_rps=50.0, route_name=ROUTE, route_backend=deployment)


@pytest.fixture
def pools(cluster: Cluster, ml_team: Team, sandbox: tuple[SandboxCluster, Gateway]) -> tuple[Pool, Pool]:  # noqa: F811
    Cluster.objects.filter(pk=cluster.pk).update(kube_api_url=sandbox[0].url)
    cluster.refresh_from_db()
    return _pool(cluster, ml_team, "chat-8b", GIVING), _pool(cluster, ml_team, "chat-8b-warm", RECEIVING)


def _weights(kube: SandboxCluster) -> dict[str, int]:
    return {pool.name: weight for pool, weight in kube.route_weights()}


def observe(kube: SandboxCluster, gateway: Gateway, pools: tuple[Pool, Pool], now: datetime) -> dict[str, int]:
    """One loop tick's worth of signals: requests through the gateway, each pool's latency and errors as the
    loop would store them, and the replicas the cluster reports. Returns how many requests each pool served."""
    latencies: dict[str, list[float]] = {GIVING: [], RECEIVING: []}
    errors = dict.fromkeys(latencies, 0)

    def send(_: int) -> tuple[str, float, bool]:
        started = time.monotonic()
        response = requests.post(gateway.url + "/v1/completions", timeout=30,
                                 json={"model": "chat", "prompt": "hi", "max_tokens": 1})
        return response.headers["x-sandbox-pool"], time.monotonic() - started, response.status_code >= 500

    # At once, as a tick's users would: an injected latency then costs the tick its length once, not 20 times.
    with ThreadPoolExecutor(REQUESTS_PER_TICK) as clients:
        for served_by, latency, failed in clients.map(send, range(REQUESTS_PER_TICK)):
            latencies[served_by].append(latency)
            errors[served_by] += failed
    driver = cluster_driver(pools[0].cluster)
    for pool in pools:
        served = latencies[pool.deployment]
        status = driver.status(workload_of(pool))
        services.record_status(pool, status, now)
        signals = {"request_rate_rps": len(served) / 15.0, "ttft_p95_s": None, "error_rate": None}
        if served:  # no request: no data, as an empty Prometheus answer
            p95 = statistics.quantiles(served, n=20, method="inclusive")[18] if len(served) > 1 else served[0]
            signals.update(ttft_p95_s=round(p95, 4), error_rate=errors[pool.deployment] / len(served))
        PlannerMemory.objects.update_or_create(pool=pool, defaults={
            "last_signals": signals, "last_decision": {"at": now.isoformat(), "capacity_per_replica_rps": 50.0}})
    return {name: len(served) for name, served in latencies.items()}


def _steps_entered(shift: TrafficShift) -> list[int]:
    return [event.step for event in shift.events.filter(to_phase=ShiftPhase.STEPPING).exclude(from_phase=ShiftPhase.STEPPING)]


def _start(pools: tuple[Pool, Pool], user: User, **options) -> TrafficShift:  # noqa: ANN003
    return traffic.start(pools[0], pools[1], core.Actor(user, Channel.API), **options)


@pytest.mark.parametrize("sandbox", ["httproute", "virtualservice"], indirect=True)
def test_a_shift_steps_80_95_100_and_completes(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice, router_kind=kube.route.resource.kind.lower(), hold_s=30, max_p95_s=2.0)
    assert shift.phase == ShiftPhase.PENDING and _weights(kube) == {GIVING: 100, RECEIVING: 0}
    now, timeline = timezone.now(), []
    for _ in range(20):
        observe(kube, gateway, pools, now)
        shift = traffic.tick(shift.pk, now=now)
        timeline.append((shift.phase, shift.step, dict(_weights(kube))))
        if shift.phase == ShiftPhase.COMPLETED:
            break
        now += timedelta(seconds=15)
    assert shift.phase == ShiftPhase.COMPLETED, timeline
    assert _steps_entered(shift) == [1, 2, 3]
    seen = [weights for phase, _, weights in timeline]
    assert {GIVING: 20, RECEIVING: 80} in seen and {GIVING: 5, RECEIVING: 95} in seen
    assert _weights(kube) == {GIVING: 0, RECEIVING: 100} == shift.current_weights
    assert observe(kube, gateway, pools, now) == {GIVING: 0, RECEIVING: REQUESTS_PER_TICK}
    # Each step was held 30 s under a passing guard: two 15-s ticks after the write.
    holds = [(phase, step) for phase, step, _ in timeline if phase == ShiftPhase.HOLDING]
    assert holds.count((ShiftPhase.HOLDING, 1)) >= 2 and holds.count((ShiftPhase.HOLDING, 2)) >= 2
    audited = AuditEvent.objects.filter(object_type="scaling.trafficshift", object_id=str(shift.pk))
    assert {"shift-start", "shift-stepping", "shift-holding", "shift-completed"} <= set(
        audited.values_list("action", flat=True))


def test_injected_latency_on_the_receiving_backend_rolls_it_back(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=60, max_p95_s=0.5, failure_threshold=2)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    shift = traffic.tick(shift.pk, now=now)
    assert (shift.phase, shift.step, _weights(kube)) == (ShiftPhase.HOLDING, 1, {GIVING: 20, RECEIVING: 80})
    [pod] = [replica.name for replica in kube.replicas(NS, RECEIVING)]
    requests.put(f"{kube.url}/sandbox/pods/{NS}/{pod}/faults", json={"extra_latency_s": 0.8}, timeout=5)
    ticks_with_data = 0
    for _ in range(6):
        now += timedelta(seconds=15)
        served = observe(kube, gateway, pools, now)
        ticks_with_data += served[RECEIVING] > 0
        shift = traffic.tick(shift.pk, now=now)
        if shift.phase == ShiftPhase.ROLLED_BACK:
            break
    assert shift.phase == ShiftPhase.ROLLED_BACK and ticks_with_data == shift.failure_threshold == shift.failed_checks
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0} == shift.current_weights  # the last good: the start
    failed = shift.events.filter(comment__startswith="check failed")
    assert failed.count() == 2 and "p95" in failed.first().comment
    assert observe(kube, gateway, pools, now) == {GIVING: REQUESTS_PER_TICK, RECEIVING: 0}


class WorkerKilled(BaseException):
    """The process dies: nothing after this point runs, not even `except Exception` handlers."""


class Dies:
    """A router whose worker dies before its write is sent, or after it landed and before it is recorded."""

    def __init__(self, router, after_write: bool) -> None:  # noqa: ANN001
        self.router, self.after_write, self.scheme = router, after_write, router.scheme

    def read(self, route, backends=None):  # noqa: ANN001, ANN201
        return self.router.read(route, backends)

    def set_weights(self, route, target, premise):  # noqa: ANN001, ANN201
        if self.after_write:
            self.router.set_weights(route, target, premise)
        raise WorkerKilled


@pytest.mark.parametrize("after_write", [False, True], ids=["before-the-write", "after-the-write"])
def test_a_worker_killed_mid_step_resumes_without_skipping_or_repeating(sandbox, pools, alice: User,  # noqa: ANN001, F811
                                                                         after_write: bool) -> None:
    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=15)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    with pytest.raises(WorkerKilled):
        traffic.tick(shift.pk, router=Dies(route_router(shift.cluster, shift.router_kind), after_write), now=now)
    shift.refresh_from_db()
    assert (shift.phase, shift.step) == (ShiftPhase.STEPPING, 1)  # the intent was committed before the write
    assert _weights(kube) == ({GIVING: 20, RECEIVING: 80} if after_write else {GIVING: 100, RECEIVING: 0})
    version = kube.store.get(res.HTTPROUTES, NS, ROUTE)["metadata"]["resourceVersion"]
    shift = traffic.tick(shift.pk, now=now)  # the next worker
    assert (shift.phase, shift.step) == (ShiftPhase.HOLDING, 1) and _weights(kube) == {GIVING: 20, RECEIVING: 80}
    rewritten = kube.store.get(res.HTTPROUTES, NS, ROUTE)["metadata"]["resourceVersion"] != version
    assert rewritten is not after_write  # a write that landed is not made again
    assert shift.events.last().data["wrote"] is not after_write
    for _ in range(8):
        now += timedelta(seconds=15)
        observe(kube, gateway, pools, now)
        shift = traffic.tick(shift.pk, now=now)
    assert shift.phase == ShiftPhase.COMPLETED and _steps_entered(shift) == [1, 2, 3]


def test_a_409_mid_write_is_reread_and_the_step_lands(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    kube.api.faults.conflict_storm = 2
    shift = traffic.tick(shift.pk, now=now)
    assert (shift.phase, _weights(kube)) == (ShiftPhase.HOLDING, {GIVING: 20, RECEIVING: 80})
    assert shift.events.last().data["conflicts"] == 2


def test_someone_elses_weights_end_the_shift_without_a_write(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice)

    def by_hand(route: dict) -> dict:
        route["spec"]["rules"][0]["backendRefs"][0]["weight"] = 50
        route["spec"]["rules"][0]["backendRefs"][1]["weight"] = 50
        return route

    kube.store.update(res.HTTPROUTES, NS, ROUTE, by_hand)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    shift = traffic.tick(shift.pk, now=now)
    assert shift.phase == ShiftPhase.FAILED and "changed by someone else" in shift.last_error
    assert _weights(kube) == {GIVING: 50, RECEIVING: 50}


def test_a_gate_waits_for_a_person_and_the_guard_still_watches(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=15, gated_steps=[2])
    now = timezone.now()
    for _ in range(3):
        observe(kube, gateway, pools, now)
        shift = traffic.tick(shift.pk, now=now)
        now += timedelta(seconds=15)
    assert (shift.phase, shift.step) == (ShiftPhase.WAITING_APPROVAL, 1)
    assert shift.events.filter(to_phase=ShiftPhase.WAITING_APPROVAL).count() == 1  # notified once
    traffic.approve(shift.pk, core.Actor(alice, Channel.WEB))
    observe(kube, gateway, pools, now)
    shift = traffic.tick(shift.pk, now=now)
    assert (shift.phase, shift.step, _weights(kube)) == (ShiftPhase.HOLDING, 2, {GIVING: 5, RECEIVING: 95})


def test_a_short_receiving_pool_holds_the_next_step(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=15)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    # 80 % of 200 req/s at 50 req/s per replica needs 4 ready receiving replicas; it has 1.
    PlannerMemory.objects.filter(pool=pools[0]).update(last_signals={"request_rate_rps": 200.0})
    shift = traffic.tick(shift.pk, now=now)
    assert shift.phase == ShiftPhase.PENDING and "needs 4 ready replicas" in shift.last_check["why"]
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}


def test_pause_resume_and_a_person_rolling_back(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    actor = core.Actor(alice, Channel.API)
    shift = _start(pools, alice, hold_s=15)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    traffic.tick(shift.pk, now=now)
    traffic.pause(shift.pk, actor)
    for _ in range(3):
        now += timedelta(seconds=15)
        observe(kube, gateway, pools, now)
        shift = traffic.tick(shift.pk, now=now)
    assert (shift.phase, shift.step) == (ShiftPhase.PAUSED, 1)  # paused: no further step
    with pytest.raises(traffic.ShiftConflict):
        traffic.pause(shift.pk, actor)
    shift = traffic.resume(shift.pk, actor)
    assert shift.phase == ShiftPhase.HOLDING
    shift = traffic.rollback(shift.pk, actor, "not today")
    assert shift.phase == ShiftPhase.ROLLED_BACK and _weights(kube) == {GIVING: 100, RECEIVING: 0}
    with pytest.raises(traffic.ShiftConflict, match="nothing to roll back"):
        traffic.rollback(shift.pk, actor)


def test_the_giving_pool_is_not_scaled_down_while_a_shift_moves_its_traffic(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    """Signals are per pool: while 20 % goes to the receiving pool, the giving pool's own rate falls by as much.
    The loop must not read that as a drop in demand: a rollback brings the traffic back at once."""
    kube, gateway = sandbox
    giving = pools[0]
    services.record_status(giving, ReplicaStatus(4, 4), timezone.now())
    lower = Decision(target_replicas=3, current_replicas=4, ready_replicas=4, arriving_replicas=0, terms=(),
                     binding="reactive", reasons=("request rate fell 20 %",), hold=False, signals_unknown_for_s=0.0,
                     staleness_alert=False, capacity_per_replica_rps=1.0, prescale=None, state=PlannerState())
    shift = _start(pools, alice)
    did = loop.act(giving, lower, {}, {}, timezone.now())
    assert did == [f"no scale-down while shift #{shift.pk} moves traffic away (pending): "
                   "the pool keeps the capacity to take it back"]
    assert not Proposal.objects.exists()
    traffic.rollback(shift.pk, core.Actor(alice, Channel.API))
    assert loop.act(giving, lower, {}, {}, timezone.now())[0].startswith("proposal #")  # no shift: it may


def test_an_outsider_cannot_start_or_roll_back(sandbox, pools, alice: User, charlie: User) -> None:  # noqa: ANN001, F811
    with pytest.raises(traffic.ShiftForbidden, match="operator role in team ML Platform"):
        _start(pools, charlie)
    shift = _start(pools, alice)
    with pytest.raises(traffic.ShiftForbidden):
        traffic.rollback(shift.pk, core.Actor(charlie, Channel.API))


def test_the_same_key_answers_with_the_same_shift(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    first = _start(pools, alice, idempotency_key="surge-1")
    assert _start(pools, alice, idempotency_key="surge-1").pk == first.pk
    with pytest.raises(traffic.ShiftConflict, match="already moving traffic"):
        _start(pools, alice, idempotency_key="surge-2")


def test_the_pool_page_shows_the_shift_and_its_weights(sandbox, pools, alice: User, client) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=300)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    traffic.tick(shift.pk, now=now)
    client.force_login(alice)
    for pool in pools:  # both ends of the shift show it
        page = client.get(f"/pools/{pool.pk}/live/").content.decode()
        assert f"Traffic shift #{shift.pk}" in page and "step <b>1</b> of 3 (80 % to vllm-chat-8b-warm)" in page
        assert "<td><code>vllm-chat-8b-warm</code></td><td class=\"num\">80</td>" in page
        assert "Failed checks <b>0</b> of 3" in page


def test_a_cluster_the_team_may_no_longer_use_stops_the_shift(sandbox, pools, alice: User,  # noqa: ANN001, F811
                                                               search_team: Team) -> None:  # noqa: F811
    kube, gateway = sandbox
    shift = _start(pools, alice)
    Cluster.objects.filter(pk=shift.cluster_id).update(team=search_team)  # now another team's, not shared
    shift = traffic.tick(shift.pk)
    assert shift.phase == ShiftPhase.FAILED and "not shared with team ML Platform" in shift.last_error
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}


def test_the_beat_ticks_every_active_shift(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    from controlplane.celery import app
    from scaling import tasks

    entry = app.conf.beat_schedule["advance-shifts"]
    assert entry["task"] == tasks.advance_shifts.name and entry["options"]["expires"] < entry["schedule"] == 15.0
    kube, gateway = sandbox
    shift = _start(pools, alice)
    observe(kube, gateway, pools, timezone.now())
    tasks.advance_shifts()
    shift.refresh_from_db()
    assert (shift.phase, shift.step, _weights(kube)) == (ShiftPhase.HOLDING, 1, {GIVING: 20, RECEIVING: 80})


def test_the_pool_page_pauses_rolls_back_and_approves(sandbox, pools, alice: User, charlie: User,  # noqa: ANN001, F811
                                                      ml_team: Team, client) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=15, gated_steps=[1])
    now = timezone.now()
    observe(kube, gateway, pools, now)
    shift = traffic.tick(shift.pk, now=now)
    assert shift.phase == ShiftPhase.WAITING_APPROVAL
    client.force_login(alice)
    page = client.get(f"/pools/{pools[1].pk}/live/").content.decode()
    assert "Approve step 1</button>" in page and "Roll back</button>" in page
    approved = client.post(f"/shifts/{shift.pk}/approve/")
    assert approved.status_code == 200 and TrafficShift.objects.get(pk=shift.pk).approved_step == 1
    paused = client.post(f"/shifts/{shift.pk}/pause/", {"comment": "look first"})
    assert paused.status_code == 200 and "Resume</button>" in paused.content.decode()
    again = client.post(f"/shifts/{shift.pk}/pause/")
    assert again.status_code == 409 and "only a pending, holding or waiting shift pauses" in again.content.decode()
    viewer = User.objects.create_user("victor", password="pw-victor")
    Membership.objects.create(user=viewer, team=ml_team, role=Role.VIEWER)
    client.force_login(viewer)
    assert "Roll back</button>" not in client.get(f"/pools/{pools[1].pk}/live/").content.decode()
    refused = client.post(f"/shifts/{shift.pk}/rollback/")
    assert refused.status_code == 403 and "operator role in team ML Platform" in refused.content.decode()
    client.force_login(charlie)
    assert client.post(f"/shifts/{shift.pk}/rollback/").status_code == 404  # not even visible
    client.force_login(alice)
    rolled = client.post(f"/shifts/{shift.pk}/rollback/")
    assert rolled.status_code == 200 and "Rolled back" in rolled.content.decode()
    assert "Roll back</button>" not in rolled.content.decode()
    assert TrafficShift.objects.get(pk=shift.pk).events.filter(channel=Channel.WEB).count() == 3


def test_a_failure_at_the_second_step_returns_to_the_first(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=15, max_p95_s=0.5, failure_threshold=2)
    now = timezone.now()
    while shift.step < 2:
        observe(kube, gateway, pools, now)
        shift = traffic.tick(shift.pk, now=now)
        now += timedelta(seconds=15)
    assert (shift.phase, _weights(kube)) == (ShiftPhase.HOLDING, {GIVING: 5, RECEIVING: 95})
    [pod] = [replica.name for replica in kube.replicas(NS, RECEIVING)]
    requests.put(f"{kube.url}/sandbox/pods/{NS}/{pod}/faults", json={"extra_latency_s": 0.8}, timeout=5)
    for _ in range(4):
        observe(kube, gateway, pools, now)
        shift = traffic.tick(shift.pk, now=now)
        now += timedelta(seconds=15)
        if shift.phase == ShiftPhase.ROLLED_BACK:
            break
    assert (shift.phase, shift.rollback_step) == (ShiftPhase.ROLLED_BACK, 1)
    assert _weights(kube) == {GIVING: 20, RECEIVING: 80}  # the last good step, not the start


def test_a_worker_killed_after_a_rollback_write_finishes_it_without_writing_again(sandbox, pools,  # noqa: ANN001, F811
                                                                                  alice: User) -> None:  # noqa: F811
    kube, gateway = sandbox
    shift = _start(pools, alice)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    shift = traffic.tick(shift.pk, now=now)
    assert _weights(kube) == {GIVING: 20, RECEIVING: 80}
    with pytest.raises(WorkerKilled):
        traffic.rollback(shift.pk, core.Actor(alice, Channel.API),
                         router=Dies(route_router(shift.cluster, shift.router_kind), after_write=True))
    shift.refresh_from_db()
    assert shift.phase == ShiftPhase.ROLLING_BACK and _weights(kube) == {GIVING: 100, RECEIVING: 0}
    version = kube.store.get(res.HTTPROUTES, NS, ROUTE)["metadata"]["resourceVersion"]
    shift = traffic.tick(shift.pk)
    assert shift.phase == ShiftPhase.ROLLED_BACK and shift.events.last().data["wrote"] is False
    assert kube.store.get(res.HTTPROUTES, NS, ROUTE)["metadata"]["resourceVersion"] == version


def test_a_pool_whose_shift_moves_a_route_cannot_be_deleted_until_it_is_rolled_back(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    from tests.core.conftest import token_client

    kube, gateway = sandbox
    shift = _start(pools, alice, hold_s=30)
    now = timezone.now()
    observe(kube, gateway, pools, now)
    shift = traffic.tick(shift.pk, now=now)
    assert shift.phase in (ShiftPhase.STEPPING, ShiftPhase.HOLDING) and _weights(kube) != {GIVING: 100, RECEIVING: 0}
    admin = User.objects.create_user("admin-ml")
    Membership.objects.create(user=admin, team=pools[1].team, role=Role.ADMIN)
    # Deleted, the pool took its shift with it and left the route half-shifted, with no writer to roll it back.
    for url in (f"/api/v1/pools/{pools[1].pk}/", f"/api/v1/pools/{pools[0].pk}/"):
        answer = token_client(admin).delete(url)
        assert answer.status_code == 409 and f"shift #{shift.pk}" in answer.data["detail"], (url, answer.data)
    assert TrafficShift.objects.filter(pk=shift.pk).exists()
    traffic.rollback(shift.pk, core.Actor(alice, Channel.API), "not today")
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}
    assert token_client(admin).delete(f"/api/v1/pools/{pools[1].pk}/").status_code == 204
