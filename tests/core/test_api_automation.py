"""What a script that reconciles the inventory through the API every few minutes, beside people editing in the
web UI, needs: a write based on a stale read refused when the script says what it read (`If-Match`)."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.models import AuditEvent, Pool
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
