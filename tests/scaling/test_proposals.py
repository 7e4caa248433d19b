"""Proposals: the state machine, approval rules, and execution against the Kubernetes API emulator."""
from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone
from kubernetes import client

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from sandbox.kube.cluster import SandboxCluster
from sandbox.replica import wait_until
from scaling import services
from scaling.choices import TRANSITIONS, ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.models import Proposal

from tests.core.conftest import token_client

NS = "inference"


def _actor(user: User) -> core.Actor:
    return core.Actor(user=user, channel=Channel.API)


def _propose(pool: Pool, user: User, target: int = 4, kind: str = ProposalKind.PRESCALE, **kwargs) -> Proposal:  # noqa: ANN003
    return services.propose(pool, target, kind, _actor(user), current=1, **kwargs)


def _deployment_replicas(kube: SandboxCluster) -> int:
    return client.AppsV1Api(client.ApiClient(client.Configuration(host=kube.url))).read_namespaced_deployment_scale(
        "vllm-chat-8b", NS).spec.replicas


@pytest.mark.parametrize("source", list(ProposalState))
@pytest.mark.parametrize("target", list(ProposalState))
def test_it_refuses_every_illegal_transition(pool: Pool, alice: User, source: str, target: str) -> None:
    proposal = _propose(pool, alice)
    Proposal.objects.filter(pk=proposal.pk).update(state=source)
    proposal.refresh_from_db()
    if target in TRANSITIONS.get(source, ()):
        services._transition(proposal, target, _actor(alice))
        assert Proposal.objects.get(pk=proposal.pk).state == target
    else:
        with pytest.raises(services.ProposalConflict):
            services._transition(proposal, target, _actor(alice))
        assert Proposal.objects.get(pk=proposal.pk).state == source


def test_a_newer_proposal_supersedes_the_pending_one(pool: Pool, alice: User) -> None:
    first = _propose(pool, alice, target=3)
    second = _propose(pool, alice, target=5)
    first.refresh_from_db()
    assert (first.state, second.state) == (ProposalState.SUPERSEDED, ProposalState.PENDING)
    assert [event.to_state for event in first.events.all()] == ["pending", "superseded"]


def test_the_same_idempotency_key_returns_the_same_proposal(pool: Pool, alice: User) -> None:
    first = _propose(pool, alice, idempotency_key="launch-18h")
    again = _propose(pool, alice, idempotency_key="launch-18h")
    assert first.pk == again.pk and again.target_replicas == 4 and Proposal.objects.count() == 1


def test_a_key_reused_for_another_change_is_a_conflict(pool: Pool, alice: User) -> None:
    first = _propose(pool, alice, idempotency_key="launch-18h")
    with pytest.raises(services.ProposalConflict, match="use a new key"):
        _propose(pool, alice, target=6, idempotency_key="launch-18h")
    assert list(Proposal.objects.values_list("pk", "target_replicas")) == [(first.pk, 4)]


def test_it_refuses_targets_outside_the_pool_bounds(pool: Pool, alice: User) -> None:
    with pytest.raises(services.InvalidProposal) as excinfo:
        _propose(pool, alice, target=50)
    assert excinfo.value.field == "target_replicas" and "max_replicas (8)" in str(excinfo.value)


def test_outsiders_and_viewers_cannot_decide(pool: Pool, alice: User, charlie: User) -> None:
    proposal = _propose(pool, alice)
    with pytest.raises(services.ProposalForbidden):
        services.approve(proposal.pk, _actor(charlie))
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.PENDING


def test_the_two_person_rule_refuses_self_approval(pool: Pool, alice: User, bob: User) -> None:
    Pool.objects.filter(pk=pool.pk).update(approval_policy={"two_person_min_delta": 3})
    pool.refresh_from_db()
    proposal = _propose(pool, alice, target=5)
    with pytest.raises(services.ProposalForbidden, match="second person"):
        services.approve(proposal.pk, _actor(alice))
    assert services.approve(proposal.pk, _actor(bob)).state == ProposalState.APPROVED


def test_an_expired_proposal_cannot_be_approved(pool: Pool, alice: User, bob: User) -> None:
    proposal = _propose(pool, alice)
    later = timezone.now() + timedelta(minutes=11)
    with pytest.raises(services.ProposalConflict, match="expired"):
        services.approve(proposal.pk, _actor(bob), now=later)
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.EXPIRED


