"""The incident view in a real browser (Debian's Chromium, htmx, the Content-Security-Policy): an operator
acknowledges the incident and approves the pool's pending scale-up from it; the screenshot in docs/img/
is taken here."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from incidents.choices import IncidentState
from incidents.models import Incident
from scaling import services
from scaling.choices import ProposalKind, ProposalState
from scaling.models import Proposal

from tests.browser.test_approval_flow import _log_in, page  # noqa: F401
from tests.core.conftest import alice, bob, cluster, ml_team, pool  # noqa: F401
from tests.incidents.test_incident_views import incident  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_acknowledges_and_approves_from_the_incident_view(page, incident: Incident, pool: Pool,  # noqa: ANN001, F811
                                                                      screenshots: Path,
                                                                      alice: User, bob: User) -> None:  # noqa: F811
    proposal = services.propose(pool, 6, ProposalKind.REACTIVE, core.Actor(bob, Channel.API), current=2,
                                reasons=[{"code": "QueuePerReplica", "detail": "queue 175 on 2 ready replicas"}])
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    page.set_viewport_size({"width": 1440, "height": 900})
    _log_in(page, "alice")
    page.wait_for_url(page.base_url + "/")
    page.goto(page.base_url + f"/incidents/{incident.pk}/")
    live = page.locator("#incident-live")
    expect(live).to_contain_text("Getting worse")
    expect(live.locator("svg")).to_have_count(8)

    live.get_by_role("button", name="Acknowledge").click()
    expect(page.locator("#incident-live")).to_contain_text("commander: alice")  # swapped in place, no reload
    assert Incident.objects.get(pk=incident.pk).state == IncidentState.ACKNOWLEDGED

    card = page.locator(f"#proposal-{proposal.pk}")
    card.locator("input[name=comment]").fill("approve from the incident")
    card.get_by_role("button", name="Approve").click()
    expect(page.locator(f"#proposal-{proposal.pk}")).to_contain_text("approve from the incident")
    decided = Proposal.objects.get(pk=proposal.pk)
    assert (decided.decided_by, decided.decided_channel) == (alice, Channel.WEB)
    assert decided.state != ProposalState.PENDING

    page.fill("#note-text", "scale-up approved; watching the queue")
    page.get_by_role("button", name="Add note").click()
    expect(page.locator("#incident-live")).to_contain_text(f"Proposal #{proposal.pk} approved")
    expect(page.locator("#incident-live")).to_contain_text("watching the queue")
    expect(page.locator("#note-text")).to_have_value("")  # the note form was reset out of band
    page.screenshot(path=str(screenshots / "incident-view.png"), full_page=True)

    page.locator("#incident-live").get_by_role("button", name="Resolve").click()
    expect(page.locator("#incident-live .badge")).to_have_text("Resolved")
    expect(page.locator("#incident-live")).not_to_contain_text("Mark mitigated")
    page.screenshot(path=str(screenshots / "incident-view-resolved.png"), full_page=True)
    assert Incident.objects.get(pk=incident.pk).state == IncidentState.RESOLVED
    assert violations == []
