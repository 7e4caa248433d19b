"""What a script that reconciles the inventory through the API every few minutes, beside people editing in the
web UI, needs: a write based on a stale read refused when the script says what it read (`If-Match`), and a
create retried after a timeout that names the object the first attempt made."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.models import SLO, AuditEvent, Cluster, Pool, ScheduleWindow, Team
from incidents.models import Channel
from scaling.models import PoolStatus

from .conftest import token_client


def test_a_put_of_a_stale_read_with_if_match_is_refused_and_changes_nothing(bob: User, pool: Pool) -> None:
    script, person = token_client(bob), token_client(bob)
    read = script.get(f"/api/v1/pools/{pool.pk}/")
    tag = read["ETag"]
    assert person.patch(f"/api/v1/pools/{pool.pk}/", {"max_replicas": 9}, format="json").status_code == 200
    updates = AuditEvent.objects.filter(object_type="controlplane.pool", action="update").count()

    stale = dict(read.data) | {"min_replicas": 2}
    response = script.put(f"/api/v1/pools/{pool.pk}/", stale, format="json", HTTP_IF_MATCH=tag)
    assert response.status_code == 412, response.data
    assert response.data["etag"] == script.get(f"/api/v1/pools/{pool.pk}/")["ETag"] != tag
    pool.refresh_from_db()
    assert (pool.min_replicas, pool.max_replicas) == (1, 9)  # the person's change stands, the script's is refused
    assert AuditEvent.objects.filter(object_type="controlplane.pool", action="update").count() == updates
    assert script.delete(f"/api/v1/pools/{pool.pk}/", HTTP_IF_MATCH=tag).status_code == 412
    assert Pool.objects.filter(pk=pool.pk).exists()


def test_a_write_with_the_current_tag_goes_through_and_answers_the_next_tag(bob: User, pool: Pool) -> None:
    client = token_client(bob)
    tag = client.get(f"/api/v1/pools/{pool.pk}/")["ETag"]
    first = client.patch(f"/api/v1/pools/{pool.pk}/", {"max_replicas": 9}, format="json", HTTP_IF_MATCH=tag)
    assert first.status_code == 200 and first["ETag"] != tag
    assert first["ETag"] == client.get(f"/api/v1/pools/{pool.pk}/")["ETag"]
    second = client.patch(f"/api/v1/pools/{pool.pk}/", {"min_replicas": 2}, format="json", HTTP_IF_MATCH=first["ETag"])
    assert second.status_code == 200
    pool.refresh_from_db()
    assert (pool.min_replicas, pool.max_replicas) == (2, 9)
    assert client.delete(f"/api/v1/pools/{pool.pk}/", HTTP_IF_MATCH=second["ETag"]).status_code == 204


def test_what_the_control_loop_writes_does_not_change_the_tag(bob: User, pool: Pool) -> None:
    client = token_client(bob)
    tag = client.get(f"/api/v1/pools/{pool.pk}/")["ETag"]
    PoolStatus.objects.create(pool=pool, desired_replicas=3, ready_replicas=2, observed_at=timezone.now(),
                              scale_refusal="An HPA owns the replicas.", scale_checked_at=timezone.now())
    assert client.get(f"/api/v1/pools/{pool.pk}/").data["scale_refusal"] == "An HPA owns the replicas."
    assert client.get(f"/api/v1/pools/{pool.pk}/")["ETag"] == tag
    assert client.patch(f"/api/v1/pools/{pool.pk}/", {"max_replicas": 9}, format="json",
                        HTTP_IF_MATCH=tag).status_code == 200


def test_without_if_match_the_last_write_wins_as_before(bob: User, pool: Pool) -> None:
    client = token_client(bob)
    stale = dict(client.get(f"/api/v1/pools/{pool.pk}/").data)
    client.patch(f"/api/v1/pools/{pool.pk}/", {"max_replicas": 9}, format="json")
    assert client.put(f"/api/v1/pools/{pool.pk}/", stale | {"min_replicas": 2}, format="json").status_code == 200
    pool.refresh_from_db()
    assert (pool.min_replicas, pool.max_replicas) == (2, 8)


def test_slos_schedules_and_clusters_take_if_match_too(bob: User, pool: Pool) -> None:
    client = token_client(bob)
    for path in (f"/api/v1/slos/{pool.slos.get().pk}/", f"/api/v1/clusters/{pool.cluster_id}/"):
        tag = client.get(path)["ETag"]
        assert client.patch(path, {}, format="json", HTTP_IF_MATCH='"not-the-tag"').status_code == 412
        assert client.patch(path, {}, format="json", HTTP_IF_MATCH=f'"other", W/{tag}').status_code == 200
        assert client.patch(path, {}, format="json", HTTP_IF_MATCH="*").status_code == 200


def _new_pool(target_cluster: Cluster, **changes) -> dict:  # noqa: ANN003
    payload = {
        "name": "code-7b", "cluster": target_cluster.pk, "team": "ml-platform", "namespace": "inference",
        "deployment": "vllm-code-7b", "model_name": "qwen2.5-coder-7b", "gpu_type": "H100",
        "min_replicas": 1, "max_replicas": 6,
    }
    return payload | changes


@pytest.mark.parametrize("kind", ["pool", "slo", "schedule", "channel"])
def test_a_create_retried_after_a_timeout_names_the_field_and_the_object_it_made(
        bob: User, pool: Pool, cluster: Cluster, kind: str) -> None:
    path, payload, field, model = {
        "pool": ("/api/v1/pools/", _new_pool(cluster), "name", Pool),
        "slo": ("/api/v1/slos/", {"pool": pool.pk, "indicator": "e2e_p95", "threshold": 1500, "objective": 0.99},
                "indicator", SLO),
        "schedule": ("/api/v1/schedules/", {"pool": pool.pk, "name": "morning", "weekday": 0, "start": "08:00",
                                            "end": "10:00", "time_zone": "UTC"}, "name", ScheduleWindow),
        "channel": ("/api/v1/channels/", {"team": "ml-platform", "name": "ops", "kind": "webhook",
                                          "settings": {"url": "https://hooks.example.com/x"}}, "name", Channel),
    }[kind]
    client = token_client(bob)
    first = client.post(path, payload, format="json")
    assert first.status_code == 201, first.data
    count = model.objects.count()

    retried = client.post(path, payload, format="json")
    assert retried.status_code == 400
    assert list(retried.data) == [field]
    assert f"already exists (id {first.data['id']})" in retried.data[field][0]
    assert model.objects.count() == count

    assert client.delete(f"{path}{first.data['id']}/").status_code == 204
    assert client.delete(f"{path}{first.data['id']}/").status_code == 404  # a retried delete


def test_a_duplicate_in_a_shared_cluster_does_not_name_the_other_teams_pool(
        bob: User, charlie: User, cluster: Cluster, search_team: Team) -> None:
    cluster.shared_with.add(search_team)
    assert token_client(bob).post("/api/v1/pools/", _new_pool(cluster), format="json").status_code == 201
    retried = token_client(charlie).post(
        "/api/v1/pools/", _new_pool(cluster, team="search", deployment="vllm-other"), format="json")
    assert retried.status_code == 400
    assert retried.data["name"] == ["A pool with this cluster and name already exists."]


@pytest.mark.parametrize("query", ["?nmae=chat-8b", "?cluster_id=999", "?name=chat-8b&teams=search"])
def test_a_list_refuses_a_filter_it_does_not_have_rather_than_answer_everything(bob: User, pool: Pool, query: str) -> None:
    response = token_client(bob).get(f"/api/v1/pools/{query}")
    assert response.status_code == 400
    unknown = {"?nmae=chat-8b": "nmae", "?cluster_id=999": "cluster_id", "?name=chat-8b&teams=search": "teams"}[query]
    assert list(response.data) == [unknown] and "cluster_name" in response.data[unknown][0]


def test_a_list_still_takes_its_filters_pages_and_format(bob: User, pool: Pool, cluster: Cluster) -> None:
    client = token_client(bob)
    assert client.get(f"/api/v1/pools/?name=chat-8b&cluster={cluster.pk}&limit=1&offset=0").data["count"] == 1
    assert client.get("/api/v1/pools/?name=nope").data["count"] == 0  # a name that is not there: nothing, not all
    assert client.get("/api/v1/tokens/?limit=5").status_code == 200
    assert client.get("/api/v1/audit/?within=1h&limit=5").status_code == 200
    assert client.get("/api/v1/pools/?format=api", HTTP_ACCEPT="text/html").status_code == 200
    assert client.get(f"/api/v1/pools/{pool.pk}/?anything=1").status_code == 200  # one object: no filters to get wrong
