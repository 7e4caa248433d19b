"""The audit page and /api/v1/audit/: filters, search, links, folded decisions, each user's teams only."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane import services
from controlplane.choices import Channel
from controlplane.models import Pool
from tests.core.conftest import token_client
from tests.core.test_audit_view import AUTO, WEB, decide, proposal_of


def _login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def history(bob: User, pool: Pool, search_pool: Pool) -> dict:
    """A decision on bob's pool, a change by bob, and a decision on Search's pool."""
    mine, theirs = proposal_of(pool), proposal_of(search_pool)
    decide(mine, AUTO, "propose")
    services.record(services.Actor(bob, Channel.WEB, request_id="req-bob-1"), "update", pool)
    decide(mine, services.Actor(bob, Channel.SLACK), "approved")
    decide(mine, AUTO, "executing", "executed")
    decide(theirs, AUTO, "propose", "approved")
    return {"mine": mine, "theirs": theirs}


def test_it_shows_one_row_per_decision_with_its_steps_and_links(alice: User, pool: Pool, history: dict) -> None:
    response = _login(alice).get("/audit/")
    page = response.content.decode()
    assert response.status_code == 200
    assert page.count("<details") == 1 and "Proposed → Approved → Executing → Executed" in page
    assert f'href="/proposals/{history["mine"].pk}/card/"' in page and f'href="/pools/{pool.pk}/"' in page
    assert "Proposal" in page and "scaling.proposal</" not in page and "<code>scaling.proposal" not in page
    assert f'/proposals/{history["theirs"].pk}/card/' not in page  # Search's decision: not alice's team


def test_it_filters_and_searches(alice: User, pool: Pool, history: dict) -> None:
    client = _login(alice)
    by_actor = client.get("/audit/?actor=BOB").content.decode()
    assert "Proposed → Approved" in by_actor and "req-bob-1" in by_actor
    only_pools = client.get("/audit/?object_type=controlplane.pool").content.decode()
    assert "<details" not in only_pools and f'href="/pools/{pool.pk}/"' in only_pools
    searched = client.get("/audit/?q=req-bob").content.decode()
    assert "req-bob-1" in searched and "<details" not in searched
    assert "Nothing recorded that matches" in client.get("/audit/?q=no-such-text").content.decode()
    assert "Nothing recorded that matches" in client.get("/audit/?within=15m&channel=cli").content.decode()
    assert "<details" in client.get(f"/audit/?pool={pool.pk}&team=ml-platform&within=1h").content.decode()


def test_pages_keep_the_filters(alice: User, pool: Pool) -> None:
    for number in range(51):
        services.record(WEB, "update", pool)
    page = _login(alice).get("/audit/?object_type=controlplane.pool").content.decode()
    assert "page 1" in page and "?object_type=controlplane.pool&amp;page=2" in page
    last = _login(alice).get("/audit/?object_type=controlplane.pool&page=2").content.decode()
    assert "page=1" in last and "page=3" not in last


@pytest.mark.parametrize(("query", "field"), [
    ("pool=abc", "pool"), ("object_type=nope.nothing", "object_type"), ("team=search", "team"),
    ("since=yesterday", "since"), ("within=3y", "within"), ("since=2026-12-01T05:00&until=2026-12-01T04:00", "until"),
])
def test_bad_filters_answer_400_naming_the_field(alice: User, search_pool: Pool, query: str, field: str) -> None:
    page = _login(alice).get(f"/audit/?{query}")
    assert page.status_code == 400 and f"{field}:" in page.content.decode()
    api = token_client(alice).get(f"/api/v1/audit/?{query}")
    assert api.status_code == 400 and field in api.json()


def test_a_pool_of_another_team_is_not_a_filter_value(alice: User, search_pool: Pool) -> None:
    assert _login(alice).get(f"/audit/?pool={search_pool.pk}").status_code == 400


def test_the_api_takes_the_same_filters(alice: User, charlie: User, pool: Pool, history: dict) -> None:
    rows = token_client(alice).get(f"/api/v1/audit/?pool={pool.pk}&object_type=scaling.proposal").json()["results"]
    assert {row["action"] for row in rows} == {"propose", "approved", "executing", "executed"}
    assert {row["object_kind"] for row in rows} == {"Proposal"}
    since = (timezone.now() - timedelta(minutes=5)).isoformat()
    assert len(token_client(alice).get("/api/v1/audit/", {"q": "req-bob", "since": since}).json()["results"]) == 1
    theirs = token_client(charlie).get("/api/v1/audit/?object_type=scaling.proposal").json()["results"]
    assert {row["object_id"] for row in theirs} == {str(history["theirs"].pk)}


def test_the_pool_page_shows_its_decisions_folded(alice: User, pool: Pool, history: dict) -> None:
    page = _login(alice).get(f"/pools/{pool.pk}/").content.decode()
    assert f"/audit/?pool={pool.pk}" in page and "Proposed → Approved → Executing → Executed" in page


def test_a_proposal_link_opens_a_page(alice: User, history: dict) -> None:
    page = _login(alice).get(f"/proposals/{history['mine'].pk}/card/").content.decode()
    assert "<html" in page and f"object_id={history['mine'].pk}" in page
    fragment = _login(alice).get(f"/proposals/{history['mine'].pk}/card/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment


def test_the_page_reads_blank_fields_as_no_filter_and_the_api_as_a_mistake(alice: User, history: dict) -> None:
    blank_form = "q=&team=&pool=&object_type=&actor=&action=&channel=&within=&since=&until="
    page = _login(alice).get(f"/audit/?{blank_form}")
    assert page.status_code == 200 and "Proposed → Approved" in page.content.decode()
    api = token_client(alice).get("/api/v1/audit/?until=")
    assert api.status_code == 400 and "leave this filter out" in api.json()["until"][0]


def test_the_page_costs_the_same_queries_for_ten_decisions_as_for_one(alice: User, pool: Pool) -> None:
    def queries() -> int:
        client = _login(alice)
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/audit/").status_code == 200
        return len(captured)

    decide(proposal_of(pool), AUTO, "propose", "approved")
    one = queries()
    for _ in range(9):
        decide(proposal_of(pool), AUTO, "propose", "approved", "executed")
    assert queries() == one
