"""Approvals without fatigue (issue 16): the guardrail's share of a large scale-up runs at once, settled
scale-downs and short-horizon predictive scale-ups are approved by policy, several proposals are decided
at once; every premise, two-person, team and idempotency rule still holds. Scenario tests run against
the Kubernetes API emulator: a late approval, one after a restart, one after the world moved."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from kubernetes import client

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from sandbox.kube.cluster import SandboxCluster
from scaling import explain, services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.engine import planner
from scaling.engine.planner import PlannerState
from scaling.models import PlannerMemory, Proposal

NS = "inference"
PLANNER = core.Actor(user=None, channel=Channel.AUTO)


def _api(user: User) -> core.Actor:
    return core.Actor(user=user, channel=Channel.API)


def _replicas(kube: SandboxCluster) -> int:
    apps = client.AppsV1Api(client.ApiClient(client.Configuration(host=kube.url)))
    return apps.read_namespaced_deployment_scale("vllm-chat-8b", NS).spec.replicas


def _someone_scales_to(kube: SandboxCluster, replicas: int) -> None:
    apps = client.AppsV1Api(client.ApiClient(client.Configuration(host=kube.url)))
    apps.patch_namespaced_deployment_scale("vllm-chat-8b", NS, {"spec": {"replicas": replicas}})


def _policy(pool: Pool, **values: object) -> Pool:
    Pool.objects.filter(pk=pool.pk).update(approval_policy=values)
    return Pool.objects.select_related("cluster", "team").get(pk=pool.pk)


# --- the guardrail's share ----------------------------------------------------------------------


def test_it_runs_the_guardrails_share_of_a_large_scale_up_and_leaves_the_rest_pending(pool: Pool) -> None:
    key = services.loop_idempotency_key(pool, ProposalKind.REACTIVE, 8, timezone.now())
    rest = services.propose(pool, 8, ProposalKind.REACTIVE, PLANNER, current=1, idempotency_key=key)
    share = Proposal.objects.get(idempotency_key=key + services.SHARE_KEY_SUFFIX)
    assert (share.current_replicas, share.target_replicas, share.state) == (1, 5, ProposalState.APPROVED)
    assert share.decided_channel == Channel.AUTO and "share: +4 of +7" in share.decision_comment
    # The rest keeps the premise it was decided against (1 → 8) and waits for a person.
    assert (rest.current_replicas, rest.target_replicas, rest.state) == (1, 8, ProposalState.PENDING)
    assert rest.reasons[0]["code"] == services.SHARE_REASON and rest.reasons[0]["share"] == share.pk
    assert "remaining +3 waits for a person" in rest.reasons[0]["detail"]
    # The same tick again (another worker): the same proposals, nothing new.
    again = services.propose(pool, 8, ProposalKind.REACTIVE, PLANNER, current=1, idempotency_key=key)
    assert again.pk == rest.pk and Proposal.objects.filter(pool=pool).count() == 2


@pytest.mark.parametrize(
    ("policy", "kind", "actor_is_planner", "split"),
    [
        ({}, ProposalKind.REACTIVE, True, True),
        ({}, ProposalKind.PREDICTIVE, True, True),
        ({"auto_approve_reactive": False}, ProposalKind.REACTIVE, True, False),
        ({"auto_approve_predictive": False}, ProposalKind.PREDICTIVE, True, False),
        ({}, ProposalKind.PRESCALE, True, False),  # the 30-minute pre-scale is for a person, whole
        ({}, ProposalKind.SCHEDULED, True, False),
        ({}, ProposalKind.MANUAL, False, False),  # a person's change is never split
    ],
)
def test_it_splits_only_the_planners_guardrail_kinds(pool: Pool, alice: User, policy: dict, kind: str,
                                                     actor_is_planner: bool, split: bool) -> None:
    pool = _policy(pool, **policy)
    actor = PLANNER if actor_is_planner else _api(alice)
    proposal = services.propose(pool, 8, kind, actor, current=1)
    assert proposal.state == ProposalState.PENDING
    assert Proposal.objects.filter(pool=pool, state=ProposalState.APPROVED).exists() == split


def test_the_guardrail_follows_the_pools_step(pool: Pool) -> None:
    pool = _policy(pool, reactive_max_step=2, reactive_max_percent=None)  # null: the step alone
    services.propose(pool, 8, ProposalKind.REACTIVE, PLANNER, current=3)
    assert Proposal.objects.get(pool=pool, state=ProposalState.APPROVED).target_replicas == 5


def test_by_default_the_guardrail_is_the_hpas_own_rate(pool: Pool) -> None:
    # max(+4, +100 %): a pool of 6 may double at once, as a Kubernetes HPA would scale it; the rest waits.
    Pool.objects.filter(pk=pool.pk).update(max_replicas=40, approval_policy={})
    pool = Pool.objects.get(pk=pool.pk)
    doubled = services.propose(pool, 12, ProposalKind.REACTIVE, PLANNER, current=6)
    assert doubled.state == ProposalState.APPROVED and "within the guardrail of 6" in doubled.events.last().comment
    rest = services.propose(pool, 30, ProposalKind.REACTIVE, PLANNER, current=12)
    assert rest.state == ProposalState.PENDING
    assert Proposal.objects.get(pool=pool, state=ProposalState.APPROVED, current_replicas=12).target_replicas == 24


def test_the_guardrail_may_be_a_share_of_the_pool(pool: Pool) -> None:
    Pool.objects.filter(pk=pool.pk).update(max_replicas=40)
    pool = _policy(pool, reactive_max_percent=50)
    doubled = services.propose(pool, 18, ProposalKind.REACTIVE, PLANNER, current=12)  # +6 is 50 % of 12
    assert doubled.state == ProposalState.APPROVED
    assert "within the guardrail of 6" in doubled.events.last().comment
    rest = services.propose(pool, 30, ProposalKind.REACTIVE, PLANNER, current=18)  # +9 at once, 3 for a person
    assert rest.state == ProposalState.PENDING
    assert Proposal.objects.get(pool=pool, state=ProposalState.APPROVED, current_replicas=18).target_replicas == 27
    assert "more than the guardrail of 9 approved by policy" in explain.why_for(rest)


def test_a_newer_decision_within_the_guardrail_supersedes_the_waiting_rest(pool: Pool) -> None:
    rest = services.propose(pool, 8, ProposalKind.REACTIVE, PLANNER, current=1)
    newer = services.propose(pool, 7, ProposalKind.REACTIVE, PLANNER, current=5)  # once the share ran
    assert newer.state == ProposalState.APPROVED
    assert Proposal.objects.get(pk=rest.pk).state == ProposalState.SUPERSEDED


# --- predictive scale-ups -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "kind", "approved"),
    [
        ({}, ProposalKind.PREDICTIVE, True),
        ({"auto_approve_predictive": False}, ProposalKind.PREDICTIVE, False),
        ({}, ProposalKind.PRESCALE, False),
    ],
)
def test_the_planners_predictive_scale_ups_within_the_guardrail_are_approved_by_policy(
        pool: Pool, policy: dict, kind: str, approved: bool) -> None:
    pool = _policy(pool, **policy)
    proposal = services.propose(pool, 3, kind, PLANNER, current=1)
    assert (proposal.state == ProposalState.APPROVED) == approved
    if approved:
        assert "predictive scale-up of 2 within the guardrail" in proposal.decision_comment


# --- settled scale-downs ------------------------------------------------------------------------


def _planner_saw(pool: Pool, *, target: int, warm_floor: int, window_covered_s: float, highest: int) -> None:
    """The planner's memory after the tick that asked for `target`: its recommendations over the window."""
    now_s = timezone.now().timestamp()
    recommendations = ((now_s - window_covered_s, highest), (now_s - 60, target), (now_s, target))
    PlannerMemory.objects.update_or_create(pool=pool, defaults={
        "state": PlannerState(recommendations=recommendations).to_dict(),
        "last_decision": {"target_replicas": target, "terms": [
            {"name": planner.WARM_FLOOR, "replicas": warm_floor, "numbers": {}}]},
    })


