"""Off-hours windows against the wall clock (`controlplane.config.OffHoursWindow`): midnight, the
weekday boundary, the hour lost and the hour repeated at a DST change, a 30-minute change and a zone
without DST (pure, fixed instants)."""
from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from controlplane.config import parse_off_hours

NEW_YORK, LORD_HOWE, KOLKATA = ZoneInfo("America/New_York"), ZoneInfo("Australia/Lord_Howe"), ZoneInfo("Asia/Kolkata")


def _inside(raw: dict, at: datetime, zone: ZoneInfo) -> bool:
    (window,) = parse_off_hours([raw])
    return window.contains_instant(at, zone)


def _utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "at", "zone", "inside"),
    [
        # Weeknights 22:00-06:00: the part after midnight belongs to the night before.
        ({"weekdays": [0, 1, 2, 3, 4], "start": "22:00", "end": "06:00"}, _utc(2026, 1, 9, 22, 0), UTC, True),  # Fri
        ({"weekdays": [0, 1, 2, 3, 4], "start": "22:00", "end": "06:00"}, _utc(2026, 1, 10, 5, 59), UTC, True),  # Sat
        ({"weekdays": [0, 1, 2, 3, 4], "start": "22:00", "end": "06:00"}, _utc(2026, 1, 10, 6, 0), UTC, False),
        ({"weekdays": [0, 1, 2, 3, 4], "start": "22:00", "end": "06:00"}, _utc(2026, 1, 12, 3, 0), UTC, False),  # Mon
        ({"weekdays": [0, 1, 2, 3, 4], "start": "22:00", "end": "06:00"}, _utc(2026, 1, 11, 23, 0), UTC, False),  # Sun
        # Sunday 23:00 to Monday 02:00.
        ({"weekdays": [6], "start": "23:00", "end": "02:00"}, _utc(2026, 1, 12, 1, 30), UTC, True),
        ({"weekdays": [6], "start": "23:00", "end": "02:00"}, _utc(2026, 1, 11, 1, 30), UTC, False),
        ({"weekdays": [6], "start": "23:00", "end": "02:00"}, _utc(2026, 1, 12, 23, 30), UTC, False),
        # New York springs forward on 2026-03-08: 02:00-03:00 EST does not exist. A start in the gap
        # starts at the first instant after it (03:00 EDT, 07:00Z); an end in it ends there.
        ({"weekdays": [6], "start": "02:30", "end": "06:00"}, _utc(2026, 3, 8, 6, 59), NEW_YORK, False),
        ({"weekdays": [6], "start": "02:30", "end": "06:00"}, _utc(2026, 3, 8, 7, 0), NEW_YORK, True),
        ({"weekdays": [5], "start": "22:00", "end": "02:30"}, _utc(2026, 3, 8, 6, 59), NEW_YORK, True),
        ({"weekdays": [5], "start": "22:00", "end": "02:30"}, _utc(2026, 3, 8, 7, 0), NEW_YORK, False),
        # Weeknights across the change, in New York: Sunday night into Monday is off, Saturday's is.
        ({"weekdays": [5, 6], "start": "22:00", "end": "06:00"}, _utc(2026, 3, 8, 9, 59), NEW_YORK, True),
        ({"weekdays": [5, 6], "start": "22:00", "end": "06:00"}, _utc(2026, 3, 8, 10, 0), NEW_YORK, False),
        # New York falls back on 2026-11-01: 01:00-02:00 happens twice (EDT, then EST). A window that
        # ends at 01:30 ends on the first pass and does not open again on the second.
        ({"weekdays": [5], "start": "22:00", "end": "01:30"}, _utc(2026, 11, 1, 5, 15), NEW_YORK, True),  # 01:15 EDT
        ({"weekdays": [5], "start": "22:00", "end": "01:30"}, _utc(2026, 11, 1, 5, 45), NEW_YORK, False),  # 01:45 EDT
        ({"weekdays": [5], "start": "22:00", "end": "01:30"}, _utc(2026, 11, 1, 6, 15), NEW_YORK, False),  # 01:15 EST
        # A window over the whole night covers both passes; one that starts at 01:30 never covers a
        # wall-clock time before 01:30.
        ({"weekdays": [5], "start": "22:00", "end": "06:00"}, _utc(2026, 11, 1, 6, 15), NEW_YORK, True),
        ({"weekdays": [6], "start": "01:30", "end": "06:00"}, _utc(2026, 11, 1, 5, 45), NEW_YORK, True),  # 01:45 EDT
        ({"weekdays": [6], "start": "01:30", "end": "06:00"}, _utc(2026, 11, 1, 6, 15), NEW_YORK, False),  # 01:15 EST
        # Lord Howe moves by 30 minutes: 02:00-02:30 is skipped on 2026-10-04, 01:30-02:00 repeated on 2026-04-05.
        ({"weekdays": [6], "start": "02:15", "end": "06:00"}, _utc(2026, 10, 3, 15, 29), LORD_HOWE, False),
        ({"weekdays": [6], "start": "02:15", "end": "06:00"}, _utc(2026, 10, 3, 15, 30), LORD_HOWE, True),
        ({"weekdays": [5], "start": "22:00", "end": "01:45"}, _utc(2026, 4, 4, 14, 40), LORD_HOWE, True),  # 01:40 +11
        ({"weekdays": [5], "start": "22:00", "end": "01:45"}, _utc(2026, 4, 4, 15, 10), LORD_HOWE, False),  # 01:40 +10:30
        # Kolkata, +05:30 all year.
        ({"weekdays": [0], "start": "22:00", "end": "06:00"}, _utc(2026, 3, 9, 16, 30), KOLKATA, True),
        ({"weekdays": [0], "start": "22:00", "end": "06:00"}, _utc(2026, 3, 10, 0, 29), KOLKATA, True),
        ({"weekdays": [0], "start": "22:00", "end": "06:00"}, _utc(2026, 3, 10, 0, 30), KOLKATA, False),
    ],
)
def test_it_follows_the_wall_clock_of_the_zone(raw: dict, at: datetime, zone: ZoneInfo, inside: bool) -> None:
    assert _inside(raw, at, zone) is inside
