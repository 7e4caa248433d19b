"""The approval flow in a real browser: Debian's Chromium, htmx, CSRF, the live server."""
from __future__ import annotations

import os
import shutil

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect, sync_playwright

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.models import Proposal

from tests.core.conftest import alice, bob, cluster, ml_team, pool  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium on a machine without network: no background calls, no sandbox (we run as root).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture
def page(live_server, monkeypatch):  # noqa: ANN001, ANN201
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Chromium is not installed at {CHROMIUM} (make system-deps installs it)")
    # Playwright's sync API runs an event loop. Undone after the test: a later `check --deploy` in the
    # same run would otherwise warn about it.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.base_url = live_server.url
        yield page
        browser.close()


def _log_in(page, username: str) -> None:  # noqa: ANN001
    page.goto(page.base_url + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw-" + username)
    page.click("button[type=submit]")


def test_an_operator_approves_in_the_inbox_with_one_click(page, pool: Pool, alice: User, bob: User) -> None:  # noqa: ANN001
    proposal = services.propose(pool, 4, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1,
                                reasons=[{"code": "PreScaleProposed", "detail": "forecast 3.4x within 30 min"}])
    _log_in(page, "bob")
    page.goto(page.base_url + "/approvals/")
    card = page.locator(f"#proposal-{proposal.pk}")
    expect(card).to_contain_text("Pending approval")
    card.locator("input[name=comment]").fill("go ahead")
    card.get_by_role("button", name="Approve").click()
    # htmx swapped the card in place (the POST carried the CSRF header); no page load.
    expect(page.locator(f"#proposal-{proposal.pk}")).to_contain_text("go ahead")
    decided = Proposal.objects.get(pk=proposal.pk)
    assert decided.decided_by == bob and decided.decided_channel == Channel.WEB
    assert decided.state != ProposalState.PENDING


def test_the_pool_form_shows_errors_inline(page, pool: Pool, bob: User) -> None:  # noqa: ANN001
    _log_in(page, "bob")
    page.goto(page.base_url + f"/pool/{pool.pk}/edit/")
    page.fill("input[name=min_replicas]", "50")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".field.invalid")).to_contain_text("must not exceed max_replicas (8)")
    assert Pool.objects.get(pk=pool.pk).min_replicas == 1