@pytest.mark.parametrize(
    ("case", "policy", "warm_floor", "window_covered_s", "highest", "approved"),
    [
        ("held through the window, above the floor", {}, 2, 290.0, 4, True),
        ("the window not yet seen (a fresh state)", {}, 2, 200.0, 4, False),
        ("a recommendation in the window wanted more", {}, 2, 290.0, 6, False),
        ("below the warm floor", {}, 5, 290.0, 4, False),
        ("the pool's policy says a person", {"auto_approve_scale_down": False}, 2, 290.0, 4, False),
    ],
)
def test_the_planners_settled_scale_downs_are_approved_by_policy(
        pool: Pool, case: str, policy: dict, warm_floor: int, window_covered_s: float, highest: int,
        approved: bool) -> None:
    pool = _policy(pool, **policy)
    _planner_saw(pool, target=4, warm_floor=warm_floor, window_covered_s=window_covered_s, highest=highest)
    proposal = services.propose(pool, 4, ProposalKind.REACTIVE, PLANNER, current=6)
    assert (proposal.state == ProposalState.APPROVED) == approved, case
    if approved:
        assert "stabilization window" in proposal.decision_comment and "warm floor of 2" in proposal.decision_comment


@pytest.mark.parametrize(("window_s", "covered_s", "minutes"), [(120.0, 100.0, "2"), (0.0, 0.0, "0"), (600.0, 590.0, "10")])
def test_a_settled_scale_down_is_judged_on_the_pools_own_stabilization_window(
        pool: Pool, window_s: float, covered_s: float, minutes: str) -> None:
    # The planner keeps recommendations over the pool's window only: judged on the default 5 minutes, a
    # shorter window never looked settled, and every scale-down waited for a person.
    Pool.objects.filter(pk=pool.pk).update(planner_constants={"scale_down_window_s": window_s})
    pool = Pool.objects.select_related("cluster", "team").get(pk=pool.pk)
    _planner_saw(pool, target=4, warm_floor=2, window_covered_s=covered_s, highest=4)
    proposal = services.propose(pool, 4, ProposalKind.REACTIVE, PLANNER, current=6)
    assert proposal.state == ProposalState.APPROVED
    assert f"held through the {minutes}-minute stabilization window" in proposal.decision_comment


