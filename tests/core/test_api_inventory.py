"""The inventory API: scoped to the caller's teams, role-checked, audited, and 400 on bad input."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from controlplane.models import AuditEvent, Cluster, Pool, ScheduleWindow

from .conftest import token_client


def _new_pool(target_cluster: Cluster, **changes) -> dict:  # noqa: ANN003
    payload = {
        "name": "code-7b", "cluster": target_cluster.pk, "team": "ml-platform", "namespace": "inference",
        "deployment": "vllm-code-7b", "model_name": "qwen2.5-coder-7b", "gpu_type": "H100",
        "min_replicas": 1, "max_replicas": 6,
    }
    return payload | changes


def test_it_lists_only_the_callers_pools(alice: User, charlie: User, pool: Pool, search_pool: Pool) -> None:
    assert [row["name"] for row in token_client(alice).get("/api/v1/pools/").data["results"]] == ["chat-8b"]
    assert [row["name"] for row in token_client(charlie).get("/api/v1/pools/").data["results"]] == ["rerank"]
    assert token_client(charlie).get(f"/api/v1/pools/{pool.pk}/").status_code == 404


def test_it_filters_pools_by_cluster_and_team(bob: User, pool: Pool, cluster: Cluster) -> None:
    client = token_client(bob)
    assert client.get(f"/api/v1/pools/?cluster={cluster.pk}").data["count"] == 1
    assert client.get("/api/v1/pools/?cluster_name=gpu-us-east&team=ml-platform").data["count"] == 1
    assert client.get("/api/v1/pools/?team=search").data["count"] == 0
    response = client.get("/api/v1/pools/?cluster=not-a-number")
    assert response.status_code == 400 and "cluster" in response.data


def test_it_lets_an_admin_create_a_pool_and_audits_it(bob: User, cluster: Cluster) -> None:
    response = token_client(bob).post(
        "/api/v1/pools/", _new_pool(cluster), format="json", HTTP_X_REQUEST_ID="req-create-code-7b"
    )
    assert response.status_code == 201, response.data
    event = AuditEvent.objects.get(object_type="controlplane.pool", action="create")
    assert (event.actor_name, event.channel, event.request_id) == ("bob", "api", "req-create-code-7b")
    assert event.after["max_replicas"] == 6 and event.before is None
    assert response["X-Request-ID"] == "req-create-code-7b"


def test_it_names_the_field_when_min_exceeds_max(bob: User, cluster: Cluster) -> None:
    response = token_client(bob).post("/api/v1/pools/", _new_pool(cluster, min_replicas=5, max_replicas=3), format="json")
    assert response.status_code == 400
    assert list(response.data) == ["min_replicas"]
    assert not Pool.objects.filter(name="code-7b").exists()
    assert not AuditEvent.objects.filter(object_type="controlplane.pool").exists()


def test_it_names_the_field_on_a_partial_update_that_breaks_bounds(bob: User, pool: Pool) -> None:
    response = token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {"min_replicas": 20}, format="json")
    assert response.status_code == 400 and "min_replicas" in response.data
    pool.refresh_from_db()
    assert pool.min_replicas == 1


def test_it_records_before_and_after_on_update(bob: User, pool: Pool) -> None:
    response = token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {"max_replicas": 12}, format="json")
    assert response.status_code == 200
    event = AuditEvent.objects.get(action="update", object_id=str(pool.pk))
    assert (event.before["max_replicas"], event.after["max_replicas"]) == (8, 12)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "chat-8b"}, "name"),  # unique per cluster: names the field (and the pool, id)
        ({"name": "Bad_Name"}, "name"),
        ({"gpus_per_replica": 0}, "gpus_per_replica"),
        ({"warm_pool_fraction": 1.2}, "warm_pool_fraction"),
        ({"max_replicas": "many"}, "max_replicas"),
        ({"team": "no-such-team"}, "team"),
        ({"cluster": 999999}, "cluster"),
        ({"scaling_target": "keda"}, "scaled_object"),
        ({"scaling_target": "hpa", "min_replicas": 0}, "min_replicas"),  # an HPA's floor is at least 1
        ({"priority": "urgent"}, "priority"),
    ],
)
def test_it_answers_400_naming_the_field(bob: User, pool: Pool, cluster: Cluster, changes: dict, field: str) -> None:
    response = token_client(bob).post("/api/v1/pools/", _new_pool(cluster, **changes), format="json")
    assert response.status_code == 400, response.data
    assert field in response.data


def test_it_needs_the_admin_role_in_the_new_team_to_move_a_pool(bob: User, pool: Pool, search_team) -> None:  # noqa: ANN001
    from controlplane.models import Membership

    Membership.objects.create(user=bob, team=search_team, role="viewer")  # bob can see Search, not configure it
    response = token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {"team": "search"}, format="json")
    assert response.status_code == 403 and "admin role in team 'Search'" in response.data["detail"]
    assert Pool.objects.get(pk=pool.pk).team.slug == "ml-platform"


def test_it_keeps_viewers_and_operators_from_configuring(alice: User, pool: Pool, cluster: Cluster) -> None:
    client = token_client(alice)  # an operator: may approve, not configure
    assert client.post("/api/v1/pools/", _new_pool(cluster), format="json").status_code == 403
    assert client.patch(f"/api/v1/pools/{pool.pk}/", {"max_replicas": 2}, format="json").status_code == 403
    assert client.delete(f"/api/v1/pools/{pool.pk}/").status_code == 403
    assert Pool.objects.get(pk=pool.pk).max_replicas == 8


def test_it_keeps_outsiders_out_of_other_teams(charlie: User, pool: Pool, cluster: Cluster, search_pool: Pool) -> None:
    client = token_client(charlie)
    # charlie cannot see ml-platform's cluster, so cannot place a pool in it...
    response = client.post("/api/v1/pools/", _new_pool(cluster, team="search"), format="json")
    assert response.status_code == 400 and "cluster" in response.data
    # ...nor create a pool owned by a team he does not belong to (he cannot even name it)...
    response = client.post("/api/v1/pools/", _new_pool(search_pool.cluster, team="ml-platform"), format="json")
    assert response.status_code == 400 and "team" in response.data
    # ...nor move his pool to another team.
    response = client.patch(f"/api/v1/pools/{search_pool.pk}/", {"team": "ml-platform"}, format="json")
    assert response.status_code == 400 and "team" in response.data
    assert Pool.objects.get(pk=search_pool.pk).team.slug == "search"
    assert client.delete(f"/api/v1/pools/{pool.pk}/").status_code == 404


def test_it_refuses_to_delete_a_cluster_that_still_has_pools(bob: User, pool: Pool, cluster: Cluster) -> None:
    response = token_client(bob).delete(f"/api/v1/clusters/{cluster.pk}/")
    assert response.status_code == 409
    assert "chat-8b" in response.data["detail"]
    assert Cluster.objects.filter(pk=cluster.pk).exists()


def test_it_deletes_with_an_audit_record(bob: User, pool: Pool) -> None:
    slo = pool.slos.get()
    assert token_client(bob).delete(f"/api/v1/slos/{slo.pk}/").status_code == 204
    event = AuditEvent.objects.get(action="delete")
    assert event.object_id == str(slo.pk) and event.before["threshold"] == 1000 and event.after is None


def test_it_validates_slos_and_schedules(bob: User, pool: Pool) -> None:
    client = token_client(bob)
    response = client.post(
        "/api/v1/slos/", {"pool": pool.pk, "indicator": "error_rate", "threshold": 5, "objective": 0.99}, format="json"
    )
    assert response.status_code == 400 and "threshold" in response.data
    response = client.post(
        "/api/v1/schedules/",
        {"pool": pool.pk, "name": "launch", "weekday": 2, "start": "18:00", "end": "20:00", "time_zone": "Mars/Base"},
        format="json",
    )
    assert response.status_code == 400 and "time_zone" in response.data
    response = client.post(
        "/api/v1/schedules/",
        {"pool": pool.pk, "name": "launch", "weekday": 2, "start": "18:00", "end": "20:00", "time_zone": "Europe/Paris"},
        format="json",
    )
    assert response.status_code == 201 and response.data["prescale_factor"] == 1.4


def test_it_validates_cluster_json_settings(bob: User, ml_team) -> None:  # noqa: ANN001
    response = token_client(bob).post(
        "/api/v1/clusters/",
        {"name": "gpu-2", "team": "ml-platform", "kube_api_url": "http://10.0.0.1:6443",
         "off_hours": [{"weekdays": [9], "start": "00:00", "end": "06:00"}]},
        format="json",
    )
    assert response.status_code == 400 and "weekdays" in str(response.data["off_hours"])


def test_it_only_lets_superusers_create_teams(bob: User) -> None:
    response = token_client(bob).post("/api/v1/teams/", {"name": "New", "slug": "new"}, format="json")
    assert response.status_code == 403
    root = User.objects.create_superuser("root", password="x")
    assert token_client(root).post("/api/v1/teams/", {"name": "New", "slug": "new"}, format="json").status_code == 201


def test_it_lists_pools_in_a_constant_number_of_queries(bob: User, pool: Pool, cluster: Cluster, django_assert_max_num_queries) -> None:  # noqa: ANN001, E501
    for index in range(15):
        Pool.objects.create(
            cluster=cluster, team=pool.team, name=f"p{index}", namespace="n", deployment=f"d{index}",
            model_name="m", gpu_type="L4",
        )
    client = token_client(bob)
    with django_assert_max_num_queries(8):
        assert client.get("/api/v1/pools/").data["count"] == 16


GARBAGE = [None, "", "x" * 5000, -1, 10**20, 1.5, True, [], {}, {"a": [1, {"b": None}]}, "\u0000", "../../etc"]


def _editable(endpoint: str, pool: Pool) -> str | None:
    """The detail URL of an existing object of this kind that bob may change; None where nothing is updatable."""
    objects = {
        "pools": pool.pk, "clusters": pool.cluster_id, "slos": pool.slos.get().pk, "teams": pool.team.slug,
        "schedules": ScheduleWindow.objects.create(pool=pool, name="launch", weekday=0, start="09:00", end="10:00").pk,
    }
    return f"/api/v1/{endpoint}/{objects[endpoint]}/" if endpoint in objects else None  # tokens: create and revoke


@pytest.mark.parametrize("endpoint", ["pools", "clusters", "slos", "schedules", "teams", "tokens"])
def test_it_never_answers_500_to_garbage(bob: User, pool: Pool, endpoint: str) -> None:
    if endpoint == "teams":  # only superusers change teams: bob would get a 403 before any validation
        bob.is_superuser = True
        bob.save()
    client = token_client(bob)
    detail = _editable(endpoint, pool)
    fields = ["name", "cluster", "team", "pool", "min_replicas", "max_replicas", "off_hours", "gpu_prices",
              "indicator", "threshold", "objective", "start", "end", "weekday", "time_zone", "expires_at", "slug"]
    for value in GARBAGE:
        payload = {field: value for field in fields}
        requests = [(client.post, f"/api/v1/{endpoint}/")]
        if detail is not None:
            requests += [(client.put, detail), (client.patch, detail)]
        for method, target in requests:
            response = method(target, payload, format="json")
            assert response.status_code < 500, (endpoint, method.__name__, value, response.content[:300])
            # The garbage reached validation: not a missing object, a refused verb or a permission check.
            assert response.status_code not in (403, 404, 405), (endpoint, method.__name__, response.status_code)
    assert client.post(f"/api/v1/{endpoint}/", b"{not json", content_type="application/json").status_code == 400


def test_a_cluster_rate_window_is_validated_and_used_by_the_loop(bob: User, cluster: Cluster) -> None:
    from scaling.loop import _signal_source

    client = token_client(bob)
    response = client.patch(f"/api/v1/clusters/{cluster.pk}/", {"prometheus_rate_window": "1 minute"}, format="json")
    assert response.status_code == 400 and "prometheus_rate_window" in response.data
    assert Cluster.objects.get(pk=cluster.pk).prometheus_rate_window == "1m"  # the default, untouched
    response = client.patch(f"/api/v1/clusters/{cluster.pk}/",
                            {"prometheus_rate_window": "30s", "prometheus_url": "http://prometheus.example:9090"},
                            format="json")
    assert response.status_code == 200, response.data
    cluster.refresh_from_db()
    with override_settings(PROMETHEUS_ENABLED=True):
        source = _signal_source(cluster)
    assert source is not None and source.config.rate_window == "30s"
