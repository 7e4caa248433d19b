"""The production web pod serves its own static files (the stylesheet, vendored htmx, Swagger UI): gunicorn runs
with DEBUG off and nothing else in deploy/ serves /static/, so without them every page is unstyled and no button
that htmx drives (approve, reject, acknowledge) does anything."""
from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client


def _assets(html: str) -> list[str]:
    return re.findall(r'(?:href|src)="(/static/[^"]+)"', html)


@pytest.mark.django_db
def test_every_asset_the_login_page_links_is_served_with_debug_off() -> None:
    assert settings.DEBUG is False  # what production runs
    assets = _assets(Client().get("/login/").content.decode())
    assert any(asset.endswith(".css") for asset in assets) and any("htmx" in asset for asset in assets)
    for asset in assets:
        response = Client().get(asset)
        assert response.status_code == 200, asset
        assert b"".join(response.streaming_content if response.streaming else [response.content])


@pytest.mark.django_db
def test_the_api_docs_page_finds_swagger_ui() -> None:
    client = Client()
    client.force_login(User.objects.create_user("ops", password="pw-ops-long"))
    assets = _assets(client.get("/api/docs/").content.decode())
    assert any("swagger-ui" in asset for asset in assets)
    assert all(Client().get(asset).status_code == 200 for asset in assets), assets


def test_a_missing_asset_is_a_404_not_a_server_error() -> None:
    assert Client().get("/static/no-such-file.css").status_code == 404