def test_expiry_housekeeping_expires_only_due_proposals(pool: Pool, search_pool: Pool, alice: User, charlie: User) -> None:
    due = _propose(pool, alice)
    Proposal.objects.filter(pk=due.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    fresh = services.propose(search_pool, 3, ProposalKind.MANUAL, _actor(charlie), current=1)
    assert services.expire_due() == 1
    assert Proposal.objects.get(pk=due.pk).state == ProposalState.EXPIRED
    assert Proposal.objects.get(pk=fresh.pk).state == ProposalState.PENDING


def test_reactive_scale_ups_inside_the_guardrail_are_auto_approved(pool: Pool, alice: User, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001, E501
    planner = core.Actor(user=None, channel=Channel.AUTO)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        small = services.propose(pool, 3, ProposalKind.REACTIVE, planner, current=1)
    assert small.state == ProposalState.APPROVED  # execution (and notifying) wait for the commit
    assert small.decided_channel == Channel.AUTO and "guardrail" in small.decision_comment
    for callback in queued:
        callback()
    assert small.events.filter(to_state=ProposalState.EXECUTING).count() == 1  # handed to execution once
    large = services.propose(pool, 8, ProposalKind.REACTIVE, planner, current=1)
    assert large.state == ProposalState.PENDING


def test_off_hours_windows_auto_approve(pool: Pool, alice: User) -> None:
    pool.cluster.off_hours = [{"weekdays": [0, 1, 2, 3, 4, 5, 6], "start": "00:00", "end": "23:59"}]
    pool.cluster.save()
    pool.refresh_from_db()
    # A fixed time of day: the window's end, 23:59, is exclusive, so the wall clock fails one minute a day.
    # Tomorrow's noon, so the proposal has not expired when approval checks it against the wall clock.
    noon = (timezone.now() + timedelta(days=1)).replace(hour=12, minute=0, second=0, microsecond=0)
    proposal = _propose(pool, alice, now=noon)
    assert proposal.decided_channel == Channel.AUTO and "off-hours" in proposal.decision_comment


def test_approval_executes_on_the_cluster_exactly_once(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:  # noqa: E501
    proposal = _propose(kube_pool, alice, target=3)
    services.approve(proposal.pk, _actor(bob))
    driver = KubernetesDriver(kube.url)
    done = services.execute(proposal.pk, driver)
    assert done.state == ProposalState.EXECUTING and done.applied_at is not None
    assert _deployment_replicas(kube) == 3
    # A second worker, a retried task, a double click: nothing more happens.
    assert services.execute(proposal.pk, driver) is None
    assert AuditEvent.objects.filter(action="scale", object_id=str(proposal.pk)).count() == 1
    assert wait_until(lambda: services.track_readiness(done, driver).state == ProposalState.SUCCEEDED, 10)
    finished = Proposal.objects.get(pk=proposal.pk)
    assert finished.measured_cold_start_s is not None and finished.measured_cold_start_s >= 0.3
    kube_pool.refresh_from_db()
    assert kube_pool.cold_start_p50_s == pytest.approx(finished.measured_cold_start_s, abs=0.1)
    assert kube_pool.status.ready_replicas == 3


def test_a_worker_that_died_before_applying_is_resumed_once(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:  # noqa: E501
    proposal = _propose(kube_pool, alice, target=2)
    services.approve(proposal.pk, _actor(bob))
    claimed = services.claim_execution(proposal.pk)  # ...and the worker dies here, lease held
    assert claimed is not None and _deployment_replicas(kube) == 1
    assert services.claim_execution(proposal.pk) is None  # lease still held: nobody else runs it
    after_lease = timezone.now() + timedelta(seconds=121)
    resumed = services.claim_execution(proposal.pk, now=after_lease)
    assert resumed is not None and resumed.attempts == 2
    services.apply_change(resumed, KubernetesDriver(kube.url))
    assert _deployment_replicas(kube) == 2
    assert services.claim_execution(proposal.pk, now=after_lease + timedelta(seconds=500)) is None  # applied


def test_a_worker_that_died_after_applying_does_not_write_twice(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:  # noqa: E501
    proposal = _propose(kube_pool, alice, target=4)
    services.approve(proposal.pk, _actor(bob))
    claimed = services.claim_execution(proposal.pk)
    KubernetesDriver(kube.url).scale(services.workload_of(kube_pool), 4)  # applied, then the worker died
    resumed = services.claim_execution(proposal.pk, now=timezone.now() + timedelta(seconds=121))
    applied = services.apply_change(resumed, KubernetesDriver(kube.url))
    assert claimed is not None and applied.events.last().data["wrote"] is False
    assert _deployment_replicas(kube) == 4


def test_a_throttled_write_waits_the_retry_after_the_api_server_asks_for(kube_pool: Pool, alice: User, bob: User,
                                                                         kube: SandboxCluster) -> None:
    """API Priority and Fairness answers 429 with Retry-After: the next try comes no sooner than asked (not on
    the 5 s backoff's first step), and the change lands once the server lets it."""
    kube.api.faults.throttle_next, kube.api.faults.throttle_retry_after_s = 1, 60
    proposal = _propose(kube_pool, alice, target=3)
    services.approve(proposal.pk, _actor(bob))
    started = timezone.now()
    throttled = services.execute(proposal.pk, KubernetesDriver(kube.url))
    assert throttled.state == ProposalState.EXECUTING and "HTTP 429" in throttled.last_error
    assert throttled.lease_until >= started + timedelta(seconds=60), throttled.last_error
    assert "next try in 60 s" in throttled.last_error
    assert services.claim_execution(proposal.pk, now=throttled.lease_until - timedelta(seconds=1)) is None
    resumed = services.claim_execution(proposal.pk, now=throttled.lease_until + timedelta(seconds=1))
    done = services.apply_change(resumed, KubernetesDriver(kube.url))
    assert done.applied_at is not None and _deployment_replicas(kube) == 3


def test_conflict_storms_are_retried_and_server_errors_fail_clearly(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:  # noqa: E501
    kube.api.faults.conflict_storm = 3
    proposal = _propose(kube_pool, alice, target=3)
    services.approve(proposal.pk, _actor(bob))
    done = services.execute(proposal.pk, KubernetesDriver(kube.url))
    assert done.applied_at is not None and done.events.last().data["conflicts"] == 3
    kube.api.faults.error_rate = 1.0
    second = _propose(kube_pool, alice, target=5)
    services.approve(second.pk, _actor(bob))
    failed = services.execute(second.pk, KubernetesDriver(kube.url))
    # Retried after a jittered backoff, not at once and not failed on the first 500.
    assert failed.state == ProposalState.EXECUTING and "HTTP 500" in failed.last_error and "next try in" in failed.last_error
    assert failed.lease_until > timezone.now() and services.execute(second.pk, KubernetesDriver(kube.url)) is None
    Proposal.objects.filter(pk=second.pk).update(attempts=settings.EXECUTION_MAX_ATTEMPTS - 1, lease_until=None)
    failed = services.execute(second.pk, KubernetesDriver(kube.url))
    assert failed.state == ProposalState.FAILED and "HTTP 500" in failed.last_error and "gave up after" in failed.last_error


def test_a_missing_deployment_fails_with_the_api_message(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:  # noqa: E501
    Pool.objects.filter(pk=kube_pool.pk).update(deployment="vllm-missing")
    kube_pool.refresh_from_db()
    proposal = _propose(kube_pool, alice, target=3)
    services.approve(proposal.pk, _actor(bob))
    failed = services.execute(proposal.pk, KubernetesDriver(kube.url))
    assert failed.state == ProposalState.FAILED and "HTTP 404" in failed.last_error and "vllm-missing" in failed.last_error


# --- API ---------------------------------------------------------------------------------------


def test_the_api_creates_approves_and_answers_409_on_a_second_approval(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001, E501
    created = token_client(alice).post("/api/v1/proposals/", {"pool": kube_pool.pk, "target_replicas": 3}, format="json")
    assert created.status_code == 201, created.data
    body = created.data
    assert (body["state"], body["kind"], body["requested_by"], body["target_replicas"]) == ("pending", "manual", "alice", 3)
    with django_capture_on_commit_callbacks(execute=True):
        approved = token_client(bob).post(f"/api/v1/proposals/{body['id']}/approve/", {"comment": "go"}, format="json")
    assert approved.status_code == 200 and approved.data["decided_by"] == "bob"
    assert _deployment_replicas(kube) == 3
    again = token_client(bob).post(f"/api/v1/proposals/{body['id']}/approve/", format="json")
    assert again.status_code == 409 and again.data["state"] in ("executing", "succeeded")


def test_the_api_answers_400_403_404(pool: Pool, alice: User, charlie: User) -> None:
    response = token_client(alice).post("/api/v1/proposals/", {"pool": pool.pk, "target_replicas": 99}, format="json")
    assert response.status_code == 400 and "target_replicas" in response.data
    response = token_client(charlie).post("/api/v1/proposals/", {"pool": pool.pk, "target_replicas": 3}, format="json")
    assert response.status_code == 400 and "pool" in response.data  # invisible pool
    proposal = _propose(pool, alice)
    assert token_client(charlie).post(f"/api/v1/proposals/{proposal.pk}/approve/").status_code == 404
    viewer = User.objects.create_user("victor")
    from controlplane.models import Membership

    Membership.objects.create(user=viewer, team=pool.team, role="viewer")
    assert token_client(viewer).post(f"/api/v1/proposals/{proposal.pk}/approve/").status_code == 403
    assert token_client(viewer).get(f"/api/v1/proposals/?state=pending&pool={pool.pk}").data["count"] == 1


def test_the_cold_start_is_measured_from_the_pods_ready_transition(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:  # noqa: E501
    """A tick that notices readiness late must not lengthen the measured cold start."""
    import time

    from django.utils import timezone as tz

    kube.pools[(NS, "vllm-chat-8b")] = dataclasses.replace(kube.pools[(NS, "vllm-chat-8b")], cold_start_s=2.0)
    driver = KubernetesDriver(kube.url)
    # A pool of one serving replica: a pod still starting in the second of the write could not be told
    # from the added one by its whole-second creation stamp (tests/drivers/test_added_pods.py).
    assert wait_until(lambda: driver.status(services.workload_of(kube_pool)).ready == 1, 10)
    proposal = _propose(kube_pool, alice, target=2)
    services.approve(proposal.pk, _actor(bob))
    applied = services.execute(proposal.pk, driver)
    assert wait_until(lambda: driver.status(services.workload_of(kube_pool)).ready == 2, 10)
    time.sleep(3.0)  # the next tick comes late
    done = services.track_readiness(applied, driver)
    elapsed = (tz.now() - applied.applied_at).total_seconds()
    assert done.state == ProposalState.SUCCEEDED
    assert 1.0 <= done.measured_cold_start_s <= elapsed - 2.0
