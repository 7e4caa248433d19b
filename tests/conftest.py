"""Shared fixtures. Each tier's own fixtures live next to its tests."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.cache import cache


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
