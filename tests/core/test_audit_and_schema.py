"""The audit log is append-only everywhere; the OpenAPI schema is valid OpenAPI 3."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, connection, transaction
from openapi_spec_validator import validate
from rest_framework.test import APIClient

from controlplane import services
from controlplane.models import AuditEvent, Pool

from .conftest import CLI, token_client


def test_it_refuses_to_change_or_delete_audit_events_through_the_orm(pool: Pool) -> None:
    event = services.record(CLI, "create", pool)
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=event.pk).update(action="tampered")
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()


def test_it_refuses_raw_sql_updates_in_postgresql(pool: Pool) -> None:
    assert connection.vendor == "postgresql"
    event = services.record(CLI, "create", pool)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE controlplane_auditevent SET action = 'x' WHERE id = %s", [event.pk])
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM controlplane_auditevent WHERE id = %s", [event.pk])


def test_it_exposes_the_audit_log_read_only(bob: User, charlie: User, pool: Pool) -> None:
    client = token_client(bob)
    client.patch(f"/api/v1/pools/{pool.pk}/", {"max_replicas": 9}, format="json")
    rows = client.get("/api/v1/audit/?action=update").data["results"]
    assert [(row["actor_name"], row["object_repr"]) for row in rows] == [("bob", "gpu-us-east/chat-8b")]
    event_id = rows[0]["id"]
    assert client.delete(f"/api/v1/audit/{event_id}/").status_code == 405
    assert client.patch(f"/api/v1/audit/{event_id}/", {"action": "x"}, format="json").status_code == 405
    assert client.post("/api/v1/audit/", {"action": "x"}, format="json").status_code == 405
    # Outsiders do not see ML Platform's history.
    assert token_client(charlie).get("/api/v1/audit/?action=update").data["results"] == []


def test_the_schema_is_valid_openapi_3(bob: User) -> None:
    client = APIClient()
    client.force_authenticate(bob)
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    validate(schema)
    assert schema["openapi"].startswith("3.")
    for path in ("/api/v1/pools/", "/api/v1/clusters/", "/api/v1/slos/", "/api/v1/schedules/", "/api/v1/teams/",
                 "/api/v1/audit/", "/api/v1/tokens/"):
        assert path in schema["paths"], path
    assert schema["components"]["securitySchemes"]["tokenAuth"]["name"] == "Authorization"


def test_healthz_answers_ok(db) -> None:  # noqa: ANN001
    response = APIClient().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
