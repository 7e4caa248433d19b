"""Team boundaries hold for actions, not only for reads: every write endpoint and action of the API
and the web UI, by a member of Search with each role, on each kind of object of `tests.permission_world`
(own, other, shared, unshared). Each case asserts the exact answer and, on a refusal, that nothing at
all changed in the database.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from controlplane import forms, services
from controlplane.choices import Channel, Role
from controlplane.models import AuditEvent, Cluster, Pool, Team
from scaling import services as scaling
from scaling.choices import ProposalKind, ProposalState

from tests.core.conftest import token_client
from tests.permission_world import ROLES, SCOPES, World, database_state, member_of_search, world  # noqa: F401

# --- the API ----------------------------------------------------------------------------------


def _new_pool_payload(world: World, scope: str) -> dict:
    team = {"other": "ml-platform"}.get(scope, "search")
    return {"name": "new-pool", "cluster": world.cluster(scope).pk, "team": team, "namespace": "inference",
            "deployment": "vllm-new-pool", "model_name": "m", "gpu_type": "L4", "min_replicas": 1, "max_replicas": 4}


def _new_cluster_payload(world: World, scope: str) -> dict:
    # own: Search's cluster; shared: Search's cluster shared with ML Platform; other: a cluster for ML
    # Platform; unshared: a cluster for ML Platform that shares itself with Search.
    team, shared_with = {"own": ("search", []), "other": ("ml-platform", []), "shared": ("search", ["ml-platform"]),
                         "unshared": ("ml-platform", ["search"])}[scope]
    return {"name": "new-cluster", "team": team, "shared_with": shared_with, "kube_api_url": "http://127.0.0.1:9"}


ApiCall = Callable[[APIClient, World, str], Any]
API_CALLS: dict[str, ApiCall] = {
    "create pool": lambda c, w, s: c.post("/api/v1/pools/", _new_pool_payload(w, s), format="json"),
    "update pool": lambda c, w, s: c.patch(f"/api/v1/pools/{w.pool(s).pk}/", {"max_replicas": 6}, format="json"),
    "delete pool": lambda c, w, s: c.delete(f"/api/v1/pools/{w.pool(s).pk}/"),
    "create slo": lambda c, w, s: c.post("/api/v1/slos/", {"pool": w.pool(s).pk, "indicator": "e2e_p95",
                                                            "threshold": 8000, "objective": 0.99}, format="json"),
    "update slo": lambda c, w, s: c.patch(f"/api/v1/slos/{w.slo(s).pk}/", {"threshold": 900}, format="json"),
    "delete slo": lambda c, w, s: c.delete(f"/api/v1/slos/{w.slo(s).pk}/"),
    "create schedule": lambda c, w, s: c.post("/api/v1/schedules/", {
        "pool": w.pool(s).pk, "name": "evenings", "weekday": 1, "start": "18:00", "end": "20:00"}, format="json"),
    "update schedule": lambda c, w, s: c.patch(f"/api/v1/schedules/{w.schedule(s).pk}/", {"lead_minutes": 5},
                                               format="json"),
    "delete schedule": lambda c, w, s: c.delete(f"/api/v1/schedules/{w.schedule(s).pk}/"),
    "create cluster": lambda c, w, s: c.post("/api/v1/clusters/", _new_cluster_payload(w, s), format="json"),
    "update cluster": lambda c, w, s: c.patch(f"/api/v1/clusters/{w.cluster(s).pk}/", {"region": "mars-1"},
                                              format="json"),
    "share cluster": lambda c, w, s: c.patch(f"/api/v1/clusters/{w.cluster(s).pk}/",
                                             {"shared_with": ["search", "ml-platform"]}, format="json"),
    "delete cluster": lambda c, w, s: c.delete(f"/api/v1/clusters/{w.spare_clusters[s].pk}/"),
    "propose": lambda c, w, s: c.post("/api/v1/proposals/", {"pool": w.pool(s).pk, "target_replicas": 5},
                                      format="json"),
    "approve": lambda c, w, s: c.post(f"/api/v1/proposals/{w.proposal(s).pk}/approve/", {}, format="json"),
    "reject": lambda c, w, s: c.post(f"/api/v1/proposals/{w.proposal(s).pk}/reject/", {}, format="json"),
    "execute": lambda c, w, s: c.post(f"/api/v1/proposals/{w.proposal(s, ProposalState.APPROVED).pk}/execute/"),
}

# The answer to the member with the role the action needs (admin for configuration, operator for
# proposals), per scope. A member without that role in any team gets 403 everywhere.
# 400: the payload names a cluster, team or pool they cannot see; 404: the object is invisible to them;
# 403: visible, but their role (in the cluster's team) or the cluster's sharing does not allow it.
# Deleting needs the object's team only, so a team can always remove a pool it can no longer use.
API_ANSWERS: dict[str, dict[str, int]] = {
    "create pool": {"own": 201, "other": 400, "shared": 201, "unshared": 400},
    "update pool": {"own": 200, "other": 404, "shared": 200, "unshared": 403},
    "delete pool": {"own": 204, "other": 404, "shared": 204, "unshared": 204},
    "create slo": {"own": 201, "other": 400, "shared": 201, "unshared": 403},
    "update slo": {"own": 200, "other": 404, "shared": 200, "unshared": 403},
    "delete slo": {"own": 204, "other": 404, "shared": 204, "unshared": 204},
    "create schedule": {"own": 201, "other": 400, "shared": 201, "unshared": 403},
    "update schedule": {"own": 200, "other": 404, "shared": 200, "unshared": 403},
    "delete schedule": {"own": 204, "other": 404, "shared": 204, "unshared": 204},
    "create cluster": {"own": 201, "other": 400, "shared": 201, "unshared": 400},
    "update cluster": {"own": 200, "other": 404, "shared": 403, "unshared": 404},
    "share cluster": {"own": 200, "other": 404, "shared": 403, "unshared": 404},
    "delete cluster": {"own": 204, "other": 404, "shared": 403, "unshared": 404},
    "propose": {"own": 201, "other": 400, "shared": 201, "unshared": 403},
    "approve": {"own": 200, "other": 404, "shared": 200, "unshared": 403},
    "reject": {"own": 200, "other": 404, "shared": 200, "unshared": 403},
    "execute": {"own": 200, "other": 404, "shared": 200, "unshared": 403},
}
PROPOSAL_ACTIONS = {"propose", "approve", "reject", "execute"}


def expected_api_answer(action: str, role: str, scope: str) -> int:
    needed = Role.OPERATOR if action in PROPOSAL_ACTIONS else Role.ADMIN
    return API_ANSWERS[action][scope] if Role.rank(role) >= Role.rank(needed) else 403


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", list(API_CALLS))
def test_it_answers_every_api_write_by_role_and_scope(
    world: World, search_team: Team, action: str, role: str, scope: str
) -> None:
    client = token_client(member_of_search(search_team, role))
    before = database_state()
    response = API_CALLS[action](client, world, scope)
    expected = expected_api_answer(action, role, scope)
    assert response.status_code == expected, (action, role, scope, response.data)
    if expected >= 400:
        assert database_state() == before, f"{action} by a {role} on {scope} was refused but changed the database"
    else:
        assert AuditEvent.objects.count() > before[-1], f"{action} by a {role} on {scope} left no audit record"


def test_a_refused_action_in_an_unshared_cluster_says_why(world: World, search_team: Team) -> None:
    client = token_client(member_of_search(search_team, Role.ADMIN))
    response = client.patch(f"/api/v1/pools/{world.pool('unshared').pk}/", {"max_replicas": 6}, format="json")
    assert response.status_code == 403
    assert response.data == {"detail": "Cluster gpu-us-east belongs to team ML Platform and is not shared with "
                                       "team Search; an admin of ML Platform can share it."}


# --- the attack from issue 11, and the Deployment claim ------------------------------------------


def test_it_refuses_a_team_b_admin_naming_team_a_deployment_in_team_a_cluster(
    bob: User, charlie: User, pool: Pool, cluster: Cluster, search_team: Team
) -> None:
    """charlie (admin of Search) has a pool sitting in ML Platform's cluster, placed before sharing
    was explicit. He names ML Platform's Deployment in a new pool, to scale it to zero."""
    Pool.objects.create(cluster=cluster, team=search_team, name="squatter", namespace="search", deployment="vllm-s",
                        model_name="m", gpu_type="L4", min_replicas=1, max_replicas=2)
    client = token_client(charlie)
    before = database_state()
    response = client.post("/api/v1/pools/", {
        "name": "hijack", "cluster": cluster.pk, "team": "search", "namespace": pool.namespace,
        "deployment": pool.deployment, "model_name": "m", "gpu_type": "H100", "min_replicas": 0, "max_replicas": 1,
    }, format="json")
    assert response.status_code == 400
    assert response.json() == {"cluster": [f'Invalid pk "{cluster.pk}" - object does not exist.']}
    assert database_state() == before


