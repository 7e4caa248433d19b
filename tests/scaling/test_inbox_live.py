"""The inbox and the decisions list live (issue 16): pending apart from history with filters, fragments
that htmx polls, several decided at once in the browser and the API, buttons on the pool page."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.models import Proposal

from tests.core.conftest import token_client

PLANNER = core.Actor(user=None, channel=Channel.AUTO)
HTMX = {"HTTP_HX_REQUEST": "true"}


def _login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _prescale(pool: Pool, target: int = 4) -> Proposal:
    return services.propose(pool, target, ProposalKind.PRESCALE, PLANNER, current=1,
                            signals={"queue_depth": 180.0, "ready_replicas": 1.0, "request_rate_rps": 9.0},
                            evidence={"capacity_per_replica_rps": 5.0, "forecast_p90": [20.0]})


def test_it_shows_pending_apart_from_history_with_the_sentence_first(pool: Pool, alice: User) -> None:
    decided = _prescale(pool, target=3)
    services.reject(decided.pk, core.Actor(alice, Channel.WEB), "not today")
    waiting = _prescale(pool, target=5)
    body = _login(alice).get("/approvals/").content.decode()
    pending, history = body.split("<h2>History</h2>")
    assert f'id="proposal-{waiting.pk}"' in pending and f'id="proposal-{decided.pk}"' not in pending
    assert f">{decided.pk}</a>" in history and "not today" in history
    assert "A peak of 20.0 req/s is forecast (now 9.0) on 1 ready replica; scaling to 5 keeps TTFT under 1 s" in pending
    assert "<details" in pending and "Operators and admins of team" in pending
    assert f'name="ids" value="{waiting.pk}"' in pending  # a box to tick for the bulk decision


def test_the_pending_fragment_answers_204_until_something_changes(pool: Pool, alice: User) -> None:
    client = _login(alice)
    first = client.get("/approvals/pending/", **HTMX)
    assert first.status_code == 200 and "Nothing waits for a person" in first.content.decode()
    assert client.get("/approvals/pending/?known=", **HTMX).status_code == 204
    proposal = _prescale(pool)  # the next tick proposes: the next poll brings it
    fresh = client.get("/approvals/pending/?known=", **HTMX)
    assert fresh.status_code == 200 and f'id="proposal-{proposal.pk}"' in fresh.content.decode()
    assert f"known={proposal.pk}" in fresh.content.decode()
    assert client.get(f"/approvals/pending/?known={proposal.pk}", **HTMX).status_code == 204


def test_the_history_filters_by_pool_kind_state_and_who(pool: Pool, search_pool: Pool, alice: User, bob: User) -> None:
    by_bob = _prescale(pool, target=3)
    services.reject(by_bob.pk, core.Actor(bob, Channel.WEB))
    by_policy = services.propose(pool, 2, ProposalKind.REACTIVE, PLANNER, current=1)  # within the guardrail
    client = _login(alice)

    def listed(query: str) -> set[int]:
        body = client.get(f"/approvals/history/?{query}", **HTMX).content.decode()
        return {p for p in (by_bob.pk, by_policy.pk) if f">{p}</a>" in body}

    assert listed("") == {by_bob.pk, by_policy.pk}
    assert listed("who=bob") == {by_bob.pk}
    assert listed("who=policy") == {by_policy.pk}
    assert listed("kind=reactive") == {by_policy.pk}
    assert listed("state=rejected") == {by_bob.pk}
    assert listed(f"pool={pool.pk}&kind=prescale") == {by_bob.pk}
    bad = client.get("/approvals/history/?state=nonsense", **HTMX)
    assert bad.status_code == 400 and "state:" in bad.content.decode()
    # Another team's pool is not a choice (400), so its history cannot be probed.
    assert client.get(f"/approvals/history/?pool={search_pool.pk}", **HTMX).status_code == 400


def test_several_are_approved_at_once_in_the_browser(pool: Pool, search_pool: Pool, alice: User,
                                                     charlie: User) -> None:
    prescale = _prescale(pool)
    scheduled = services.propose(pool, 8, ProposalKind.SCHEDULED, PLANNER, current=1)
    theirs = services.propose(search_pool, 3, ProposalKind.MANUAL, core.Actor(charlie, Channel.API), current=1)
    response = _login(alice).post("/approvals/bulk/", {"ids": [prescale.pk, scheduled.pk, theirs.pk],
                                                       "verdict": "approve", "comment": "peak"}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith('<section id="approvals-pending"')
    assert f"#{theirs.pk}: Proposal #{theirs.pk} not found." in body
    for proposal in (prescale, scheduled):
        decided = Proposal.objects.get(pk=proposal.pk)
        assert decided.state != ProposalState.PENDING and decided.decided_by == alice
        assert decided.decided_channel == Channel.WEB and decided.decision_comment == "peak"
    assert Proposal.objects.get(pk=theirs.pk).state == ProposalState.PENDING


def test_a_bad_bulk_request_is_a_400_naming_the_field(pool: Pool, alice: User) -> None:
    proposal = _prescale(pool)
    client = _login(alice)
    nothing = client.post("/approvals/bulk/", {"verdict": "approve"}, **HTMX)
    assert nothing.status_code == 400 and "ids: Select at least one proposal." in nothing.content.decode()
    wrong = client.post("/approvals/bulk/", {"ids": [proposal.pk], "verdict": "maybe"}, **HTMX)
    assert wrong.status_code == 400 and "verdict:" in wrong.content.decode()
    assert client.post("/approvals/bulk/", {"ids": ["x"], "verdict": "approve"}, **HTMX).status_code == 400
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.PENDING


def test_the_api_decides_several_at_once(pool: Pool, search_pool: Pool, alice: User, charlie: User) -> None:
    prescale = _prescale(pool)
    theirs = services.propose(search_pool, 3, ProposalKind.MANUAL, core.Actor(charlie, Channel.API), current=1)
    api = token_client(alice)
    answer = api.post("/api/v1/proposals/bulk/", {"ids": [prescale.pk, theirs.pk, prescale.pk], "verdict": "reject"},
                      format="json")
    assert answer.status_code == 200
    assert answer.json()["results"] == [
        {"id": prescale.pk, "ok": True, "state": "rejected", "error": "", "status": 200},
        {"id": theirs.pk, "ok": False, "state": None, "error": f"Proposal #{theirs.pk} not found.", "status": 404},
    ]
    again = api.post("/api/v1/proposals/bulk/", {"ids": [prescale.pk], "verdict": "approve"}, format="json")
    assert again.json()["results"][0]["status"] == 409
    bad = api.post("/api/v1/proposals/bulk/", {"ids": [], "verdict": "approve"}, format="json")
    assert bad.status_code == 400 and "ids" in bad.json()
    assert api.post("/api/v1/proposals/bulk/", {"ids": [1], "verdict": "x"}, format="json").json().keys() == {"verdict"}


def test_the_pool_page_decides_in_place(pool: Pool, alice: User, charlie: User) -> None:
    proposal = _prescale(pool)
    client = _login(alice)
    page = client.get(f"/pools/{pool.pk}/").content.decode()
    assert 'id="pool-decisions"' in page and f"/proposals/{proposal.pk}/approve/" in page
    fragment = client.get(f"/pools/{pool.pk}/decisions/", **HTMX)
    assert fragment.status_code == 200 and fragment.content.decode().lstrip().startswith('<section id="pool-decisions"')
    answer = client.post(f"/proposals/{proposal.pk}/approve/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="pool-decisions")
    body = answer.content.decode()
    assert answer.status_code == 200 and body.lstrip().startswith('<section id="pool-decisions"')
    assert f"/proposals/{proposal.pk}/approve/" not in body  # decided: no buttons
    assert Proposal.objects.get(pk=proposal.pk).decided_by == alice
    assert _login(charlie).get(f"/pools/{pool.pk}/decisions/").status_code == 404


def test_slack_says_the_cards_sentence_first(pool: Pool) -> None:
    from incidents.messages import proposal_facts
    from incidents.transports.slack import proposal_message

    proposal = _prescale(pool)
    facts = proposal_facts(proposal)
    assert facts.sentence.startswith("A peak of 20.0 req/s is forecast (now 9.0) on 1 ready replica; scaling to 4")
    section = proposal_message(facts, channel_id=1)["blocks"][1]["text"]["text"]
    assert section.startswith(facts.sentence + "\n*Pool*")


def test_the_card_of_a_split_scale_up_says_what_ran_already(pool: Pool, alice: User) -> None:
    rest = services.propose(pool, 8, ProposalKind.REACTIVE, PLANNER, current=1)
    share = Proposal.objects.get(pool=pool, state=ProposalState.APPROVED)
    card = _login(alice).get(f"/proposals/{rest.pk}/card/").content.decode()
    assert (f"+4 of +7 ran at once (1 → 5, within the guardrail); the remaining +3 waits for a person "
            f"(proposal #{share.pk}).") in card
    assert "it adds 7 replicas, more than the guardrail of 4 approved by policy" in card


def test_a_refused_decision_is_announced_to_a_screen_reader(pool: Pool, alice: User, bob: User) -> None:
    """Bob rejected it a moment before Alice's click: her card's 409 sentence is an alert, read out where she is,
    not a silent line in a card the focus left (the incident page's actions already do this)."""
    proposal = _prescale(pool)
    services.reject(proposal.pk, core.Actor(bob, Channel.SLACK), "not now")
    answer = _login(alice).post(f"/proposals/{proposal.pk}/approve/", HTTP_HX_REQUEST="true")
    body = answer.content.decode()
    assert answer.status_code == 409 and '<p class="error" role="alert">' in body and "rejected" in body


def test_the_sentence_names_the_objective_the_planner_planned_to(pool: Pool, alice: User) -> None:
    """The planner sizes a pool for its TTFT p95 SLO (scaling.loop.pool_plan); a pool that also has an end-to-end
    SLO (listed first: SLOs sort by indicator) must not read "keeps end-to-end p95 under 10 s" beside capacity
    figures computed for TTFT; without a TTFT p95 SLO the sentence says the default it planned to."""
    from controlplane.choices import SloIndicator
    from controlplane.models import SLO

    SLO.objects.create(pool=pool, indicator=SloIndicator.E2E_P95, threshold=10_000, objective=0.99)
    proposal = _prescale(pool)
    card = _login(alice).get(f"/proposals/{proposal.pk}/card/", **HTMX).content.decode()
    assert "keeps TTFT under 1 s" in card and "end-to-end p95 under" not in card, card
    SLO.objects.filter(pool=pool, indicator=SloIndicator.TTFT_P95).delete()
    card = _login(alice).get(f"/proposals/{proposal.pk}/card/", **HTMX).content.decode()
    assert "keeps TTFT under the default 1 s (" in card, card
