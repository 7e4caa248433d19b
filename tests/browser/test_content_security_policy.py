"""The pages and the API docs run in a real browser under the Content-Security-Policy: no violation."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane.models import Pool

from tests.browser.test_approval_flow import _log_in, page  # noqa: F401
from tests.core.conftest import alice, cluster, ml_team, pool  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_no_page_breaks_the_policy(page, alice: User, pool: Pool) -> None:  # noqa: ANN001, F811
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text) if "Content Security Policy" in message.text else None)
    _log_in(page, "alice")
    page.wait_for_url(page.base_url + "/")
    fleet = page.base_url + "/"  # the refresh asks for the page it shows: "/" or "/?page=N&inventory_page=M"
    with page.expect_response(lambda response: response.url.split("?")[0] == fleet
                              and response.request.headers.get("hx-request") == "true", timeout=20_000):
        pass  # the fleet table refreshes itself through htmx (every 15 s)
    page.goto(page.base_url + f"/pools/{pool.pk}/")
    page.goto(page.base_url + "/api/docs/")
    page.wait_for_selector(".swagger-ui .information-container", timeout=20_000)  # the schema loaded and rendered
    assert violations == []