def test_it_refuses_a_second_pool_for_a_claimed_deployment_even_in_a_shared_cluster(
    bob: User, charlie: User, pool: Pool, cluster: Cluster, search_team: Team
) -> None:
    """Sharing lets Search place pools in the cluster, not take over the Deployments already managed there."""
    cluster.shared_with.add(search_team)
    client = token_client(charlie)
    before = database_state()
    response = client.post("/api/v1/pools/", {
        "name": "hijack", "cluster": cluster.pk, "team": "search", "namespace": pool.namespace,
        "deployment": pool.deployment, "model_name": "m", "gpu_type": "H100", "min_replicas": 0, "max_replicas": 1,
    }, format="json")
    assert response.status_code == 400
    assert response.json() == {"deployment": [
        "Another pool already manages Deployment inference/vllm-chat-8b in this cluster; "
        "two pools must not scale the same Deployment."]}
    assert database_state() == before


def test_it_refuses_moving_a_pool_onto_a_claimed_deployment(bob: User, pool: Pool, cluster: Cluster) -> None:
    other = Pool.objects.create(cluster=cluster, team=pool.team, name="code-7b", namespace="inference",
                                deployment="vllm-code-7b", model_name="m", gpu_type="H100", min_replicas=1, max_replicas=2)
    response = token_client(bob).patch(f"/api/v1/pools/{other.pk}/", {"deployment": pool.deployment}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["deployment"]
    other.refresh_from_db()
    assert other.deployment == "vllm-code-7b"


def test_it_refuses_moving_a_pool_into_another_teams_cluster(
    charlie: User, search_pool: Pool, cluster: Cluster, search_team: Team
) -> None:
    response = token_client(charlie).patch(f"/api/v1/pools/{search_pool.pk}/", {"cluster": cluster.pk}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["cluster"]  # ML Platform's cluster is invisible
    cluster.shared_with.add(search_team)
    response = token_client(charlie).patch(f"/api/v1/pools/{search_pool.pk}/", {"cluster": cluster.pk}, format="json")
    assert response.status_code == 200
    assert Pool.objects.get(pk=search_pool.pk).cluster == cluster


def test_revoking_a_share_stops_the_shared_teams_actions_at_once(
    bob: User, charlie: User, cluster: Cluster, search_team: Team
) -> None:
    cluster.shared_with.add(search_team)
    client = token_client(charlie)
    created = client.post("/api/v1/pools/", {
        "name": "embed", "cluster": cluster.pk, "team": "search", "namespace": "search", "deployment": "vllm-embed",
        "model_name": "m", "gpu_type": "L4", "min_replicas": 1, "max_replicas": 4}, format="json")
    assert created.status_code == 201
    assert token_client(bob).patch(f"/api/v1/clusters/{cluster.pk}/", {"shared_with": []}, format="json").status_code == 200
    assert client.patch(f"/api/v1/pools/{created.data['id']}/", {"max_replicas": 6}, format="json").status_code == 403
    assert client.post("/api/v1/proposals/", {"pool": created.data["id"], "target_replicas": 2},
                       format="json").status_code == 403


def test_only_the_owning_teams_admin_shares_a_cluster_and_it_is_audited(
    alice: User, bob: User, charlie: User, cluster: Cluster, search_team: Team
) -> None:
    url = f"/api/v1/clusters/{cluster.pk}/"
    assert token_client(alice).patch(url, {"shared_with": ["search"]}, format="json").status_code == 403
    response = token_client(bob).patch(url, {"shared_with": ["search"]}, format="json")
    assert response.status_code == 200 and response.data["shared_with"] == ["search"]
    event = AuditEvent.objects.filter(object_type="controlplane.cluster", action="update").get()
    assert (event.actor, event.before["shared_with"], event.after["shared_with"]) == (bob, [], [search_team.pk])
    # Search now sees the cluster, but cannot change its sharing (nor anything else of it).
    assert token_client(charlie).get(url).status_code == 200
    assert token_client(charlie).patch(url, {"shared_with": []}, format="json").status_code == 403
    response = token_client(bob).patch(url, {"shared_with": ["no-such-team"]}, format="json")
    assert response.status_code == 400 and list(response.data) == ["shared_with"]


def test_a_pool_sitting_in_a_cluster_no_longer_makes_it_visible(
    charlie: User, cluster: Cluster, search_team: Team
) -> None:
    Pool.objects.create(cluster=cluster, team=search_team, name="squatter", namespace="search", deployment="vllm-s",
                        model_name="m", gpu_type="L4", min_replicas=1, max_replicas=2)
    client = token_client(charlie)
    assert client.get(f"/api/v1/clusters/{cluster.pk}/").status_code == 404
    cluster.shared_with.add(search_team)
    assert [row["name"] for row in client.get("/api/v1/clusters/").data["results"]] == ["gpu-us-east"]


# --- the web UI --------------------------------------------------------------------------------


FORMS = {"pool": forms.PoolForm, "slo": forms.SLOForm, "schedule": forms.ScheduleWindowForm,
         "cluster": forms.ClusterForm}


def form_data(kind: str, instance: Any, user: User, **changes: Any) -> dict:
    """What the browser posts for the object's edit form, with `changes` applied."""
    form = FORMS[kind](instance=instance, user=user)
    data = {}
    for name, field in form.fields.items():
        value = field.prepare_value(form.initial.get(name))
        if value is not None:
            data[name] = value
    return data | changes


def _web_new_pool(c: Client, w: World, s: str, user: User) -> Any:
    team = w.team("other") if s == "other" else w.team("own")
    data = form_data("pool", w.pool(s), user, name="new-pool", deployment="vllm-new-pool", team=team.pk)
    return c.post("/pool/new/", data)


def _web_new_cluster(c: Client, w: World, s: str, user: User) -> Any:
    team = w.team("other") if s in ("other", "unshared") else w.team("own")
    data = form_data("cluster", w.cluster("own"), user, name="new-cluster", team=team.pk)
    return c.post("/cluster/new/", data)


WebCall = Callable[[Client, World, str, User], Any]
WEB_CALLS: dict[str, WebCall] = {
    "create pool": _web_new_pool,
    "edit pool": lambda c, w, s, u: c.post(f"/pool/{w.pool(s).pk}/edit/", form_data("pool", w.pool(s), u,
                                                                                       max_replicas=6)),
    "delete pool": lambda c, w, s, u: c.post(f"/pool/{w.pool(s).pk}/delete/"),
    "create slo": lambda c, w, s, u: c.post("/slo/new/", {"pool": w.pool(s).pk, "indicator": "e2e_p95",
                                                          "threshold": 8000, "objective": 0.99, "window_days": 28}),
    "edit slo": lambda c, w, s, u: c.post(f"/slo/{w.slo(s).pk}/edit/", form_data("slo", w.slo(s), u, threshold=900)),
    "delete slo": lambda c, w, s, u: c.post(f"/slo/{w.slo(s).pk}/delete/"),
    "create schedule": lambda c, w, s, u: c.post("/schedule/new/", {
        "pool": w.pool(s).pk, "name": "evenings", "weekday": 1, "start": "18:00", "end": "20:00", "time_zone": "UTC",
        "prescale_factor": 1.4, "lead_minutes": 10}),
    "edit schedule": lambda c, w, s, u: c.post(f"/schedule/{w.schedule(s).pk}/edit/",
                                               form_data("schedule", w.schedule(s), u, lead_minutes=5)),
    "delete schedule": lambda c, w, s, u: c.post(f"/schedule/{w.schedule(s).pk}/delete/"),
    "create cluster": _web_new_cluster,
    "edit cluster": lambda c, w, s, u: c.post(f"/cluster/{w.cluster(s).pk}/edit/",
                                              form_data("cluster", w.cluster(s), u, region="mars-1")),
    "delete cluster": lambda c, w, s, u: c.post(f"/cluster/{w.spare_clusters[s].pk}/delete/"),
    "approve": lambda c, w, s, u: c.post(f"/proposals/{w.proposal(s).pk}/approve/"),
    "reject": lambda c, w, s, u: c.post(f"/proposals/{w.proposal(s).pk}/reject/"),
}

# 302: saved, back to the page; 200 "error": the form comes back with the refusal inline (a choice it
# does not offer, or the cluster's sharing), nothing saved; 404: invisible; 403: visible, not allowed.
WEB_ANSWERS: dict[str, dict[str, int | str]] = {
    "create pool": {"own": 302, "other": "error", "shared": 302, "unshared": "error"},
    "edit pool": {"own": 302, "other": 404, "shared": 302, "unshared": "error"},
    "delete pool": {"own": 302, "other": 404, "shared": 302, "unshared": 302},
    "create slo": {"own": 302, "other": "error", "shared": 302, "unshared": "error"},
    "edit slo": {"own": 302, "other": 404, "shared": 302, "unshared": "error"},
    "delete slo": {"own": 302, "other": 404, "shared": 302, "unshared": 302},
    "create schedule": {"own": 302, "other": "error", "shared": 302, "unshared": "error"},
    "edit schedule": {"own": 302, "other": 404, "shared": 302, "unshared": "error"},
    "delete schedule": {"own": 302, "other": 404, "shared": 302, "unshared": 302},
    "create cluster": {"own": 302, "other": "error", "shared": 302, "unshared": "error"},
    "edit cluster": {"own": 302, "other": 404, "shared": 403, "unshared": 404},
    "delete cluster": {"own": 302, "other": 404, "shared": 403, "unshared": 404},
    "approve": {"own": 200, "other": 404, "shared": 200, "unshared": 403},
    "reject": {"own": 200, "other": 404, "shared": 200, "unshared": 403},
}
WEB_DECISIONS = {"approve", "reject"}


def expected_web_answer(action: str, role: str, scope: str) -> int | str:
    needed = Role.OPERATOR if action in WEB_DECISIONS else Role.ADMIN
    answer = WEB_ANSWERS[action][scope]
    if Role.rank(role) >= Role.rank(needed) or answer == 404:
        return answer
    if action.startswith("create "):
        return "error"  # the form offers no team (or refuses the role) to a non-admin
    return 403


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", list(WEB_CALLS))
def test_it_answers_every_web_write_by_role_and_scope(
    world: World, search_team: Team, action: str, role: str, scope: str
) -> None:
    user = member_of_search(search_team, role)
    client = Client()
    client.force_login(user)
    before = database_state()
    response = WEB_CALLS[action](client, world, scope, user)
    expected = expected_web_answer(action, role, scope)
    if expected == "error":
        assert response.status_code == 200 and 'class="error"' in response.content.decode(), (action, role, scope)
    else:
        assert response.status_code == expected, (action, role, scope)
    if expected in ("error", 403, 404):
        assert database_state() == before, f"{action} by a {role} on {scope} was refused but changed the database"
    else:
        assert AuditEvent.objects.count() > before[-1], f"{action} by a {role} on {scope} left no audit record"


def test_the_pool_form_offers_only_clusters_the_admins_teams_may_use(world: World, search_team: Team) -> None:
    form = forms.PoolForm(user=member_of_search(search_team, Role.ADMIN))
    assert sorted(form.fields["cluster"].queryset.values_list("name", flat=True)) == [
        "gpu-eu", "gpu-shared", "spare-search", "spare-shared"]


def test_the_web_form_names_the_claimed_deployment_inline(bob: User, pool: Pool) -> None:
    client = Client()
    client.force_login(bob)
    data = form_data("pool", pool, bob, name="copy-of-chat")
    response = client.post("/pool/new/", data, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith("<form")
    assert "Another pool already manages Deployment inference/vllm-chat-8b in this cluster" in body
    assert not Pool.objects.filter(name="copy-of-chat").exists()


def test_the_web_form_explains_an_unshared_cluster_on_the_pool_field(world: World, search_team: Team) -> None:
    user = member_of_search(search_team, Role.ADMIN)
    client = Client()
    client.force_login(user)
    response = client.post(f"/slo/{world.slo('unshared').pk}/edit/", form_data("slo", world.slo("unshared"), user,
                                                                                threshold=900))
    assert response.status_code == 200
    assert response.context["form"].errors == {"pool": [
        "Cluster gpu-us-east belongs to team ML Platform and is not shared with team Search; "
        "an admin of ML Platform can share it."]}


def test_the_cluster_form_shares_with_any_team_and_audits_it(bob: User, cluster: Cluster, search_team: Team) -> None:
    client = Client()
    client.force_login(bob)
    response = client.post(f"/cluster/{cluster.pk}/edit/", form_data("cluster", cluster, bob, shared_with=[search_team.pk]))
    assert response.status_code == 302
    assert list(cluster.shared_with.all()) == [search_team]
    event = AuditEvent.objects.get(object_type="controlplane.cluster", action="update")
    assert (event.channel, event.before["shared_with"], event.after["shared_with"]) == ("web", [], [search_team.pk])


def test_the_inbox_offers_no_buttons_for_a_pool_in_an_unshared_cluster(world: World, search_team: Team) -> None:
    client = Client()
    client.force_login(member_of_search(search_team, Role.OPERATOR))
    own = client.get(f"/proposals/{world.proposal('own').pk}/card/").content.decode()
    unshared = client.get(f"/proposals/{world.proposal('unshared').pk}/card/").content.decode()
    assert "Approve" in own and "Approve" not in unshared


def test_it_refuses_a_person_proposing_for_a_pool_in_an_unshared_cluster(world: World, search_team: Team) -> None:
    user = member_of_search(search_team, Role.OPERATOR)
    before = database_state()
    with pytest.raises(scaling.ProposalForbidden, match="is not shared with team Search"):
        scaling.propose(world.pool("unshared"), 5, ProposalKind.MANUAL, services.Actor(user, Channel.API))
    assert database_state() == before
