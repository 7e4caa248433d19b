"""Shared fixtures. Each tier's own fixtures live next to its tests."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.cache import cache

from tests.isolation import RUN_ID


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """No test of this suite skips: a skip would hide a missing binary or service behind a green run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped, and this suite does not skip: {reason}"


@pytest.hookimpl(trylast=True)  # after pytest-django's own ordering
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that play a story for minutes go first (the rest keep their order). The service tier's
    pytest-xdist workers take one test at a time (`--dist loadgroup`, Makefile), so the live demo's
    story and the headless surge start side by side instead of one after the other."""
    items.sort(key=lambda item: item.get_closest_marker("runs_for_minutes") is None)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """test_<name>_<run>: a second run at the same time creates and drops a database of its own."""
    for database in settings.DATABASES.values():
        if database["ENGINE"] != "django.db.backends.sqlite3":  # SQLite tests run in memory already
            database.setdefault("TEST", {})["NAME"] = f"test_{database['NAME']}_{RUN_ID}"[:63]


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The shared real request traces (../shared/traces, or HEADROOM_TRACES_DIR)."""
    path = Path(settings.TRACES_DIR)
    assert path.is_dir(), f"trace directory {path} is missing; set HEADROOM_TRACES_DIR"
    return path


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    """The cache holds login-failure counters: each test starts with none."""
    cache.clear()
