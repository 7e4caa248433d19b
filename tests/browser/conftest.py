"""Browser-tier fixtures."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.db import connection

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where a test saves its screenshots: docs/img/ with SAVE_SCREENSHOTS=1 (to refresh the docs' pictures),
    else a temporary folder, so a test run leaves the working tree clean."""
    if os.environ.get("SAVE_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        return IMAGES
    return tmp_path


@pytest.fixture(scope="session", autouse=True)
def _no_live_server_connection_left(django_db_setup, django_db_blocker):  # noqa: ANN001, ANN202
    """End the live server's leftover PostgreSQL sessions before the test database is dropped.

    A request the live server answered for the browser can leave its thread's connection open
    until the session-scoped server stops, which is after the test database is torn down: the
    drop then fails with "database is being accessed by other users" (pytest-django #429, #454).
    """
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
