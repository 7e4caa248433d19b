"""Scheduled windows and off-hours auto-approval against the wall clock of their zone: midnight, the
weekday boundary, the hour lost and the hour repeated at a DST change, and a lead time across it.
Fixed instants; the rule is in docs/control-loop.md, "Windows and the wall clock"."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool, ScheduleWindow
from scaling import loop, services
from scaling.choices import ProposalKind, ProposalState
from scaling.models import SignalSample

PLANNER = core.Actor(user=None, channel=Channel.AUTO)


def _utc(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()


def _occurrences(pool: Pool, now: datetime) -> list[tuple[float, float]]:
    plan = loop.pool_plan(pool)
    return sorted((w.start_s, w.end_s) for w in loop.schedule_windows(pool, plan, now))


def _window(pool: Pool, weekday: int, start: str, end: str, zone: str = "America/New_York", lead: int = 0,
            name: str = "peak") -> ScheduleWindow:
    return ScheduleWindow.objects.create(pool=pool, name=name, weekday=weekday, start=start, end=end,
                                         time_zone=zone, lead_minutes=lead)


def test_a_window_from_sunday_night_to_monday_is_sundays(pool: Pool) -> None:
    _window(pool, 6, "23:00", "02:00", zone="UTC")  # Sunday 23:00 to Monday 02:00
    monday_1am = datetime(2026, 1, 12, 1, 0, tzinfo=UTC)
    assert (_utc(2026, 1, 11, 23), _utc(2026, 1, 12, 2)) in _occurrences(pool, monday_1am)
    assert all(start != _utc(2026, 1, 12, 23) for start, _ in _occurrences(pool, monday_1am))


def test_a_window_that_starts_in_the_hour_the_clocks_skip_starts_when_they_have(pool: Pool) -> None:
    # New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z). 02:30 is never shown: the window
    # starts at the first instant after the gap, not half an hour into it (03:30 EDT).
    _window(pool, 6, "02:30", "04:00")
    assert _occurrences(pool, datetime(2026, 3, 8, 6, 0, tzinfo=UTC)) == [(_utc(2026, 3, 8, 7), _utc(2026, 3, 8, 8))]


def test_a_window_that_ends_in_the_skipped_hour_ends_when_it_does(pool: Pool) -> None:
    _window(pool, 5, "23:00", "02:30")  # Saturday night
    assert _occurrences(pool, datetime(2026, 3, 8, 5, 0, tzinfo=UTC)) == [(_utc(2026, 3, 8, 4), _utc(2026, 3, 8, 7))]


def test_a_window_in_a_30_minute_gap_starts_after_it(pool: Pool) -> None:
    # Lord Howe, 2026-10-04: 02:00 (+10:30) becomes 02:30 (+11:00), at 15:30Z the day before.
    _window(pool, 6, "02:15", "04:00", zone="Australia/Lord_Howe")
    assert _occurrences(pool, datetime(2026, 10, 3, 15, 0, tzinfo=UTC)) == [
        (_utc(2026, 10, 3, 15, 30), _utc(2026, 10, 3, 17))]


def test_a_repeated_hour_is_covered_once(pool: Pool) -> None:
    # New York, 2026-11-01: 01:00-02:00 comes twice (05:00-06:00Z as EDT, 06:00-07:00Z as EST). A
    # window ending at 01:30 ends on the first pass; one starting at 01:30 starts on the first pass.
    _window(pool, 6, "00:00", "01:30", name="until")
    _window(pool, 6, "01:30", "03:00", name="from")
    assert _occurrences(pool, datetime(2026, 11, 1, 4, 0, tzinfo=UTC)) == [
        (_utc(2026, 11, 1, 4), _utc(2026, 11, 1, 5, 30)), (_utc(2026, 11, 1, 5, 30), _utc(2026, 11, 1, 8))]


def test_a_zone_without_dst(pool: Pool) -> None:
    _window(pool, 0, "09:00", "10:00", zone="Asia/Kolkata")
    assert _occurrences(pool, datetime(2026, 3, 9, 3, 0, tzinfo=UTC)) == [(_utc(2026, 3, 9, 3, 30), _utc(2026, 3, 9, 4, 30))]


def test_a_lead_time_across_the_change_reads_last_weeks_peak_from_its_real_start(pool: Pool) -> None:
    # Sunday 03:00-05:00 EDT (07:00-09:00Z), a 3-hour lead: the pre-scale opens at 04:00Z, 23:00 EST the
    # day before, three real hours ahead. Last Sunday's window (EST, 08:00-10:00Z) peaked at 200 req/s.
    _window(pool, 6, "03:00", "05:00", lead=180)
    SignalSample.objects.create(pool=pool, at=datetime(2026, 3, 1, 8, 30, tzinfo=UTC), request_rate_rps=200.0)
    SignalSample.objects.create(pool=pool, at=datetime(2026, 3, 1, 7, 30, tzinfo=UTC), request_rate_rps=900.0)
    plan = loop.pool_plan(pool)
    (window,) = loop.schedule_windows(pool, plan, datetime(2026, 3, 8, 4, 30, tzinfo=UTC))
    assert window.start_s == _utc(2026, 3, 8, 7) - (180 * 60 - plan.lead_s)
    assert window.last_peak_rps == 200.0


def test_a_lead_time_that_started_in_the_past_acts_at_once(pool: Pool) -> None:
    _window(pool, 0, "09:00", "10:00", zone="UTC", lead=60)  # made at 08:55, five minutes before the start
    plan = loop.pool_plan(pool)
    (window,) = loop.schedule_windows(pool, plan, datetime(2026, 11, 30, 8, 55, tzinfo=UTC))
    assert window.start_s - plan.lead_s <= _utc(2026, 11, 30, 8, 55) < window.end_s


def _off_hours_pool(pool: Pool, window: dict) -> Pool:
    cluster = pool.cluster
    cluster.time_zone, cluster.off_hours = "America/New_York", [window]
    cluster.save()
    return Pool.objects.select_related("cluster", "team").get(pk=pool.pk)


def test_off_hours_that_ended_before_the_clocks_went_back_do_not_approve_on_the_repeated_pass(pool: Pool) -> None:
    pool = _off_hours_pool(pool, {"weekdays": [5], "start": "22:00", "end": "01:30"})  # Saturday night
    first_pass = services.propose(pool, 4, ProposalKind.PRESCALE, PLANNER, current=1,
                                  now=datetime(2026, 11, 1, 5, 15, tzinfo=UTC))  # 01:15 EDT
    assert first_pass.state == ProposalState.APPROVED
    assert first_pass.decision_comment.endswith("off-hours window of gpu-us-east (Sun 01:15 EDT, America/New_York)")
    second_pass = services.propose(pool, 6, ProposalKind.PRESCALE, PLANNER, current=1,
                                   now=datetime(2026, 11, 1, 6, 15, tzinfo=UTC))  # 01:15 EST, after 01:30 EDT
    assert second_pass.state == ProposalState.PENDING


def test_off_hours_approve_from_the_first_instant_after_a_skipped_start(pool: Pool) -> None:
    pool = _off_hours_pool(pool, {"weekdays": [6], "start": "02:30", "end": "06:00"})
    before = services.propose(pool, 4, ProposalKind.PRESCALE, PLANNER, current=1,
                              now=datetime(2026, 3, 8, 6, 59, tzinfo=UTC))  # 01:59 EST
    assert before.state == ProposalState.PENDING
    after = services.propose(pool, 6, ProposalKind.PRESCALE, PLANNER, current=1,
                             now=datetime(2026, 3, 8, 7, 0, tzinfo=UTC))  # 03:00 EDT
    assert after.state == ProposalState.APPROVED


def test_an_approval_at_the_expiry_instant_is_too_late(pool: Pool, alice, bob) -> None:  # noqa: ANN001
    made = datetime(2026, 1, 12, 12, 0, tzinfo=UTC)
    asked, approver = core.Actor(user=alice, channel=Channel.API), core.Actor(user=bob, channel=Channel.API)
    late = services.propose(pool, 4, ProposalKind.MANUAL, asked, current=1, now=made)
    with pytest.raises(services.ProposalConflict, match="expired at 12:10:00 UTC"):
        services.approve(late.pk, approver, now=late.expires_at)
    late.refresh_from_db()
    assert late.state == ProposalState.EXPIRED
    just_in_time = services.propose(pool, 5, ProposalKind.MANUAL, asked, current=1, now=made)
    approved = services.approve(just_in_time.pk, approver, now=just_in_time.expires_at - timedelta(microseconds=1))
    assert approved.state == ProposalState.APPROVED
