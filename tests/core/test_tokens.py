"""API tokens are stored hashed, shown once, and stop working when expired or revoked."""
from __future__ import annotations

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane import services
from controlplane.models import ApiToken, AuditEvent, Membership

from .conftest import CLI


def _get_pools(raw: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client.get("/api/v1/pools/").status_code


def test_it_stores_only_a_digest_and_a_prefix(alice: User) -> None:
    token, raw = services.issue_token(alice, CLI, name="ci")
    stored = ApiToken.objects.get(pk=token.pk)
    assert raw.startswith("hr_") and len(raw) > 40
    assert stored.digest == hashlib.sha256(raw.encode()).hexdigest()
    assert raw[:9] == stored.prefix
    for value in ApiToken.objects.values_list("name", "prefix", "digest").get():
        assert raw not in value
    assert AuditEvent.objects.filter(action="issue_token", object_id=str(token.pk)).exists()


def test_it_authenticates_and_records_last_use(alice: User, pool) -> None:  # noqa: ANN001
    token, raw = services.issue_token(alice, CLI)
    assert token.last_used_at is None
    assert _get_pools(raw) == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.parametrize(
    "header", ["Token hr_not-a-real-token", "Token", "Token a b", "Bearer something", "Token hr_\u00e9"]
)
def test_it_refuses_bad_tokens_with_401(alice: User, header: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    assert client.get("/api/v1/pools/").status_code == 401


def test_it_refuses_expired_and_revoked_tokens(alice: User) -> None:
    _, expired = services.issue_token(alice, CLI, expires_at=timezone.now() - timedelta(seconds=1))
    assert _get_pools(expired) == 401
    token, raw = services.issue_token(alice, CLI)
    services.revoke_token(token, CLI)
    assert _get_pools(raw) == 401


def test_it_refuses_a_deactivated_user(alice: User) -> None:
    _, raw = services.issue_token(alice, CLI)
    alice.is_active = False
    alice.save()
    assert _get_pools(raw) == 401


def test_it_answers_401_without_credentials(db) -> None:  # noqa: ANN001
    response = APIClient().get("/api/v1/pools/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_issue_token_prints_the_token_alone_on_the_last_line(ml_team) -> None:  # noqa: ANN001
    out, err = StringIO(), StringIO()
    call_command("issue_token", "dave", "--create", "--role", "operator", "--team", "ml-platform", stdout=out, stderr=err)
    raw = out.getvalue().strip().splitlines()[-1]
    assert _get_pools(raw) == 200
    dave = User.objects.get(username="dave")
    assert Membership.objects.get(user=dave).role == "operator"
    assert "not shown again" in err.getvalue()


def test_issue_token_explains_a_missing_user(db) -> None:  # noqa: ANN001
    with pytest.raises(CommandError, match="No user named 'nobody'. Add --create"):
        call_command("issue_token", "nobody")
    with pytest.raises(CommandError, match="--role needs --team"):
        call_command("issue_token", "nobody", "--role", "admin")


def test_it_lets_a_user_manage_their_own_tokens_over_the_api(alice: User, bob: User) -> None:
    client = APIClient()
    client.force_authenticate(alice)
    created = client.post("/api/v1/tokens/", {"name": "laptop"}, format="json")
    assert created.status_code == 201 and created.data["token"].startswith("hr_")
    assert _get_pools(created.data["token"]) == 200
    assert [row["name"] for row in client.get("/api/v1/tokens/").data["results"]] == ["laptop"]
    assert "token" not in client.get("/api/v1/tokens/").data["results"][0]
    bob_client = APIClient()
    bob_client.force_authenticate(bob)
    assert bob_client.delete(f"/api/v1/tokens/{created.data['id']}/").status_code == 404
    assert client.delete(f"/api/v1/tokens/{created.data['id']}/").status_code == 204
    assert _get_pools(created.data["token"]) == 401