def test_a_persons_scale_down_still_needs_a_decision(pool: Pool, alice: User) -> None:
    _planner_saw(pool, target=4, warm_floor=2, window_covered_s=290.0, highest=4)
    proposal = services.propose(pool, 4, ProposalKind.MANUAL, _api(alice), current=6)
    assert proposal.state == ProposalState.PENDING


def test_a_scale_down_from_an_older_decision_waits(pool: Pool) -> None:
    _planner_saw(pool, target=3, warm_floor=2, window_covered_s=290.0, highest=3)  # memory decided 3, not 4
    assert services.propose(pool, 4, ProposalKind.REACTIVE, PLANNER, current=6).state == ProposalState.PENDING


# --- several at once ----------------------------------------------------------------------------


def test_it_decides_several_at_once_each_under_its_own_rules(pool: Pool, search_pool: Pool, alice: User,
                                                            bob: User, charlie: User) -> None:
    pool = _policy(pool, two_person_min_delta=3)
    mine = services.propose(pool, 5, ProposalKind.MANUAL, _api(alice), current=1)  # +4: a second person
    prescale = services.propose(pool, 3, ProposalKind.PRESCALE, PLANNER, current=1)
    theirs = services.propose(search_pool, 3, ProposalKind.MANUAL, _api(charlie), current=1)
    outcomes = services.decide_many([mine.pk, prescale.pk, theirs.pk, prescale.pk], "approve", _api(alice))
    by_id = {o.proposal_id: o for o in outcomes}
    assert len(outcomes) == 3  # each once
    assert by_id[prescale.pk].ok and by_id[prescale.pk].state == ProposalState.APPROVED
    assert not by_id[mine.pk].ok and by_id[mine.pk].status_code == 403 and "second person" in by_id[mine.pk].error
    assert by_id[theirs.pk].status_code == 404  # another team's: not found, as one by one
    assert Proposal.objects.get(pk=theirs.pk).state == ProposalState.PENDING
    # bob approves alice's; a second bulk click finds both already decided.
    assert services.decide_many([mine.pk], "approve", _api(bob))[0].ok
    again = services.decide_many([mine.pk, prescale.pk], "approve", _api(bob))
    assert [o.status_code for o in again] == [409, 409]


