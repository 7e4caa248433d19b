"""Shared fixtures. Each tier's own fixtures live next to its tests."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The shared real request traces (../shared/traces, or HEADROOM_TRACES_DIR)."""
    path = Path(settings.TRACES_DIR)
    assert path.is_dir(), f"trace directory {path} is missing; set HEADROOM_TRACES_DIR"
    return path
