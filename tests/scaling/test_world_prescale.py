"""Scenario 4: a pre-scale approved late. design.md §6 "Pre-scaling protocol: when the forecast shows ≥ 3x the
current load within 30 minutes, a pre-scale proposal ... on approval it executes"; control-loop.md: "An approved
pre-scale holds its target as the planner's floor for the forecast window it was approved for (`floor_until`)";
the premise rules; "A worker killed after claiming leaves `executing` with no `applied_at`; once its lease has
passed, the next tick claims it again"; design.md §7 "never applies a step twice"."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from sandbox.kube.cluster import SandboxCluster
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.models import Proposal

from tests.scaling.world import audits, replicas, set_replicas


def _prescale(pool: Pool, target: int, made_ago: timedelta, horizon: timedelta = timedelta(minutes=30)) -> Proposal:
    """The loop's pre-scale, made `made_ago`, for a forecast peak `horizon` after it was made."""
    made = timezone.now() - made_ago
    return services.propose(pool, target, ProposalKind.PRESCALE, core.Actor(None, Channel.AUTO), current=1,
                            floor_until=made + horizon, now=made)


def test_a_prescale_cannot_be_approved_after_its_forecast_window(kube_pool: Pool, bob: User,
                                                                 kube: SandboxCluster) -> None:
    """The team keeps proposals an hour (expiry_minutes 60) so that night-time ones are seen; the pre-scale for a
    peak forecast 30 minutes out is approved 45 minutes after it was made, when that peak has passed."""
    Pool.objects.filter(pk=kube_pool.pk).update(approval_policy={"expiry_minutes": 60})
    pool = Pool.objects.select_related("cluster", "team").get(pk=kube_pool.pk)
    proposal = _prescale(pool, 4, made_ago=timedelta(minutes=45))
    assert proposal.state == ProposalState.PENDING and proposal.floor_until < timezone.now()
    try:
        services.approve(proposal.pk, core.Actor(bob, Channel.API))
    except services.ProposalConflict:
        pass
    services.execute(proposal.pk, KubernetesDriver(kube.url))
    proposal.refresh_from_db()
    assert replicas(kube) == 1, (f"a pre-scale for a window that ended at {proposal.floor_until:%H:%M:%S} was "
                                 f"approved and written at {timezone.now():%H:%M:%S}: state {proposal.state}")


def test_late_approval_after_someone_scaled_above_the_target(kube_pool: Pool, alice: User, bob: User,
                                                              kube: SandboxCluster) -> None:
    proposal = _prescale(kube_pool, 3, made_ago=timedelta(minutes=5))
    set_replicas(kube, 5)  # the on-call scaled by hand while the pre-scale waited
    services.approve(proposal.pk, core.Actor(bob, Channel.API))
    services.execute(proposal.pk, KubernetesDriver(kube.url))
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.STALE and "runs 5 now" in proposal.last_error
    assert replicas(kube) == 5 and audits(proposal, "scale") == 0 and audits(proposal, "stale") == 1


def test_late_approval_onto_exactly_the_target_writes_nothing(kube_pool: Pool, bob: User,
                                                              kube: SandboxCluster) -> None:
    proposal = _prescale(kube_pool, 3, made_ago=timedelta(minutes=5))
    set_replicas(kube, 3)  # the safety net got there first
    services.approve(proposal.pk, core.Actor(bob, Channel.API))
    done = services.execute(proposal.pk, KubernetesDriver(kube.url))
    assert done.applied_at is not None and done.applied_from_replicas is None
    assert replicas(kube) == 3


def test_worker_died_after_claim_world_moved_then_lease_expired(kube_pool: Pool, alice: User, bob: User,
                                                                 kube: SandboxCluster) -> None:
    proposal = _prescale(kube_pool, 3, made_ago=timedelta(minutes=2))
    services.approve(proposal.pk, core.Actor(bob, Channel.API))
    assert services.claim_execution(proposal.pk) is not None  # worker 1 claims, then dies before writing
    set_replicas(kube, 5)
    assert services.advance()["resumed"] == 0  # the lease still runs
    Proposal.objects.filter(pk=proposal.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    services.advance()
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.STALE and replicas(kube) == 5
    assert proposal.attempts == 2
