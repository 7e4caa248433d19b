"""The daily scenario and live traffic that continues the backfilled history's timeline."""
from __future__ import annotations

import itertools
from collections import Counter

from sandbox.runtime import HISTORY_GAP_S
from sandbox.scenarios import BASE_RPS_PER_POOL, DAILY_FACTOR, DAILY_START_S, continued, scenario_trace


def _per_minute(trace, until_s: float) -> Counter:  # noqa: ANN001
    return Counter(int(request.t_s // 60) for request in itertools.takewhile(lambda r: r.t_s < until_s, trace))


def test_it_peaks_once_a_day_at_the_same_time() -> None:
    start_minute = int(DAILY_START_S // 60)
    counts = _per_minute(scenario_trace("daily", 1), DAILY_START_S + 600)
    quiet = counts[start_minute - 5] / 60
    peak = counts[start_minute + 5] / 60
    assert abs(quiet - BASE_RPS_PER_POOL) < 0.6
    assert peak / quiet > DAILY_FACTOR * 0.6


def test_live_traffic_continues_where_the_history_ends() -> None:
    """With 26 h of history (ending 5 minutes before the start) the next peak starts 10 minutes into the live run."""
    live = _per_minute(continued(scenario_trace("daily", 1), 26 * 3600.0 + HISTORY_GAP_S), 30 * 60)
    assert live[5] / 60 < BASE_RPS_PER_POOL * 2
    assert live[15] / 60 > BASE_RPS_PER_POOL * DAILY_FACTOR * 0.6


def test_surge_10x_is_one_surge_and_then_ends() -> None:
    from sandbox.scenarios import SURGE_10X_END_S

    requests = list(scenario_trace("surge-10x", 1))  # finite: list() returns
    assert requests and requests[-1].t_s < SURGE_10X_END_S
    counts = Counter(int(request.t_s // 60) for request in requests)
    assert counts[1] / 60 < BASE_RPS_PER_POOL * 2
    assert counts[4] / 60 > BASE_RPS_PER_POOL * 7  # minutes 2-7 carry the 10x surge
    assert counts[7] / 60 < BASE_RPS_PER_POOL * 2
    assert [r.t_s for r in scenario_trace("surge-10x", 1)][:5] == [r.t_s for r in requests[:5]]  # same seed, same trace


def test_the_story_is_quiet_then_surges_then_calms_then_peaks_as_forecast() -> None:
    from sandbox.scenarios import STORY_SURGE_END_S, STORY_SURGE_START_S, SURGE_FACTOR, story_peak_wall_s

    speed = 2.0
    peak_start_s = story_peak_wall_s(speed) * speed  # 1,200 model seconds at 2x
    assert peak_start_s == 1200.0
    counts = _per_minute(scenario_trace("story", 1, speed=speed), peak_start_s + 600)
    rate = lambda second: counts[int(second // 60)] / 60  # noqa: E731
    assert rate(STORY_SURGE_START_S - 120) < BASE_RPS_PER_POOL * 2  # the quiet start
    assert rate(STORY_SURGE_START_S + 120) > BASE_RPS_PER_POOL * SURGE_FACTOR * 0.7  # the unforeseen surge
    assert rate(STORY_SURGE_END_S + 120) < BASE_RPS_PER_POOL * 2  # calm again
    assert rate(peak_start_s + 120) > BASE_RPS_PER_POOL * DAILY_FACTOR * 0.7  # the peak yesterday foretold


def test_the_storys_yesterday_holds_the_peak_a_day_before_todays_per_wall_second() -> None:
    """Placed on the wall clock (the forecaster's days are wall days), at the rate the loop reads at the speed."""
    from sandbox.scenarios import DAY_S, STORY_SURGE_START_S, story_history_rate, story_peak_wall_s

    for speed in (1.0, 2.0, 4.0):
        # 10 minutes after the start, and never before the report has had two minutes (18 minutes at 1x).
        assert story_peak_wall_s(speed) == (1080.0 if speed == 1.0 else 600.0)
        peak = story_peak_wall_s(speed) - DAY_S  # wall seconds from the start, a day ago
        assert story_history_rate(peak - 60, 2.0, speed) == 2.0 * speed
        assert story_history_rate(peak + 60, 2.0, speed) == 2.0 * speed * DAILY_FACTOR
        assert story_history_rate(peak + 1800 + 60, 2.0, speed) == 2.0 * speed
        # No surge yesterday: today's is unforeseen.
        assert story_history_rate(STORY_SURGE_START_S / speed + 60 - DAY_S, 2.0, speed) == 2.0 * speed
def test_the_headless_yesterday_holds_a_30_minute_peak_from_the_surges_onset_a_day_before() -> None:
    """`manage.py demo --headless` backfills it: the loop forecasts the peak and proposes a pre-scale."""
    from sandbox.scenarios import DAY_S, SURGE_START_S, surge_history_rate

    for speed in (2.0, 4.0):
        onset = SURGE_START_S / speed - DAY_S  # wall seconds from the start, a day ago
        assert surge_history_rate(onset - 1, 2.0, speed, 10.0) == 2.0 * speed
        assert surge_history_rate(onset, 2.0, speed, 10.0) == 2.0 * speed * 10.0
        assert surge_history_rate(onset + 1799, 2.0, speed, 10.0) == 2.0 * speed * 10.0
        assert surge_history_rate(onset + 1800, 2.0, speed, 10.0) == 2.0 * speed
        assert surge_history_rate(SURGE_START_S / speed, 2.0, speed, 10.0) == 2.0 * speed  # today is not history


