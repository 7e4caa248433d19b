"""The inbox live in a real browser (issue 16): a new pending proposal appears without a reload, and
several are approved at once with their checkboxes."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.models import Proposal

from tests.browser.test_approval_flow import _log_in, page  # noqa: F401
from tests.core.conftest import alice, bob, cluster, ml_team, pool  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PLANNER = core.Actor(None, Channel.AUTO)


def test_a_new_proposal_appears_and_several_are_approved_at_once(page, pool: Pool, bob: User) -> None:  # noqa: ANN001, F811
    _log_in(page, "bob")
    page.wait_for_url(page.base_url + "/")
    page.goto(page.base_url + "/approvals/")
    expect(page.locator("#approvals-pending")).to_contain_text("Nothing waits for a person")
    # The loop proposes while the page is open: the pending list brings both within its 5-s poll.
    prescale = services.propose(pool, 4, ProposalKind.PRESCALE, PLANNER, current=1)
    scheduled = services.propose(pool, 6, ProposalKind.SCHEDULED, PLANNER, current=1)
    expect(page.locator(f"#proposal-{prescale.pk}")).to_be_visible(timeout=12_000)
    expect(page.locator(f"#proposal-{scheduled.pk}")).to_be_visible()
    page.check(f"#select-{prescale.pk}")
    page.check(f"#select-{scheduled.pk}")
    page.fill("#bulk-decide input[name=comment]", "both for the peak")
    page.get_by_role("button", name="Approve selected").click()
    expect(page.locator("#approvals-pending .outcomes")).to_contain_text(f"#{prescale.pk}: approved")
    for proposal in (prescale, scheduled):
        decided = Proposal.objects.get(pk=proposal.pk)
        assert decided.state != ProposalState.PENDING and decided.decided_by == bob
        assert decided.decision_comment == "both for the peak" and decided.decided_channel == Channel.WEB
