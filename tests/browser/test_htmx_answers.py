"""How htmx treats our answers in a real browser: a refused action's 4xx fragment is shown, a save's 204 with
HX-Redirect still goes to the next page, and a session that ended sends the whole page to the login form."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import services
from scaling.choices import ProposalKind
from scaling.models import Proposal

from tests.browser.test_approval_flow import _log_in, page  # noqa: F401
from tests.core.conftest import alice, bob, cluster, ml_team, pool  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _pending_proposal(pool: Pool, alice: User) -> Proposal:  # noqa: F811
    return services.propose(pool, 4, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1,
                            reasons=[{"code": "PreScaleProposed", "detail": "forecast 3.4x within 30 min"}])


def test_approving_a_proposal_rejected_meanwhile_shows_why(page, pool: Pool, alice: User, bob: User) -> None:  # noqa: ANN001, F811
    proposal = _pending_proposal(pool, alice)
    _log_in(page, "bob")
    page.goto(page.base_url + "/approvals/")
    card = page.locator(f"#proposal-{proposal.pk}")
    expect(card).to_contain_text("Pending approval")
    services.reject(proposal.pk, core.Actor(alice, Channel.API), "not now")  # meanwhile, in Slack or the API
    with page.expect_response(lambda response: "/approve/" in response.url) as answer:
        card.get_by_role("button", name="Approve").click()
    assert answer.value.status == 409
    expect(card.locator(".error")).to_contain_text(f"Proposal #{proposal.pk} is already rejected")


def test_a_saved_edit_still_follows_its_hx_redirect(page, pool: Pool, bob: User) -> None:  # noqa: ANN001, F811
    _log_in(page, "bob")
    page.goto(page.base_url + f"/pool/{pool.pk}/edit/")
    page.fill("input[name=max_replicas]", "6")
    page.get_by_role("button", name="Save").click()
    page.wait_for_url(page.base_url + f"/pools/{pool.pk}/")
    assert Pool.objects.get(pk=pool.pk).max_replicas == 6


def test_a_click_after_the_session_ended_goes_to_the_login_page_and_back(page, pool: Pool, alice: User,  # noqa: ANN001, F811
                                                                         bob: User) -> None:  # noqa: F811
    proposal = _pending_proposal(pool, alice)
    _log_in(page, "bob")
    page.goto(page.base_url + "/approvals/")
    page.context.clear_cookies(name="sessionid")  # the session ends while the page stays open
    page.locator(f"#proposal-{proposal.pk}").get_by_role("button", name="Approve").click()
    page.wait_for_url(re.compile(r"/login/\?next=/approvals/$"))
    expect(page.locator("input[name=username]")).to_have_count(1)  # the login form is the page, not a card
    page.fill("input[name=username]", "bob")
    page.fill("input[name=password]", "pw-bob")
    page.click("button[type=submit]")
    page.wait_for_url(page.base_url + "/approvals/")
