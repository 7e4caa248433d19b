"""Scenario 5: two teams' pools side by side. design.md §7: "An action checks the team of the object and of the
cluster; no two pools claim the same Deployment"; control-loop.md "Who may approve or reject: operators and admins of
the pool's team"; traffic.md "A pool splits its route when exactly one other pool of its cluster has the same
`route_name` (each with its own `route_backend`)" — a route is (namespace, name): RouteRef(pool.namespace, ...)."""
from __future__ import annotations

from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel, ScalingTarget
from controlplane.models import Cluster, Pool, Team
from sandbox.kube import resources as res
from sandbox.kube.cluster import SandboxCluster
from scaling import prescale_shift, services, traffic
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.models import Proposal

from tests.scaling.world import NS, add_deployment, replicas
from tests.core.conftest import token_client


def _scaled_object(kube: SandboxCluster, name: str, target: str) -> None:
    kube.store.create(res.SCALEDOBJECTS, {"metadata": {"name": name, "namespace": NS}, "spec": {
        "scaleTargetRef": {"name": target}, "minReplicaCount": 1, "maxReplicaCount": 8}, "status": {}})


def test_another_team_cannot_approve(kube_pool: Pool, alice: User, charlie: User, cluster: Cluster,
                                     search_team: Team) -> None:
    cluster.shared_with.add(search_team)  # even in a cluster shared with them
    proposal = services.propose(kube_pool, 3, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
    try:
        services.approve(proposal.pk, core.Actor(charlie, Channel.API))
        raise AssertionError("charlie approved ML Platform's proposal")
    except services.ProposalForbidden:
        pass
    client = token_client(charlie)
    assert client.post(f"/api/v1/proposals/{proposal.pk}/approve/", {}, format="json").status_code in (403, 404)
    bulk = client.post("/api/v1/proposals/bulk/", {"ids": [proposal.pk], "verdict": "approve"}, format="json")
    assert bulk.status_code == 200 and bulk.data["results"][0]["ok"] is False
    assert bulk.data["results"][0]["status"] == 404
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.PENDING


def test_same_deployment_name_in_another_namespace_is_left_alone(kube_pool: Pool, alice: User, bob: User,
                                                                  charlie: User, cluster: Cluster, search_team: Team,
                                                                  kube: SandboxCluster) -> None:
    cluster.shared_with.add(search_team)
    add_deployment(kube, "vllm-chat-8b", namespace="search")
    theirs = Pool.objects.create(cluster=cluster, team=search_team, name="chat-8b-search", namespace="search",
                                 deployment="vllm-chat-8b", model_name="m", gpu_type="L4", min_replicas=1,
                                 max_replicas=8)
    mine = services.propose(kube_pool, 3, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
    services.approve(mine.pk, core.Actor(bob, Channel.API))
    services.execute(mine.pk, KubernetesDriver(kube.url))
    assert (replicas(kube), replicas(kube, namespace="search")) == (3, 1)
    assert not Proposal.objects.filter(pool=theirs).exists()


def test_a_pool_cannot_raise_the_floor_of_another_teams_scaled_object(kube_pool: Pool, bob: User, charlie: User,
                                                                      cluster: Cluster, search_team: Team,
                                                                      kube: SandboxCluster) -> None:
    """ML Platform's chat-8b is scaled by KEDA ScaledObject `chat-scaler` (scaleTargetRef vllm-chat-8b). Search,
    sharing the cluster, registers its pool on its own Deployment vllm-rerank but names `chat-scaler` as its
    ScaledObject (a copy-paste, or on purpose): refused, it is ML Platform's pool's; and a ScaledObject that no pool
    claims but that scales another Deployment is never written either."""
    _scaled_object(kube, "chat-scaler", "vllm-chat-8b")
    Pool.objects.filter(pk=kube_pool.pk).update(scaling_target=ScalingTarget.KEDA, scaled_object="chat-scaler")
    add_deployment(kube, "vllm-rerank")
    cluster.shared_with.add(search_team)
    created = token_client(charlie).post("/api/v1/pools/", {
        "name": "rerank", "cluster": cluster.pk, "team": "search", "namespace": NS, "deployment": "vllm-rerank",
        "model_name": "rerank", "gpu_type": "L4", "min_replicas": 1, "max_replicas": 6,
        "scaling_target": "keda", "scaled_object": "chat-scaler"}, format="json")
    assert created.status_code == 400 and "Another pool already scales through ScaledObject" in str(
        created.data["scaled_object"]), created.data
    # Through the database (or before this check existed): the driver still refuses what the ScaledObject scales.
    rerank = Pool.objects.create(name="rerank", cluster=cluster, team=search_team, namespace=NS, deployment="vllm-rerank",
                                 model_name="rerank", gpu_type="L4", min_replicas=1, max_replicas=6,
                                 scaling_target=ScalingTarget.KEDA, scaled_object="chat-scaler")
    proposal = services.propose(rerank, 4, ProposalKind.MANUAL, core.Actor(charlie, Channel.API), current=1)
    services.approve(proposal.pk, core.Actor(charlie, Channel.API))
    done = services.execute(proposal.pk, KubernetesDriver(kube.url))
    floor = kube.store.get(res.SCALEDOBJECTS, NS, "chat-scaler")["spec"]["minReplicaCount"]
    assert floor == 1, (f"Search's proposal #{done.pk} ({done.state}) set ML Platform's ScaledObject chat-scaler "
                        f"(scaleTargetRef vllm-chat-8b) to minReplicaCount {floor}")
    assert done.state == ProposalState.FAILED and done.last_error == (
        f"ScaledObject {NS}/chat-scaler scales Deployment 'vllm-chat-8b', not this pool's Deployment 'vllm-rerank': "
        "nothing written")


def test_a_scaled_object_retargeted_after_approval_is_not_written(kube_pool: Pool, alice: User, bob: User,
                                                                  kube: SandboxCluster) -> None:
    """The world moves: after approval, the platform team points ScaledObject chat-scaler at another Deployment
    (vllm-batch). The pool's change should not raise the floor of a Deployment that is not the pool's."""
    _scaled_object(kube, "chat-scaler", "vllm-chat-8b")
    Pool.objects.filter(pk=kube_pool.pk).update(scaling_target=ScalingTarget.KEDA, scaled_object="chat-scaler")
    pool = Pool.objects.select_related("cluster", "team").get(pk=kube_pool.pk)
    proposal = services.propose(pool, 4, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
    services.approve(proposal.pk, core.Actor(bob, Channel.API))

    def retarget(obj: dict) -> dict:
        obj["spec"]["scaleTargetRef"] = {"name": "vllm-batch"}
        return obj
    kube.store.update(res.SCALEDOBJECTS, NS, "chat-scaler", retarget)
    done = services.execute(proposal.pk, KubernetesDriver(kube.url))
    floor = kube.store.get(res.SCALEDOBJECTS, NS, "chat-scaler")["spec"]["minReplicaCount"]
    assert floor == 1, f"wrote minReplicaCount {floor} to a ScaledObject that scales vllm-batch ({done.state})"
    assert done.state == ProposalState.FAILED and "scales Deployment 'vllm-batch'" in done.last_error


def test_another_teams_pool_in_another_namespace_does_not_break_split_routing(
        cluster: Cluster, ml_team: Team, search_team: Team) -> None:
    """ML Platform splits route inference/chat between chat-8b and chat-8b-warm. Search, sharing the cluster, has
    its own HTTPRoute search/chat. The giving pool of a chat-8b-warm pre-scale is chat-8b; Search's pool is on
    another route (another namespace) and must not count."""
    common = dict(cluster=cluster, model_name="m", gpu_type="H100", min_replicas=1, max_replicas=8, route_name="chat")
    cluster.shared_with.add(search_team)
    chat = Pool.objects.create(team=ml_team, name="chat-8b", namespace=NS, deployment="vllm-chat-8b",
                               route_backend="vllm-chat-8b", **common)
    warm = Pool.objects.create(team=ml_team, name="chat-8b-warm", namespace=NS, deployment="vllm-warm",
                               route_backend="vllm-warm", **common)
    Pool.objects.create(team=search_team, name="search-chat", namespace="search", deployment="vllm-chat",
                        route_backend="vllm-chat", **common)
    giver = prescale_shift.giving_pool(warm)
    assert giver == chat, f"giving pool {giver}: Search's pool in namespace search made ML Platform's split ambiguous"


def test_the_giving_pool_is_never_another_namespaces_pool(cluster: Cluster, ml_team: Team,
                                                          search_team: Team) -> None:
    common = dict(cluster=cluster, model_name="m", gpu_type="H100", min_replicas=1, max_replicas=8, route_name="chat")
    cluster.shared_with.add(search_team)
    warm = Pool.objects.create(team=ml_team, name="chat-8b-warm", namespace=NS, deployment="vllm-warm",
                               route_backend="vllm-warm", **common)
    theirs = Pool.objects.create(team=search_team, name="search-chat", namespace="search", deployment="vllm-chat",
                                 route_backend="vllm-chat", **common)
    assert prescale_shift.giving_pool(warm) != theirs, "Search's pool (another route) would give ML's pool its traffic"


def test_a_shift_between_two_namespaces_routes_of_one_name_is_refused(cluster: Cluster, ml_team: Team,
                                                                      search_team: Team, alice: User) -> None:
    common = dict(cluster=cluster, model_name="m", gpu_type="H100", min_replicas=1, max_replicas=8, route_name="chat")
    cluster.shared_with.add(search_team)
    ours = Pool.objects.create(team=ml_team, name="chat-8b", namespace=NS, deployment="vllm-chat-8b",
                               route_backend="vllm-chat-8b", **common)
    other = Pool.objects.create(team=ml_team, name="chat-other", namespace="other", deployment="vllm-chat",
                                route_backend="vllm-chat", **common)
    try:
        traffic.start(ours, other, core.Actor(alice, Channel.API))
        raise AssertionError("a shift across two routes named chat was started")
    except traffic.InvalidShift as refused:
        assert refused.field == "to_pool" and "a shift moves traffic on one route" in str(refused)
