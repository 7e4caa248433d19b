"""Ages of Prometheus readings when clocks disagree (pure: `_reading` with fixed instants).

The source asks Prometheus to evaluate at Headroom's clock (`time=`) and ages a reading by that instant
minus the pool's oldest scrape timestamp, which Prometheus stamped with its own clock. A scrape stamped
ahead of Headroom (Prometheus' clock 30 s fast, or a sample pushed with its own timestamp) is age 0,
never negative and never unknown for that; one stamped minutes behind (Prometheus' clock slow) is stale:
unknown, never zero, and the planner holds (docs/engine.md)."""
from __future__ import annotations

from scaling.drivers.prometheus import _reading

TICK = 1_800_000_000.0


def test_a_scrape_stamped_30_s_ahead_of_our_clock_is_fresh() -> None:
    reading = _reading(3.0, TICK, (TICK + 30.0, TICK + 30.0))
    assert reading.age_s == 0.0 and reading.is_known and reading.known == 3.0


def test_a_scrape_stamped_30_s_behind_is_30_s_old() -> None:
    reading = _reading(3.0, TICK, (TICK - 30.0, TICK - 30.0))
    assert reading.age_s == 30.0 and reading.is_known


def test_a_scrape_stamped_minutes_behind_is_stale_not_zero() -> None:
    reading = _reading(3.0, TICK, (TICK - 180.0, TICK - 180.0))
    assert reading.is_stale and not reading.is_known and reading.value == 3.0
