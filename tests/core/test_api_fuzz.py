"""schemathesis over the OpenAPI schema, as each role (issue 18, "Fuzzing"): every documented endpoint,
with generated valid and invalid input, for a viewer, an operator and an admin of Search, and for nobody.

For each answer: never a 5xx, the status code, content type and body as the schema documents them; and a
request that was refused (401, 403, 404, 405) changed nothing in the database.
"""
from __future__ import annotations

import json

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings

from controlplane import services
from controlplane.choices import Channel, Role
from controlplane.models import Team

from tests.core.conftest import cluster, ml_team, search_team  # noqa: F401
from tests.permission_world import World, database_state, member_of_search, world  # noqa: F401

EXAMPLES = 5
REFUSED = {401, 403, 404, 405}


def _schema() -> schemathesis.schemas.BaseSchema:
    generated = json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))
    loaded = schemathesis.openapi.from_dict(generated)
    loaded.app = get_wsgi_application()
    return loaded


schema = _schema()


@pytest.fixture
def in_test_transaction() -> object:
    """Requests go straight to the WSGI app: keep Django from closing the test's connection after each one
    (what Django's own test client does)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def tokens(in_test_transaction: object, world: World, search_team: Team) -> dict[str, dict[str, str]]:  # noqa: F811
    headers = {"nobody": {}}
    for role in (Role.VIEWER, Role.OPERATOR, Role.ADMIN):
        _, raw = services.issue_token(member_of_search(search_team, role), services.Actor(user=None, channel=Channel.CLI))
        headers[role] = {"Authorization": f"Token {raw}"}
    return headers


# Left out, with why: `positive_data_acceptance` expects any schema-valid body to succeed, but a valid id of
# an object that does not exist (pool=0) is rightly a 400; `ignored_auth` replays with a bogus session
# cookie next to our valid token, and either credential suffices, so a 200 there is right.
EXCLUDED = [schemathesis.checks.positive_data_acceptance, schemathesis.checks.ignored_auth]


def _fuzz(case: schemathesis.Case, tokens: dict[str, dict[str, str]]) -> None:
    writes = case.method.upper() != "GET"
    # One snapshot per request, not two: after a refusal the state it is compared with is still the current
    # one, so only an accepted write needs a fresh snapshot (the state is read twice per role otherwise).
    state = database_state() if writes else None
    for role, headers in tokens.items():
        response = case.call(headers=headers)
        assert response.status_code < 500, f"{role}: {case.method} {case.formatted_path} → {response.status_code}"
        case.validate_response(response, excluded_checks=EXCLUDED)
        if writes:
            after = database_state()
            if response.status_code in REFUSED:
                assert after == state, f"{role}: a refused {case.method} {case.formatted_path} changed data"
            state = after


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much])


@schema.include(path_regex=r"^/api/v1/(teams|clusters|pools|slos|schedules)/").parametrize()
@FUZZ
def test_the_inventory_as_every_role(case: schemathesis.Case, tokens: dict[str, dict[str, str]]) -> None:
    _fuzz(case, tokens)


@schema.include(path_regex=r"^/api/v1/(proposals|audit|tokens)/").parametrize()
@FUZZ
def test_proposals_audit_and_tokens_as_every_role(case: schemathesis.Case, tokens: dict[str, dict[str, str]]) -> None:
    _fuzz(case, tokens)


@schema.include(path_regex=r"^/api/v1/(channels|notifications|alerts|silences)/").parametrize()
@FUZZ
def test_notifications_and_alerts_as_every_role(case: schemathesis.Case, tokens: dict[str, dict[str, str]]) -> None:
    _fuzz(case, tokens)
