"""Chaos: PostgreSQL drops the request's connection in the middle of an approval (the backend is terminated
from another session after the approval's first write). The answer is a clean 503 that says nothing was
changed, the proposal is still pending with no half-written event or audit row, and the retry succeeds."""
from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models.signals import post_save

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.models import Proposal, ProposalEvent

from tests.core.conftest import token_client


def _terminate_own_backend(**_: Any) -> None:
    """Kill this process's PostgreSQL session from another one, as a failover or an admin would."""
    pid = connection.connection.info.backend_pid
    settings = connection.settings_dict
    with psycopg.connect(host=settings["HOST"] or "127.0.0.1", port=settings["PORT"] or 5432,
                         user=settings["USER"] or "postgres", dbname=settings["NAME"], autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.django_db(transaction=True)
def test_a_connection_dropped_mid_approval_answers_503_and_changes_nothing(pool: Pool, alice: User, bob: User) -> None:
    proposal = services.propose(pool, 4, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
    events_before = ProposalEvent.objects.filter(proposal=proposal).count()
    api = token_client(bob)
    audit_before = AuditEvent.objects.count()
    post_save.connect(_terminate_own_backend, sender=ProposalEvent, dispatch_uid="chaos-drop")
    try:
        response = api.post(f"/api/v1/proposals/{proposal.pk}/approve/", {"comment": "go"}, format="json")
    finally:
        post_save.disconnect(sender=ProposalEvent, dispatch_uid="chaos-drop")
        connection.close()  # the test client keeps Django from dropping the dead connection itself
    assert response.status_code == 503, response.content
    assert "nothing was changed" in response.json()["detail"] and response["Retry-After"] == "5"
    kept = Proposal.objects.get(pk=proposal.pk)
    assert kept.state == ProposalState.PENDING and kept.decided_by is None
    assert ProposalEvent.objects.filter(proposal=proposal).count() == events_before
    assert AuditEvent.objects.count() == audit_before

    retried = api.post(f"/api/v1/proposals/{proposal.pk}/approve/", {"comment": "go"}, format="json")
    assert retried.status_code == 200, retried.content
    assert Proposal.objects.get(pk=proposal.pk).state in (ProposalState.APPROVED, ProposalState.EXECUTING,
                                                         ProposalState.SUCCEEDED, ProposalState.FAILED)


@pytest.mark.django_db(transaction=True)
def test_a_page_whose_database_went_away_is_a_plain_503(client, pool: Pool, alice: User) -> None:  # noqa: ANN001
    client.force_login(alice)
    from django.core.signals import request_started

    def drop(**_: Any) -> None:
        connection.ensure_connection()
        _terminate_own_backend()

    request_started.connect(drop, dispatch_uid="chaos-drop-page")
    try:
        response = client.get(f"/pools/{pool.pk}/")
    finally:
        request_started.disconnect(dispatch_uid="chaos-drop-page")
        connection.close()
    assert response.status_code == 503 and b"nothing was changed" in response.content