# --- scenarios against the Kubernetes API emulator ------------------------------------------------


def test_a_late_approval_of_the_rest_completes_the_scale_up(kube_pool: Pool, bob: User, kube: SandboxCluster,
                                                            django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    driver = KubernetesDriver(kube.url)
    with django_capture_on_commit_callbacks(execute=False):
        rest = services.propose(kube_pool, 7, ProposalKind.REACTIVE, PLANNER, current=1)
    share = Proposal.objects.get(pool=kube_pool, state=ProposalState.APPROVED)
    services.execute(share.pk, driver)
    assert _replicas(kube) == 5  # the share ran at once
    later = timezone.now() + timedelta(minutes=5)  # bob answers five minutes later, still in time
    with django_capture_on_commit_callbacks(execute=False):
        services.approve(rest.pk, _api(bob), now=later)
    done = services.execute(rest.pk, driver)
    assert done.state == ProposalState.EXECUTING and done.applied_from_replicas == 5 and _replicas(kube) == 7


def test_an_approval_after_expiry_writes_nothing(kube_pool: Pool, bob: User, kube: SandboxCluster,
                                                 django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    with django_capture_on_commit_callbacks(execute=False):
        rest = services.propose(kube_pool, 7, ProposalKind.REACTIVE, PLANNER, current=1)
    with pytest.raises(services.ProposalConflict, match="expired"):
        services.approve(rest.pk, _api(bob), now=timezone.now() + timedelta(minutes=11))
    assert Proposal.objects.get(pk=rest.pk).state == ProposalState.EXPIRED and _replicas(kube) == 1


def test_an_approval_whose_task_was_lost_in_a_restart_is_run_by_the_sweep(
        kube_pool: Pool, bob: User, kube: SandboxCluster, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    with django_capture_on_commit_callbacks(execute=False):  # the worker restarts: no task ever runs
        rest = services.propose(kube_pool, 7, ProposalKind.REACTIVE, PLANNER, current=1)
        services.approve(rest.pk, _api(bob))
    counts = services.advance()  # the next sweep, after the restart
    assert counts["started"] == 2  # the share and the rest, each once
    assert _replicas(kube) == 7
    assert services.advance()["started"] == 0


def test_an_approval_after_the_world_moved_is_stale_and_writes_nothing(
        kube_pool: Pool, bob: User, kube: SandboxCluster, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    driver = KubernetesDriver(kube.url)
    with django_capture_on_commit_callbacks(execute=False):
        rest = services.propose(kube_pool, 7, ProposalKind.REACTIVE, PLANNER, current=1)
    _someone_scales_to(kube, 8)  # someone scaled past it while it waited
    with django_capture_on_commit_callbacks(execute=False):
        services.approve(rest.pk, _api(bob))
    done = services.execute(rest.pk, driver)
    assert done.state == ProposalState.STALE and "runs 8" in done.last_error and _replicas(kube) == 8
