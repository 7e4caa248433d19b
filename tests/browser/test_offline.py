"""Offline-complete (issue 16): every page, the API docs and the admin included, loads everything it
needs from Headroom itself; no request leaves 127.0.0.1, nor is one attempted and refused by the
Content-Security-Policy (the page would hang or break without internet)."""
from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import services
from scaling.choices import ProposalKind

from tests.browser.test_approval_flow import _log_in, page  # noqa: F401
from tests.core.conftest import alice, bob, cluster, ml_team, pool  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def test_no_page_makes_a_request_outside_127_0_0_1(page, bob: User, pool: Pool) -> None:  # noqa: ANN001, F811
    proposal = services.propose(pool, 4, ProposalKind.PRESCALE, core.Actor(None, Channel.AUTO), current=1,
                     evidence={"forecast_expected": [1, 2, 4], "forecast_p90": [2, 3, 6], "capacity": [2, 2, 2]})
    bob.is_staff = bob.is_superuser = True  # the admin pages too
    bob.save()
    outside: list[str] = []
    seen: list[str] = []

    def check(route, request) -> None:  # noqa: ANN001
        seen.append(request.url)
        if urlsplit(request.url).scheme in ("http", "https", "ws", "wss") and \
                urlsplit(request.url).hostname not in LOCAL_HOSTS:
            outside.append(request.url)
            route.abort()  # and the page goes on as it would offline
        else:
            route.continue_()

    page.route("**/*", check)
    # The Content-Security-Policy stops most outside loads before they are sent: a page that tries is
    # just as broken offline, so its refusals count as outside requests too.
    page.on("console", lambda message: outside.append(message.text)
            if "Content Security Policy" in message.text else None)
    page.goto(page.base_url + "/login/")
    _log_in(page, "bob")
    page.wait_for_url(page.base_url + "/")
    pages = ["/", "/approvals/", f"/pools/{pool.pk}/", "/clusters/", "/audit/", "/alerts/", "/integrations/channels/",
             "/integrations/channels/new/", "/settings/", "/pool/new/", f"/pool/{pool.pk}/edit/", "/admin/",
             f"/proposals/{proposal.pk}/card/", f"/audit/?pool={pool.pk}&within=1h",
             "/api/docs/"]  # last: Swagger UI is waited for below
    for path in pages:
        response = page.goto(page.base_url + path)
        assert response is not None and response.status == 200, path
        page.wait_for_load_state("networkidle")
    page.wait_for_selector(".swagger-ui .information-container", timeout=20_000)  # Swagger UI ran, from /static/
    icon = page.request.get(page.base_url + "/favicon.ico")
    assert icon.status == 200 and b"<svg" in icon.body()
    assert outside == []
    assert any("/static/favicon.svg" in url for url in seen)  # every page has its icon
