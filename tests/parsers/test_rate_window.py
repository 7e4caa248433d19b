"""A cluster's Prometheus rate window: a PromQL duration Headroom can read rates over."""
from __future__ import annotations

import pytest

from controlplane.config import parse_rate_window
from sandbox.registration import sandbox_rate_window


@pytest.mark.parametrize(("raw", "seconds"), [("1m", 60), ("15s", 15), ("1m30s", 90), ("5s", 5), ("10m", 600)])
def test_it_reads_a_rate_window_in_seconds(raw: str, seconds: float) -> None:
    assert parse_rate_window(raw) == seconds


@pytest.mark.parametrize(("raw", "message"), [
    ("2s", "from 5s to 10m"), ("1h", "from 5s to 10m"), ("a minute", "not a Prometheus duration"),
    ("", "not a Prometheus duration"), (60, "not a Prometheus duration"), ("1m 30s", "not a Prometheus duration"),
])
def test_it_explains_a_window_it_cannot_use(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rate_window(raw)


@pytest.mark.parametrize(("speed", "window"), [(1.0, "60s"), (4.0, "15s"), (2.5, "24s"), (20.0, "5s")])
def test_the_sandbox_window_spans_one_scenario_minute(speed: float, window: str) -> None:
    assert sandbox_rate_window(speed) == window
    parse_rate_window(window)  # and a cluster accepts it
