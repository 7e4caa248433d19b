"""Safe to leave running (issue 11): every write checks its premise, pre-scales never block the
safety net, nothing is stuck, rate limits count what happened, the two-person rule means two
people, keys are scoped, and what is recorded is what happened. Against the Kubernetes API emulator."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from kubernetes import client

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Cluster, Pool
from sandbox.kube.cluster import SandboxCluster
from sandbox.replica import wait_until
from scaling import loop, services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.cluster import ScaleOutcome, ScalePremise, Workload
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.engine.planner import PlannerState
from scaling.models import ColdStart, PlannerMemory, Proposal

from tests.core.conftest import token_client
from tests.isolation import closed_port

NS = "inference"
PLANNER = core.Actor(user=None, channel=Channel.AUTO)


def _api(user: User) -> core.Actor:
    return core.Actor(user=user, channel=Channel.API)


def _apps(kube: SandboxCluster) -> client.AppsV1Api:
    return client.AppsV1Api(client.ApiClient(client.Configuration(host=kube.url)))


def _replicas(kube: SandboxCluster) -> int:
    return _apps(kube).read_namespaced_deployment_scale("vllm-chat-8b", NS).spec.replicas


def _someone_scales_to(kube: SandboxCluster, replicas: int) -> None:
    _apps(kube).patch_namespaced_deployment_scale("vllm-chat-8b", NS, {"spec": {"replicas": replicas}})


def _approved(pool: Pool, current: int, target: int, proposer: User, approver: User,
              kind: str = ProposalKind.MANUAL) -> Proposal:
    """A proposal approved by a person whose execution has not run yet (its task still queued)."""
    proposal = services.propose(pool, target, kind, _api(proposer), current=current)
    Proposal.objects.filter(pk=proposal.pk).update(state=ProposalState.APPROVED, decided_by=approver,
                                                   decided_channel=Channel.API, decided_at=timezone.now())
    return Proposal.objects.get(pk=proposal.pk)


# --- 1. every write checks its premise -----------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "decided_from", "target", "live", "writes"),
    [
        ("a scale-up still going up", 4, 12, 4, True),
        ("a scale-up someone half did", 4, 12, 8, True),
        ("a scale-up already done", 4, 12, 12, True),
        ("a scale-up onto more than its target", 4, 12, 14, False),
        ("a scale-down still going down", 9, 8, 9, True),
        ("a scale-down onto fewer (the restarted demo's 1)", 9, 8, 1, False),
        ("a scale-down onto more than approved", 9, 8, 20, False),
        ("a no-change proposal that no longer matches", 3, 3, 5, False),
    ],
)
def test_the_premise_allows_only_the_approved_direction(case: str, decided_from: int, target: int, live: int,
                                                        writes: bool) -> None:
    assert (ScalePremise(decided_from, target).refusal(live) is None) == writes, case


@pytest.mark.parametrize(
    ("case", "earlier", "generation", "holds", "writes"),
    [
        ("a first attempt", None, 9, 1, True),
        ("resumed, nothing changed since the earlier read", 4, 4, 1, True),
        ("resumed, the earlier write landed and stands", 4, 5, 3, True),
        ("resumed, the earlier write landed and was undone", 4, 6, 1, False),
        ("resumed, someone else changed the spec", 4, 5, 1, False),
        ("resumed, the object's generation unknown", 4, None, 1, True),
    ],
)
def test_a_resumed_attempt_writes_only_onto_an_unchanged_spec(case: str, earlier: int | None,
                                                             generation: int | None, holds: int,
                                                             writes: bool) -> None:
    premise = ScalePremise(decided_from=1, target=3, earlier_generation=earlier)
    assert (premise.undone(generation, holds) is None) == writes, case


def test_an_approved_scale_up_is_refused_as_stale_when_someone_scaled_past_it(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    proposal = _approved(kube_pool, current=1, target=3, proposer=alice, approver=bob)
    _someone_scales_to(kube, 5)  # between approval and execution
    done = services.execute(proposal.pk, KubernetesDriver(kube.url))
    assert done.state == ProposalState.STALE and _replicas(kube) == 5
    assert "scale-up 1 → 3" in done.last_error and "runs 5" in done.last_error
    stale = done.events.get(to_state=ProposalState.STALE)
    assert stale.data == {"decided_from": 1, "target_replicas": 3, "live": 5}
    assert not AuditEvent.objects.filter(action="scale", object_id=str(proposal.pk)).exists()


def test_a_leftover_scale_down_cannot_scale_a_fresh_pool_up(kube_pool: Pool, alice: User, bob: User,
                                                             kube: SandboxCluster) -> None:
    # "9 → 8" from before a restart; the fresh pool runs 1.
    Pool.objects.filter(pk=kube_pool.pk).update(max_replicas=10)
    kube_pool.refresh_from_db()
    proposal = _approved(kube_pool, current=9, target=8, proposer=alice, approver=bob)
    done = services.execute(proposal.pk, KubernetesDriver(kube.url))
    assert done.state == ProposalState.STALE and _replicas(kube) == 1
    assert "would add 7" in done.last_error


def test_the_next_tick_decides_afresh_after_a_stale_proposal(kube_pool: Pool, alice: User, bob: User,
                                                             kube: SandboxCluster, settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    proposal = _approved(kube_pool, current=1, target=3, proposer=alice, approver=bob)
    _someone_scales_to(kube, 5)
    services.execute(proposal.pk, KubernetesDriver(kube.url))
    report = loop.tick([kube_pool])
    assert report.pools[0].decided["current_replicas"] == 5  # the new premise is what the cluster runs now


def test_a_newer_decision_supersedes_an_approved_proposal_not_yet_executed(pool: Pool, alice: User, bob: User) -> None:
    approved = _approved(pool, current=1, target=6, proposer=alice, approver=bob)
    newer = services.propose(pool, 3, ProposalKind.MANUAL, _api(alice), current=1)
    approved.refresh_from_db()
    assert approved.state == ProposalState.SUPERSEDED and newer.state == ProposalState.PENDING
    assert services.claim_execution(approved.pk) is None  # nothing left to run


# --- 2. unknown is never current -----------------------------------------------------------------


def test_a_failed_kubernetes_read_leaves_the_current_count_unknown(kube_pool: Pool, kube: SandboxCluster,
                                                                   settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    kube.api.faults.error_rate = 1.0
    report = loop.tick([kube_pool])
    assert any(where.endswith(": kubernetes") for where in report.errors)
    decided = report.pools[0].decided
    assert decided["current_replicas"] is None and report.pools[0].did == []
    assert not Proposal.objects.exists()


# --- 3. pending pre-scales do not block the safety net ------------------------------------------


def test_a_pending_pre_scale_does_not_block_an_auto_approved_reactive_scale_up(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    floor_until = timezone.now() + timedelta(minutes=30)
    prescale = services.propose(kube_pool, 8, ProposalKind.PRESCALE, PLANNER, current=1, floor_until=floor_until)
    assert prescale.state == ProposalState.PENDING  # 7 more replicas: past the reactive guardrail, a person decides
    reactive = services.propose(kube_pool, 3, ProposalKind.REACTIVE, PLANNER, current=1)
    assert reactive.state != ProposalState.PENDING and reactive.decided_channel == Channel.AUTO
    services.execute(reactive.pk, KubernetesDriver(kube.url))
    assert _replicas(kube) == 3
    prescale.refresh_from_db()
    assert prescale.state == ProposalState.PENDING
    # Approved later, the pre-scale composes with what the safety net did: 3 → 8, still a scale-up.
    services.approve(prescale.pk, _api(bob))
    done = services.execute(prescale.pk, KubernetesDriver(kube.url))
    assert done.applied_at is not None and _replicas(kube) == 8 and done.applied_from_replicas == 3


def test_the_pre_scale_floor_lasts_for_its_forecast_window(pool: Pool, bob: User) -> None:
    now = timezone.now()
    prescale = services.propose(pool, 6, ProposalKind.PRESCALE, PLANNER, current=1, floor_until=now + timedelta(minutes=30))
    services.approve(prescale.pk, _api(bob))
    Proposal.objects.filter(pk=prescale.pk).update(state=ProposalState.SUCCEEDED, finished_at=now)
    assert loop.approved_floor(pool, now + timedelta(minutes=10)) == 6  # executed, still inside its window
    assert loop.approved_floor(pool, now + timedelta(minutes=31)) == 0


# --- 4. nothing is stuck -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # so the approval commits and its on-commit hook really runs
def test_an_approval_whose_task_was_lost_is_picked_up_by_the_sweep(kube_pool: Pool, alice: User, bob: User,
                                                                   kube: SandboxCluster) -> None:
    from controlplane.celery import app

    # The broker is down: queuing the execution fails, the approval stands.
    saved = {key: app.conf[key] for key in ("task_always_eager", "broker_url", "task_publish_retry")}
    app.conf.update(task_always_eager=False, broker_url=f"redis://127.0.0.1:{closed_port()}/0",
                    task_publish_retry=False)
    try:
        proposal = services.propose(kube_pool, 3, ProposalKind.MANUAL, _api(alice), current=1)
        approved = services.approve(proposal.pk, _api(bob))
    finally:
        app.conf.update(saved)
    approved.refresh_from_db()
    assert approved.state == ProposalState.APPROVED and _replicas(kube) == 1
    counts = services.advance()
    assert counts["started"] == 1 and _replicas(kube) == 3
    assert Proposal.objects.get(pk=proposal.pk).applied_at is not None


class _BrokenDriver:
    """A driver with a bug: not a DriverError, an arbitrary exception."""

    def generation(self, workload: Workload) -> int | None:
        return 1

    def scale(self, workload: Workload, replicas: int, premise: ScalePremise | None = None) -> ScaleOutcome:
        raise KeyError("spec")


def test_any_exception_from_a_driver_is_recorded_and_counted(pool: Pool, alice: User, bob: User) -> None:
    proposal = _approved(pool, current=1, target=3, proposer=alice, approver=bob)
    done = services.execute(proposal.pk, _BrokenDriver())
    assert done.state == ProposalState.EXECUTING and done.attempts == 1
    assert "unexpected KeyError" in done.last_error and "next try in" in done.last_error


# --- 5. rate limits count what happened ----------------------------------------------------------


def test_only_accepted_changes_count_against_the_rate_limits(kube_pool: Pool, alice: User, bob: User,
                                                             kube: SandboxCluster) -> None:
    waiting = services.propose(kube_pool, 6, ProposalKind.MANUAL, _api(alice), current=1)
    memory = PlannerMemory.objects.filter(pool=kube_pool).first()
    assert memory is None or not PlannerState.from_dict(memory.state).scale_events  # pending: nothing happened
    services.approve(waiting.pk, _api(bob))
    done = services.execute(waiting.pk, KubernetesDriver(kube.url))
    events = PlannerState.from_dict(PlannerMemory.objects.get(pool=kube_pool).state).scale_events
    assert events == ((pytest.approx(done.applied_at.timestamp()), 5),)


# --- 6. one tick at a time, one pool's failure is one pool's -------------------------------------


def test_a_second_worker_skips_a_cluster_being_ticked(kube_pool: Pool, settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    now = timezone.now()
    assert loop.acquire_cluster(kube_pool.cluster, "worker-a", now)
    report = loop.tick([kube_pool], now=now, holder="worker-b")
    assert report.pools == [] and "worker-a" in report.skipped[kube_pool.cluster.name]
    loop.release_cluster(kube_pool.cluster, "worker-a", now)
    assert loop.tick([kube_pool], now=now, holder="worker-b").pools != []


def test_a_lease_of_a_dead_worker_runs_out(kube_pool: Pool, settings) -> None:  # noqa: ANN001
    now = timezone.now()
    assert loop.acquire_cluster(kube_pool.cluster, "worker-a", now)  # ...and worker-a dies
    assert not loop.acquire_cluster(kube_pool.cluster, "worker-b", now + timedelta(seconds=30))
    assert loop.acquire_cluster(kube_pool.cluster, "worker-b", now + timedelta(seconds=settings.TICK_LEASE_S + 1))


def test_one_pools_exception_is_recorded_for_it_and_the_others_are_planned(
        kube_pool: Pool, kube: SandboxCluster, settings, monkeypatch) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    broken = Pool.objects.create(cluster=kube_pool.cluster, team=kube_pool.team, name="broken", namespace=NS,
                                 deployment="vllm-broken", model_name="x", gpu_type="H100", max_replicas=4)
    real = loop.tick_pool

    def tick_pool(pool: Pool, *args: object, **kwargs: object) -> loop.PoolTick:
        if pool.pk == broken.pk:
            raise ZeroDivisionError("a bug in one pool's inputs")
        return real(pool, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "tick_pool", tick_pool)
    report = loop.tick([kube_pool, Pool.objects.select_related("cluster", "team").get(pk=broken.pk)])
    assert [p.pool for p in report.pools] == [str(kube_pool)]
    assert "ZeroDivisionError" in report.errors[f"{broken}: tick"]
    assert "a bug in one pool" in PlannerMemory.objects.get(pool=broken).last_error


# --- 8. the two-person rule means two people -----------------------------------------------------


def _two_person(pool: Pool, threshold: int = 4, off_hours: bool = False) -> Pool:
    Pool.objects.filter(pk=pool.pk).update(approval_policy={"two_person_min_delta": threshold})
    if off_hours:
        pool.cluster.off_hours = [{"weekdays": [0, 1, 2, 3, 4, 5, 6], "start": "00:00", "end": "12:00"},
                                  {"weekdays": [0, 1, 2, 3, 4, 5, 6], "start": "12:00", "end": "00:00"}]
        pool.cluster.save()
    return Pool.objects.select_related("cluster", "team").get(pk=pool.pk)


def test_off_hours_never_auto_approve_a_persons_change_above_the_threshold(pool: Pool, alice: User) -> None:
    pool = _two_person(pool, off_hours=True)
    large = services.propose(pool, 6, ProposalKind.MANUAL, _api(alice), current=1)
    assert large.state == ProposalState.PENDING
    small = services.propose(pool, 3, ProposalKind.MANUAL, _api(alice), current=1)
    assert small.decided_channel == Channel.AUTO  # under the threshold: the window approves it
    planner_made = services.propose(pool, 8, ProposalKind.PRESCALE, PLANNER, current=3)
    assert planner_made.decided_channel == Channel.AUTO  # the planner's own, inside min/max


def test_the_two_person_rule_covers_scale_downs(pool: Pool, alice: User, bob: User) -> None:
    pool = _two_person(pool)
    down = services.propose(pool, 1, ProposalKind.MANUAL, _api(alice), current=8)
    with pytest.raises(services.ProposalForbidden, match="second person"):
        services.approve(down.pk, _api(alice))
    assert services.approve(down.pk, _api(bob)).state == ProposalState.APPROVED


def test_the_two_person_rule_adds_up_small_steps(pool: Pool, alice: User) -> None:
    pool = _two_person(pool)
    first = services.propose(pool, 3, ProposalKind.MANUAL, _api(alice), current=1)
    services.approve(first.pk, _api(alice))  # +2: alone is fine
    Proposal.objects.filter(pk=first.pk).update(state=ProposalState.SUCCEEDED)
    step = services.propose(pool, 5, ProposalKind.MANUAL, _api(alice), current=3)
    with pytest.raises(services.ProposalForbidden, match=r"makes \+4 replicas"):
        services.approve(step.pk, _api(alice))


# --- 9. idempotency keys are scoped --------------------------------------------------------------


def test_a_key_used_by_another_team_makes_its_own_proposal(pool: Pool, search_pool: Pool, alice: User,
                                                          charlie: User) -> None:
    ours = services.propose(pool, 4, ProposalKind.MANUAL, _api(alice), current=1, idempotency_key="deploy-42")
    theirs = services.propose(search_pool, 2, ProposalKind.MANUAL, _api(charlie), current=1, idempotency_key="deploy-42")
    assert theirs.pk != ours.pk and theirs.pool_id == search_pool.pk


def test_callers_cannot_use_the_loops_keys(pool: Pool, alice: User) -> None:
    key = services.loop_idempotency_key(pool, ProposalKind.REACTIVE, 3, timezone.now())
    response = token_client(alice).post("/api/v1/proposals/", {"pool": pool.pk, "target_replicas": 3,
                                                               "idempotency_key": key}, format="json")
    assert response.status_code == 400 and "reserved" in str(response.data["idempotency_key"])
    assert not Proposal.objects.exists()


def test_another_teams_key_on_our_pool_is_a_new_proposal_or_a_clean_409(pool: Pool, alice: User) -> None:
    client_ = token_client(alice)
    first = client_.post("/api/v1/proposals/", {"pool": pool.pk, "target_replicas": 3, "idempotency_key": "k1"},
                         format="json")
    again = client_.post("/api/v1/proposals/", {"pool": pool.pk, "target_replicas": 3, "idempotency_key": "k1"},
                         format="json")
    other = client_.post("/api/v1/proposals/", {"pool": pool.pk, "target_replicas": 5, "idempotency_key": "k1"},
                         format="json")
    assert (first.status_code, again.status_code, other.status_code) == (201, 201, 409)
    assert again.data["id"] == first.data["id"] and other.data["id"] == first.data["id"]


# --- 10. what is recorded is what happened -------------------------------------------------------


class _DiesAfterWriting:
    """The real write lands, then the worker is killed before it sees the answer."""

    def __init__(self, url: str) -> None:
        self.real = KubernetesDriver(url)

    def generation(self, workload: Workload) -> int | None:
        return self.real.generation(workload)

    def scale(self, workload: Workload, replicas: int, premise: ScalePremise | None = None) -> ScaleOutcome:
        self.real.scale(workload, replicas, premise)
        raise SystemExit("worker killed")


def test_a_write_made_by_a_killed_worker_is_on_record_and_not_repeated(kube_pool: Pool, alice: User, bob: User,
                                                                       kube: SandboxCluster) -> None:
    proposal = _approved(kube_pool, current=1, target=2, proposer=alice, approver=bob)
    claimed = services.claim_execution(proposal.pk)
    with pytest.raises(SystemExit):
        services.apply_change(claimed, _DiesAfterWriting(kube.url))
    assert _replicas(kube) == 2
    intent = AuditEvent.objects.get(action="scale-intent", object_id=str(proposal.pk))
    assert intent.after["target"] == 2 and intent.after["decided_from"] == 1
    # The lease runs out; the next sweep resumes, finds the write made, and writes nothing more.
    resumed = services.claim_execution(proposal.pk, now=timezone.now() + timedelta(seconds=121))
    done = services.apply_change(resumed, KubernetesDriver(kube.url))
    assert done.applied_at is not None and done.applied_from_replicas is None
    assert AuditEvent.objects.get(action="scale", object_id=str(proposal.pk)).after["wrote"] is False


def test_cold_starts_come_from_the_pods_each_proposal_added(kube_pool: Pool, alice: User, bob: User,
                                                            kube: SandboxCluster) -> None:
    driver = KubernetesDriver(kube.url)
    up = services.propose(kube_pool, 3, ProposalKind.MANUAL, _api(alice), current=1)
    services.approve(up.pk, _api(bob))
    up = services.execute(up.pk, driver)
    assert wait_until(lambda: services.track_readiness(up, driver).state == ProposalState.SUCCEEDED, 10)
    up.refresh_from_db()
    assert up.applied_from_replicas == 1 and up.measured_cold_start_s >= 0.3
    # A scale-down measures nothing, and the pool's figures stay as they were.
    kube_pool.refresh_from_db()
    figures = (kube_pool.cold_start_p50_s, kube_pool.cold_start_p95_s)
    down = services.propose(kube_pool, 2, ProposalKind.MANUAL, _api(alice), current=3)
    services.approve(down.pk, _api(bob))
    down = services.execute(down.pk, driver)
    assert wait_until(lambda: services.track_readiness(down, driver).state == ProposalState.SUCCEEDED, 10)
    down.refresh_from_db()
    kube_pool.refresh_from_db()
    assert down.measured_cold_start_s is None and ColdStart.objects.filter(pool=kube_pool).count() == 1
    assert (kube_pool.cold_start_p50_s, kube_pool.cold_start_p95_s) == figures


def test_a_near_zero_cold_start_never_replaces_the_pools_figures(kube_pool: Pool, alice: User, bob: User) -> None:
    Pool.objects.filter(pk=kube_pool.pk).update(cold_start_p50_s=60.0, cold_start_p95_s=80.0)
    proposal = _approved(kube_pool, current=1, target=2, proposer=alice, approver=bob)
    Proposal.objects.filter(pk=proposal.pk).update(state=ProposalState.EXECUTING, applied_at=timezone.now(),
                                                   applied_from_replicas=1)
    proposal.refresh_from_db()

    class ReadyAtOnce:
        def added_pods_ready_at(self, workload: Workload, since, count: int):  # noqa: ANN001, ANN201
            return since + timedelta(seconds=0.008)

    assert services._cold_start_s(proposal, ReadyAtOnce(), proposal.applied_at + timedelta(seconds=0.01)) is None
    assert loop.pool_plan(Pool.objects.get(pk=kube_pool.pk)).cold_start_p95_s == 80.0
    Pool.objects.filter(pk=kube_pool.pk).update(cold_start_p50_s=0.0, cold_start_p95_s=0.0)  # broken figures are no lead time
    assert loop.pool_plan(Pool.objects.get(pk=kube_pool.pk)).cold_start_p95_s == loop.DEFAULT_COLD_START_S


def test_the_correction_waits_for_the_clusters_rate_window(kube_pool: Pool) -> None:
    # The latency percentiles are read over the cluster's rate window: the correction learns only once the
    # ready count has held that long.
    assert loop.pool_plan(Pool.objects.get(pk=kube_pool.pk)).latency_window_s == 60.0
    Cluster.objects.filter(pk=kube_pool.cluster_id).update(prometheus_rate_window="2m30s")
    assert loop.pool_plan(Pool.objects.get(pk=kube_pool.pk)).latency_window_s == 150.0


# --- 7. team boundaries hold for the loop too ----------------------------------------------------


def test_the_loop_proposes_nothing_for_a_pool_in_a_cluster_not_shared_with_its_team(pool: Pool, search_team) -> None:  # noqa: ANN001
    # Created before the rule (the migration keeps such pools, it does not share for them).
    outsider = Pool.objects.create(cluster=pool.cluster, team=search_team, name="rerank", namespace="search",
                                   deployment="vllm-rerank", model_name="x", gpu_type="L4", max_replicas=4)
    with pytest.raises(services.ProposalForbidden, match="not shared with team Search"):
        services.propose(outsider, 3, ProposalKind.REACTIVE, PLANNER, current=1)
    assert not Proposal.objects.exists()
