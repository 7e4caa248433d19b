"""The approvals inbox: pending first, one-click decisions through htmx, scoped to the user's teams."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.drivers.cluster import ReplicaStatus
from scaling.models import Proposal


def _login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _proposal(pool: Pool, user: User, target: int = 4, **kwargs) -> Proposal:  # noqa: ANN003
    return services.propose(pool, target, ProposalKind.PRESCALE, core.Actor(user, Channel.API), current=1,
                            reasons=[{"code": "forecast_3x", "detail": "p90 forecast 3.4x the current load in 20 min"}],
                            **kwargs)


def test_the_inbox_lists_pending_first_with_evidence(pool: Pool, alice: User) -> None:
    old = _proposal(pool, alice, target=3)
    services.reject(old.pk, core.Actor(alice, Channel.WEB))
    _proposal(pool, alice, target=5, evidence={"forecast_expected": [1, 2, 4], "forecast_p90": [2, 3, 6], "capacity": [2, 2, 2]})
    body = _login(alice).get("/approvals/").content.decode()
    assert body.index("1 → <strong>5</strong>") < body.index("<h2>History</h2>") < body.index("1 → 3")
    assert "forecast_3x" in body and "<polyline" in body and "Approve" in body


def test_approving_in_the_browser_swaps_the_card(pool: Pool, alice: User, bob: User) -> None:
    proposal = _proposal(pool, alice)
    response = _login(bob).post(f"/proposals/{proposal.pk}/approve/", {"comment": "ship it"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith("<article")
    assert "ship it" in body and "bob" in body
    assert Proposal.objects.get(pk=proposal.pk).decided_channel == Channel.WEB
    again = _login(bob).post(f"/proposals/{proposal.pk}/reject/", HTTP_HX_REQUEST="true")
    assert again.status_code == 409 and "already" in again.content.decode()


def test_outsiders_see_nothing_and_cannot_decide(pool: Pool, alice: User, charlie: User) -> None:
    proposal = _proposal(pool, alice)
    assert b"chat-8b" in _login(alice).get("/approvals/").content  # the page lists it for her team
    outsiders_page = _login(charlie).get("/approvals/")
    assert outsiders_page.status_code == 200 and b"chat-8b" not in outsiders_page.content
    assert _login(charlie).post(f"/proposals/{proposal.pk}/approve/").status_code == 404
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.PENDING


def test_the_pool_page_shows_replicas_and_decisions(pool: Pool, alice: User) -> None:
    from django.utils import timezone

    services.record_status(pool, ReplicaStatus(desired=4, ready=2), timezone.now())
    _proposal(pool, alice)
    body = _login(alice).get(f"/pools/{pool.pk}/").content.decode()
    assert "<b>2</b> ready" in body and "<b>2</b> arriving" in body and "<b>4</b> desired" in body
    assert "forecast_3x" in body
