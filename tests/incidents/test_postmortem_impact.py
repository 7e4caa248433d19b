"""The postmortem's impact numbers (pure): SLO minutes broken and requests then, unknown readings not
counted as good, a silence longer than a minute not stretched over."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from incidents.postmortem import slo_impact

T0 = datetime.fromisoformat("2026-12-01T02:00:00+00:00")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(("points", "end_s", "breached", "known", "requests", "in_breach"), [
    # four 15-second ticks, two of them over 1 s, at 10 req/s: 30 s breached, 300 of 600 requests
    ([(at(0), 0.5, 10.0), (at(15), 1.5, 10.0), (at(30), 2.0, 10.0), (at(45), 0.8, 10.0)], 60, 0.5, 1.0, 600, 300),
    # an unknown reading is neither good nor bad; its requests still count
    ([(at(0), None, 10.0), (at(15), 1.5, 10.0)], 30, 0.25, 0.25, 300, 150),
    # a 10-minute silence after a bad tick counts as one minute at most
    ([(at(0), 3.0, 1.0), (at(600), 0.5, 1.0)], 615, 1.0, 1.25, 75, 60),
    # exactly at the threshold meets it
    ([(at(0), 1.0, 2.0)], 15, 0.0, 0.25, 30, 0),
    ([], 60, 0.0, 0.0, 0, 0),
])
def test_it_counts_breached_minutes_and_requests(points: list, end_s: float, breached: float, known: float,
                                                 requests: float, in_breach: float) -> None:
    impact = slo_impact(points, 1.0, at(end_s))
    assert (impact.breached_minutes, impact.known_minutes, impact.requests, impact.requests_in_breach) == pytest.approx(
        (breached, known, requests, in_breach))
