"""Browser-tier fixtures."""
from __future__ import annotations

import pytest
from django.db import connection


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
