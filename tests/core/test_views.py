"""The web UI: login, the fleet page and its htmx fragment, forms with inline errors, scoping."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from controlplane.models import AuditEvent, Pool
from scaling.drivers.cluster import ReplicaStatus


def _login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_it_sends_anonymous_users_to_the_login_page(db) -> None:  # noqa: ANN001
    response = Client().get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_it_logs_in_with_a_password(alice: User, pool: Pool) -> None:
    client = Client()
    response = client.post("/login/", {"username": "alice", "password": "pw-alice"}, follow=True)
    assert b"chat-8b" in response.content


def test_the_fleet_lists_visible_pools_with_bounds_slos_and_owner(alice: User, pool: Pool, search_pool: Pool) -> None:
    body = _login(alice).get("/").content.decode()
    assert "chat-8b" in body and "gpu-us-east" in body and "1–8" in body and "ML Platform" in body
    assert "TTFT p95 ≤ 1000 ms" in body
    assert "rerank" not in body
    # Every htmx request carries the CSRF token.
    assert 'hx-headers=\'{"X-CSRFToken": "' in body


def test_the_fleet_table_is_a_fragment_for_htmx(alice: User, pool: Pool) -> None:
    response = _login(alice).get("/", HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="fleet-table"') and "<html" not in body


def test_the_pool_page_says_what_the_work_share_is_read_against(alice: User, pool: Pool) -> None:
    from django.utils import timezone

    from scaling import services as scaling

    def page() -> str:
        return _login(alice).get(f"/pools/{pool.pk}/").content.decode()

    assert ("no batch slots or prefill throughput set, and the Deployment states no --max-num-seqs: "
            "the busy share term cannot act") in page()
    assert "40 % of the next 30 minutes' expected peak" in page()  # the warm floor's basis, not the day's
    scaling.record_status(pool, ReplicaStatus(2, 2, batch_slots=64), timezone.now())  # the loop read its pod template
    assert "read against 64 batch slots (the Deployment's --max-num-seqs) a replica" in page()
    Pool.objects.filter(pk=pool.pk).update(batch_slots=256, prefill_tokens_per_s=12000.0)
    assert "read against 256 batch slots and 12000 prompt tokens/s a replica" in page()  # the pool's own wins


def test_the_pool_page_hides_other_teams_pools(charlie: User, pool: Pool) -> None:
    assert _login(charlie).get(f"/pools/{pool.pk}/").status_code == 404


def test_the_pool_form_shows_inline_errors_and_saves_nothing(bob: User, pool: Pool) -> None:
    client = _login(bob)
    data = {
        "cluster": pool.cluster_id, "name": "new-pool", "team": pool.team_id, "namespace": "inference",
        "deployment": "vllm-new", "model_name": "m", "gpu_type": "H100", "gpus_per_replica": 1,
        "min_replicas": 9, "max_replicas": 2, "warm_pool_fraction": 0.4, "target_queue_per_replica": 5,
        "replica_capacity_rps": 2.5,
        "scaling_target": "deployment", "priority": "standard",
    }
    response = client.post("/pool/new/", data, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith("<form")
    assert "must not exceed max_replicas (2)" in body
    assert not Pool.objects.filter(name="new-pool").exists()
    data["min_replicas"] = 1
    response = client.post("/pool/new/", data, HTTP_HX_REQUEST="true")
    created = Pool.objects.get(name="new-pool")
    assert response.status_code == 204 and response["HX-Redirect"] == f"/pools/{created.pk}/"
    assert AuditEvent.objects.get(object_id=str(created.pk)).channel == "web"


def test_operators_cannot_edit_configuration(alice: User, pool: Pool) -> None:
    assert _login(alice).get(f"/pool/{pool.pk}/edit/").status_code == 403
    assert _login(alice).post(f"/pool/{pool.pk}/delete/").status_code == 403


def test_it_refuses_to_delete_a_cluster_in_use(bob: User, pool: Pool) -> None:
    response = _login(bob).post(f"/cluster/{pool.cluster_id}/delete/")
    assert response.status_code == 409 and b"Still used by" in response.content


def test_the_audit_page_shows_changes(bob: User, pool: Pool) -> None:
    client = _login(bob)
    client.post(f"/slo/{pool.slos.get().pk}/delete/")
    page = client.get("/audit/").content.decode()
    assert "SLO" in page and "Deleted" in page and "(deleted)" in page
