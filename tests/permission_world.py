"""The world the permission matrices act on, for a member of Search with each role:

- own:      Search's pool in Search's cluster;
- other:    ML Platform's pool in ML Platform's cluster (Search sees none of it);
- shared:   Search's pool in ML Platform's cluster that ML Platform shared with Search;
- unshared: Search's pool in ML Platform's cluster that is *not* shared (a pool placed before the rule,
            or a share since revoked): the foothold of the attack in issue 11.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.choices import Channel, Role, SloIndicator
from controlplane.models import SLO, AuditEvent, Cluster, Membership, Pool, ScheduleWindow, Team
from scaling.choices import ProposalKind, ProposalState
from scaling.models import Proposal

ROLES = [Role.VIEWER, Role.OPERATOR, Role.ADMIN]
SCOPES = ["own", "other", "shared", "unshared"]


@dataclass
class World:
    """Per scope: the pool acted on, its cluster, an SLO, a schedule, a pending and an approved
    proposal, and an empty cluster to delete."""

    pools: dict[str, Pool]
    spare_clusters: dict[str, Cluster]

    def pool(self, scope: str) -> Pool:
        return self.pools[scope]

    def cluster(self, scope: str) -> Cluster:
        return self.pools[scope].cluster

    def slo(self, scope: str) -> SLO:
        return self.pools[scope].slos.get()

    def schedule(self, scope: str) -> ScheduleWindow:
        return self.pools[scope].schedules.get()

    def proposal(self, scope: str, state: str = ProposalState.PENDING) -> Proposal:
        return self.pools[scope].proposals.get(state=state)

    def team(self, scope: str) -> Team:
        return self.pools[scope].team


def _pool(cluster: Cluster, team: Team, name: str) -> Pool:
    pool = Pool.objects.create(cluster=cluster, team=team, name=name, namespace="inference", deployment=f"vllm-{name}",
                               model_name="m", gpu_type="L4", min_replicas=1, max_replicas=8)
    SLO.objects.create(pool=pool, indicator=SloIndicator.TTFT_P95, threshold=1000, objective=0.99)
    ScheduleWindow.objects.create(pool=pool, name="mornings", weekday=0, start="09:00", end="11:00")
    # Made before the scene (the unshared pool's before the rule), so written directly: an approved
    # proposal whose execution has not run, and a pending one.
    for target, state in ((3, ProposalState.APPROVED), (4, ProposalState.PENDING)):
        Proposal.objects.create(pool=pool, kind=ProposalKind.PRESCALE, state=state, current_replicas=1,
                                target_replicas=target, idempotency_key=f"world-{name}-{target}",
                                requested_channel=Channel.AUTO, expires_at=timezone.now() + timedelta(minutes=10))
    return pool


@pytest.fixture
def world(ml_team: Team, search_team: Team, cluster: Cluster) -> World:
    search_cluster = Cluster.objects.create(name="gpu-eu", team=search_team, kube_api_url="http://127.0.0.1:6444")
    shared = Cluster.objects.create(name="gpu-shared", team=ml_team, kube_api_url="http://127.0.0.1:6445")
    shared.shared_with.add(search_team)
    spare_shared = Cluster.objects.create(name="spare-shared", team=ml_team, kube_api_url="http://127.0.0.1:6446")
    spare_shared.shared_with.add(search_team)
    return World(
        pools={
            "own": _pool(search_cluster, search_team, "rerank"),
            "other": _pool(cluster, ml_team, "chat-8b"),
            "shared": _pool(shared, search_team, "embed"),
            "unshared": _pool(cluster, search_team, "squatter"),
        },
        spare_clusters={
            "own": Cluster.objects.create(name="spare-search", team=search_team, kube_api_url="http://127.0.0.1:1"),
            "other": Cluster.objects.create(name="spare-ml", team=ml_team, kube_api_url="http://127.0.0.1:2"),
            "shared": spare_shared,
            "unshared": Cluster.objects.create(name="spare-ml-2", team=ml_team, kube_api_url="http://127.0.0.1:3"),
        },
    )


def member_of_search(search_team: Team, role: str) -> User:
    user = User.objects.create(username=f"search-{role}")  # no password: tokens and force_login only
    Membership.objects.create(user=user, team=search_team, role=role)
    return user


def database_state() -> tuple:
    """Everything an action could change, to compare before and after a refusal."""
    return (
        list(Cluster.objects.order_by("pk").values()),
        list(Cluster.shared_with.through.objects.order_by("pk").values("cluster_id", "team_id")),
        list(Pool.objects.order_by("pk").values()),
        list(SLO.objects.order_by("pk").values()),
        list(ScheduleWindow.objects.order_by("pk").values()),
        list(Proposal.objects.order_by("pk").values("pk", "state", "decided_by", "attempts")),
        AuditEvent.objects.count(),
    )
