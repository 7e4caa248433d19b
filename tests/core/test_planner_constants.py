"""A pool's overrides of the planner's constants (issue 12 item 10) and of its approval guardrail: API, form, and the loop's plan."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane.models import Pool
from scaling.drivers.cluster import ReplicaStatus
from scaling.engine.constants import default
from scaling.services import record_status

from .conftest import token_client


def test_the_api_stores_overrides_and_the_loop_plans_with_them(bob: User, pool: Pool) -> None:
    from scaling import loop

    response = token_client(bob).patch(f"/api/v1/pools/{pool.pk}/",
                                       {"planner_constants": {"request_rate_margin": 1.25, "scale_up_pods": 8}},
                                       format="json")
    assert response.status_code == 200, response.data
    assert response.data["planner_constants"] == {"request_rate_margin": 1.25, "scale_up_pods": 8}
    pool.refresh_from_db()
    plan = loop.pool_plan(pool)
    assert plan.request_rate_margin == 1.25 and plan.scale_up_pods == 8
    assert plan.queue_term_rate_multiple == default("queue_term_rate_multiple")  # the rest keep their defaults


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"request_rate_margn": 1.25}, "unknown constant 'request_rate_margn'"),
        ({"request_rate_margin": 40}, "request_rate_margin must be between 0 and 4, got 40"),
        ({"scale_up_pods": 2.5}, "scale_up_pods must be a whole number"),
        ({"correction_gain": "fast"}, "correction_gain must be a number"),
        ({"correction_min": 0.9, "correction_max": 1.0 - 0.2}, "must be between 1 and 3"),
        ({"correction_min": 0.9, "correction_max": 1.0}, None),
        ([1.25], "must be an object"),
    ],
)
def test_the_api_answers_400_naming_the_field_and_changes_nothing(bob: User, pool: Pool, value, message) -> None:  # noqa: ANN001
    response = token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {"planner_constants": value}, format="json")
    pool.refresh_from_db()
    if message is None:
        assert response.status_code == 200 and pool.planner_constants == value
        return
    assert response.status_code == 400, response.data
    assert message in str(response.data["planner_constants"])
    assert pool.planner_constants == {}


def test_the_form_shows_a_bad_override_inline_and_saves_nothing(bob: User, pool: Pool) -> None:
    client = Client()
    client.force_login(bob)
    data = {
        "cluster": pool.cluster_id, "name": "new-pool", "team": pool.team_id, "namespace": "inference",
        "deployment": "vllm-new", "model_name": "m", "gpu_type": "H100", "gpus_per_replica": 1,
        "min_replicas": 1, "max_replicas": 4, "warm_pool_fraction": 0.4, "target_queue_per_replica": 5,
        "replica_capacity_rps": 2.5, "scaling_target": "deployment", "priority": "standard",
        "planner_constants": '{"prescale_ratio": 0.5}',
    }
    response = client.post("/pool/new/", data, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "prescale_ratio must be between 1 and 100" in response.content.decode()
    assert not Pool.objects.filter(name="new-pool").exists()
    data["planner_constants"] = '{"prescale_ratio": 4}'
    assert client.post("/pool/new/", data, HTTP_HX_REQUEST="true").status_code == 204
    assert Pool.objects.get(name="new-pool").planner_constants == {"prescale_ratio": 4}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"reactive_max_percent": 100}, None),
        ({"reactive_max_percent": None}, None),
        ({"reactive_max_percent": 0}, "reactive_max_percent must be a whole number >= 1"),
        ({"reactive_max_percent": 5000}, "reactive_max_percent must be at most 1000"),
    ],
)
def test_the_approval_guardrail_as_a_share_of_the_pool_is_validated_by_the_api(bob: User, pool: Pool, value,
                                                                               message) -> None:  # noqa: ANN001
    response = token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {"approval_policy": value}, format="json")
    pool.refresh_from_db()
    if message is None:
        assert response.status_code == 200 and pool.approval_policy == value
        assert pool.approval.guardrail(12) == (12 if value["reactive_max_percent"] else 4)
    else:
        assert response.status_code == 400 and message in str(response.data["approval_policy"])
        assert pool.approval_policy == {}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("batch_slots", 256, None),
        ("prefill_tokens_per_s", 12_000.5, None),
        ("batch_slots", None, None),  # unset: the batch fill is unknown, the prefill share still reads
        ("batch_slots", 0, "greater than or equal to 1"),
        ("batch_slots", 2.5, "valid integer"),
        ("prefill_tokens_per_s", -1, "greater than or equal to 0.001"),
        ("prefill_tokens_per_s", "fast", "valid number"),
    ],
)
def test_what_the_work_share_is_read_against_is_validated_by_the_api(bob: User, pool: Pool, field, value,
                                                                      message) -> None:  # noqa: ANN001
    response = token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {field: value}, format="json")
    pool.refresh_from_db()
    if message is None:
        assert response.status_code == 200 and getattr(pool, field) == value
    else:
        assert response.status_code == 400 and message in str(response.data[field]), response.data
        assert getattr(pool, field) is None


def test_the_busy_share_term_cannot_be_turned_on_with_nothing_to_read(bob: User, pool: Pool) -> None:
    """Without batch slots, a prefill throughput or a --max-num-seqs on the Deployment the work share is never
    known: say so, store nothing."""
    client = token_client(bob)
    response = client.patch(f"/api/v1/pools/{pool.pk}/", {"planner_constants": {"busy_share_target": 0.3}}, format="json")
    assert response.status_code == 400 and "batch slots or prefill throughput" in str(response.data["planner_constants"])
    pool.refresh_from_db()
    assert pool.planner_constants == {}

    response = client.patch(f"/api/v1/pools/{pool.pk}/", {"planner_constants": {"busy_share_target": 0.3},
                                                        "batch_slots": 256}, format="json")
    assert response.status_code == 200, response.data
    # ...and the field it reads against cannot be cleared under it...
    response = client.patch(f"/api/v1/pools/{pool.pk}/", {"batch_slots": None}, format="json")
    assert response.status_code == 400 and "planner_constants" in response.data
    pool.refresh_from_db()
    assert pool.batch_slots == 256
    # ...unless the Deployment's command line states --max-num-seqs, as the loop read it last.
    record_status(pool, ReplicaStatus(2, 2, batch_slots=64), timezone.now())
    response = client.patch(f"/api/v1/pools/{pool.pk}/", {"batch_slots": None}, format="json")
    assert response.status_code == 200, response.data
    assert response.data["batch_slots"] is None and response.data["batch_slots_in_use"] == 64  # what it reads
    pool.refresh_from_db()
    assert pool.batch_slots is None and pool.batch_slots_in_use == 64
