"""The incident page's verdict (pure): TTFT p95 and the queue now against 5 minutes ago."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from incidents.live import trend

NOW = datetime.fromisoformat("2026-12-01T02:10:00+00:00")


def series(then: float | None, now: float | None) -> list[tuple[datetime, float | None]]:
    return [(NOW - timedelta(minutes=6), then), (NOW - timedelta(minutes=1), None), (NOW, now)]


@pytest.mark.parametrize(("ttft", "queue", "direction", "words"), [
    ((1.2, 1.8), (80, 175), "worse", "Getting worse: TTFT p95 1.80 s (was 1.20 s 5 min ago), queue 175 (was 80 5 min ago)"),
    ((1.8, 0.9), (175, 20), "better", "Getting better"),
    ((1.0, 1.05), (100, 104), "steady", "Steady"),
    ((1.8, 0.9), (20, 175), "mixed", "Mixed"),
    ((1.2, 1.8), (None, None), "worse", "Getting worse: TTFT p95 1.80 s (was 1.20 s 5 min ago); the SLO is 1 s."),
    ((None, None), (None, None), "unknown", "Not enough recent readings"),
])
def test_it_says_whether_it_is_getting_better_or_worse(ttft: tuple, queue: tuple, direction: str, words: str) -> None:
    verdict = trend(series(*ttft), series(*queue), 1.0, NOW)
    assert verdict.direction == direction and words in verdict.sentence
