"""What an approved change checks again before it writes, and how a written one ends.

Between a decision and its write the world moves: an admin edits the pool, a share is revoked, a later
decision is approved while an older one waits out its retry backoff. Each scenario here wrote the wrong
replicas (or left a proposal executing for good) before the checks in `services.claim_execution`,
`services.approve` and `services.track_readiness`.
"""
from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from kubernetes import client

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Cluster, Pool, Team
from sandbox.kube import resources
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from sandbox.replica import wait_until
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.engine.planner import PlannerState
from scaling.models import PlannerMemory, Proposal
from scaling.sim.profiles import get_profile

from tests.core.conftest import token_client

NS = "inference"


def _apps(kube: SandboxCluster) -> client.AppsV1Api:
    return client.AppsV1Api(client.ApiClient(client.Configuration(host=kube.url)))


def _replicas(kube: SandboxCluster, name: str = "vllm-chat-8b") -> int:
    return _apps(kube).read_namespaced_deployment_scale(name, NS).spec.replicas


def _add_deployment(kube: SandboxCluster, name: str, **spec: object) -> None:
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=2)
    kube.add_pool(PoolSpec(name=name, profile=profile, namespace=NS, replicas=1, cold_start_s=0.5, max_replicas=8,
                           **spec))


def _manual(pool: Pool, target: int, alice: User, bob: User | None = None) -> Proposal:
    proposal = services.propose(pool, target, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
    if bob is not None:
        services.approve(proposal.pk, core.Actor(bob, Channel.API))
    return proposal


def test_an_edit_supersedes_the_pending_proposals_it_made_wrong(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    still_right = _manual(kube_pool, 2, alice)
    assert token_client(bob).patch(f"/api/v1/pools/{kube_pool.pk}/", {"max_replicas": 3},
                                   format="json").status_code == 200
    still_right.refresh_from_db()
    assert still_right.state == ProposalState.PENDING  # 2 is still within 1-3
    wrong = _manual(kube_pool, 3, alice)
    # The team's admin caps the pool at 2 (a GPU quota) while it waits.
    assert token_client(bob).patch(f"/api/v1/pools/{kube_pool.pk}/", {"max_replicas": 2},
                                   format="json").status_code == 200
    wrong.refresh_from_db()
    assert wrong.state == ProposalState.SUPERSEDED  # at the save: the inbox and Slack stop offering it
    assert "bounded to 1-2" in wrong.events.last().comment
    assert AuditEvent.objects.filter(object_id=str(wrong.pk), action=ProposalState.SUPERSEDED).exists()
    with pytest.raises(services.ProposalConflict, match="already superseded"):
        services.approve(wrong.pk, core.Actor(bob, Channel.API))
    assert _replicas(kube) == 1


def test_a_pending_proposal_outside_the_pools_new_range_cannot_be_approved(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    proposal = _manual(kube_pool, 6, alice)
    # The range changed by a write that sends no signal (a bulk update, a migration): approve still checks.
    Pool.objects.filter(pk=kube_pool.pk).update(max_replicas=3)
    with pytest.raises(services.ProposalConflict, match="bounded to 1-3"):
        services.approve(proposal.pk, core.Actor(bob, Channel.API))
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.SUPERSEDED  # committed: the inbox no longer offers it
    assert services.execute(proposal.pk, KubernetesDriver(kube.url)) is None
    assert _replicas(kube) == 1


def test_an_approved_change_is_not_written_once_the_pools_range_excludes_it(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    proposal = _manual(kube_pool, 6, alice, bob)
    Pool.objects.filter(pk=kube_pool.pk).update(max_replicas=3)
    assert services.execute(proposal.pk, KubernetesDriver(kube.url)) is None
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.STALE and "bounded to 1-3" in proposal.last_error
    assert _replicas(kube) == 1
    assert not AuditEvent.objects.filter(object_id=str(proposal.pk), action="scale-intent").exists()


def test_an_approved_change_is_not_written_to_the_deployment_a_pool_was_repointed_at(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    _add_deployment(kube, "vllm-other")
    proposal = _manual(kube_pool, 5, alice, bob)
    assert proposal.workload == {"cluster": kube_pool.cluster_id, "namespace": NS, "deployment": "vllm-chat-8b",
                                 "scaled_object": ""}
    # The admin repoints the pool at another Deployment (a blue/green rename) before the worker runs.
    assert token_client(bob).patch(f"/api/v1/pools/{kube_pool.pk}/", {"deployment": "vllm-other"},
                                   format="json").status_code == 200
    assert services.execute(proposal.pk, KubernetesDriver(kube.url)) is None
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.STALE
    assert "now scales inference/vllm-other" in proposal.last_error and "nothing written" in proposal.last_error
    assert (_replicas(kube), _replicas(kube, "vllm-other")) == (1, 1)
    # A proposal made after the edit is for the new Deployment, and is written there.
    fresh = _manual(Pool.objects.get(pk=kube_pool.pk), 2, alice, bob)
    assert services.execute(fresh.pk, KubernetesDriver(kube.url)).applied_at is not None
    assert _replicas(kube, "vllm-other") == 2


def test_an_approved_change_is_not_written_after_the_share_is_revoked(
        kube_pool: Pool, cluster: Cluster, bob: User, charlie: User, search_team: Team, kube: SandboxCluster) -> None:
    _add_deployment(kube, "vllm-embed")
    cluster.shared_with.add(search_team)
    embed = Pool.objects.create(cluster=cluster, team=search_team, name="embed", namespace=NS, deployment="vllm-embed",
                                model_name="m", gpu_type="L4", min_replicas=1, max_replicas=4)
    proposal = _manual(embed, 4, charlie, charlie)  # below the two-person threshold: charlie approves alone
    # ML Platform's admin revokes the share before a worker (or the sweep) gets to it.
    assert token_client(bob).patch(f"/api/v1/clusters/{cluster.pk}/", {"shared_with": []},
                                   format="json").status_code == 200
    services.advance()
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.FAILED and proposal.last_error.startswith("refused:")
    assert _replicas(kube, "vllm-embed") == 1


def test_a_retry_never_undoes_a_later_decision(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    driver = KubernetesDriver(kube.url)
    older = _manual(kube_pool, 6, alice, bob)
    kube.api.faults.fail_next = 1  # one 500: the write is retried after a backoff
    first = services.execute(older.pk, driver)
    assert first.state == ProposalState.EXECUTING and first.applied_at is None and "next try in" in first.last_error
    # Meanwhile the load fell: a newer decision, 1 -> 2, approved and applied.
    newer = _manual(kube_pool, 2, alice, bob)
    services.execute(newer.pk, driver)
    assert _replicas(kube) == 2
    # The older one's backoff passes and the sweep picks it up: it ends, and the later decision stands.
    Proposal.objects.filter(pk=older.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    services.advance()
    older.refresh_from_db()
    assert older.state == ProposalState.STALE and f"proposal #{newer.pk}, decided later" in older.last_error
    assert _replicas(kube) == 2


def test_a_stale_retry_says_an_earlier_attempts_write_may_have_landed(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    driver = KubernetesDriver(kube.url, timeout_s=0.5)
    proposal = _manual(kube_pool, 3, alice, bob)
    kube.api.faults.late_write_answer_s = 1.5  # the write lands, its answer is lost
    first = services.apply_change(services.claim_execution(proposal.pk), driver)
    kube.api.faults.late_write_answer_s = 0
    assert first.applied_at is None and _replicas(kube) == 3
    _apps(kube).patch_namespaced_deployment_scale("vllm-chat-8b", NS, {"spec": {"replicas": 5}})  # another team
    later = timezone.now() + timedelta(minutes=5)
    done = services.apply_change(services.claim_execution(proposal.pk, now=later), driver, now=later)
    assert done.state == ProposalState.STALE
    assert "nothing written by this attempt (an earlier attempt's write may have landed" in done.last_error


def test_an_applied_change_whose_deployment_is_gone_fails(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    proposal = _manual(kube_pool, 3, alice, bob)
    applied = services.execute(proposal.pk, KubernetesDriver(kube.url))
    assert applied.state == ProposalState.EXECUTING and applied.applied_at is not None
    kube.store.delete(resources.DEPLOYMENTS, NS, "vllm-chat-8b")  # another team deletes it (the API answers 405)
    services.advance()
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.FAILED and "HTTP 404" in proposal.last_error


def test_an_applied_change_fails_when_readiness_stays_unreadable_past_the_ready_timeout(
        kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster, settings) -> None:  # noqa: ANN001
    proposal = _manual(kube_pool, 3, alice, bob)
    services.execute(proposal.pk, KubernetesDriver(kube.url))
    kube.api.faults.error_rate = 1.0
    services.advance()  # within the timeout: recorded, still executing
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.EXECUTING and proposal.last_error.startswith("reading readiness")
    Proposal.objects.filter(pk=proposal.pk).update(
        applied_at=timezone.now() - timedelta(seconds=settings.READY_TIMEOUT_S + 1))
    services.advance()
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.FAILED and "past the Ready timeout" in proposal.last_error


def test_a_keda_change_starts_from_the_replicas_the_deployment_runs(
        pool: Pool, cluster: Cluster, kube: SandboxCluster, alice: User, bob: User) -> None:
    _add_deployment(kube, "vllm-keda", keda=True, min_replicas=1)
    _apps(kube).patch_namespaced_deployment_scale("vllm-keda", NS, {"spec": {"replicas": 3}})  # KEDA's HPA, under load
    Cluster.objects.filter(pk=cluster.pk).update(kube_api_url=kube.url)
    Pool.objects.filter(pk=pool.pk).update(deployment="vllm-keda", scaling_target="keda", scaled_object="vllm-keda")
    pool = Pool.objects.select_related("cluster", "team").get(pk=pool.pk)
    driver = KubernetesDriver(kube.url)
    assert wait_until(lambda: driver.status(services.workload_of(pool)).desired == 3, 5)
    proposal = services.propose(pool, 5, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=3)
    services.approve(proposal.pk, core.Actor(bob, Channel.API))
    done = services.execute(proposal.pk, driver)
    # The floor went 1 -> 5 under 3 running pods: 2 pods added, which the cold start and the rate limits count.
    assert AuditEvent.objects.get(action="scale", object_id=str(proposal.pk)).after["previous"] == 3
    assert done.applied_from_replicas == 3
    assert [change for _, change in PlannerState.from_dict(PlannerMemory.objects.get(pool=pool).state).scale_events] == [2]


@pytest.mark.parametrize("comment", ["ok\x00", "x" * 2001])
def test_a_web_decision_with_a_comment_it_cannot_keep_is_a_400(pool: Pool, alice: User, bob: User, comment: str) -> None:
    proposal = _manual(pool, 3, alice)
    web = Client()
    web.force_login(bob)
    answer = web.post(f"/proposals/{proposal.pk}/approve/", {"comment": comment})
    assert answer.status_code == 400 and b"comment" in answer.content
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.PENDING
