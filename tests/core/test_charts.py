"""The chart module: round ticks, clock times, units, the SLO line, the forecast band, event markers,
gaps drawn as gaps, a title and a legend with the latest values. Pure: no database."""
from __future__ import annotations

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from controlplane.charts import (
    Band,
    Line,
    Marker,
    Series,
    Threshold,
    format_value,
    line_chart,
    nice_step,
    time_chart,
    time_ticks,
    y_ticks,
)

T0 = datetime.fromisoformat("2026-12-01T02:03:00+00:00")


def every_15s(values: list[float | None], start: datetime = T0) -> list[tuple[datetime, float | None]]:
    return [(start + timedelta(seconds=15 * i), value) for i, value in enumerate(values)]


@pytest.mark.parametrize(("span", "step"), [(7.3, 2), (1.0, 0.2), (0.013, 0.005), (180, 50), (1, 0.2), (2500, 500)])
def test_it_picks_round_steps(span: float, step: float) -> None:
    assert nice_step(span) == pytest.approx(step)


def test_ticks_cover_the_data() -> None:
    assert y_ticks(0, 7.3) == [0, 2, 4, 6, 8]
    assert y_ticks(0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]


@pytest.mark.parametrize(("minutes", "step_s", "first"), [
    (5, 60, "02:03"), (30, 300, "02:05"), (90, 900, "02:15"), (300, 3600, "03:00"), (1, 15, "02:03"),
])
def test_time_ticks_fall_on_round_clock_times(minutes: int, step_s: int, first: str) -> None:
    ticks, step = time_ticks(T0, T0 + timedelta(minutes=minutes), ZoneInfo("UTC"))
    assert step == step_s and ticks[0].strftime("%H:%M") == first and len(ticks) <= 7


def test_time_ticks_are_in_the_clusters_time_zone() -> None:
    ticks, _ = time_ticks(T0, T0 + timedelta(minutes=30), ZoneInfo("Europe/Berlin"))
    assert ticks[0].strftime("%H:%M") == "03:05"


def _clock(ticks: list[datetime]) -> list[tuple[str, str]]:
    return [(at.strftime("%H:%M"), at.astimezone(ZoneInfo("UTC")).strftime("%H:%MZ")) for at in ticks]


def test_time_ticks_skip_the_hour_the_clocks_skip() -> None:
    # New York, 2026-03-08: 01:59 EST is followed by 03:00 EDT (07:00Z); no tick reads 02:00.
    start = datetime.fromisoformat("2026-03-08T05:00:00+00:00")
    ticks, _ = time_ticks(start, start + timedelta(hours=4), ZoneInfo("America/New_York"))
    assert _clock(ticks) == [("00:00", "05:00Z"), ("01:00", "06:00Z"), ("03:00", "07:00Z"), ("04:00", "08:00Z"),
                             ("05:00", "09:00Z")]


def test_time_ticks_mark_both_passes_of_the_hour_the_clocks_repeat() -> None:
    # New York, 2026-11-01: 01:00-02:00 comes twice (EDT from 05:00Z, EST from 06:00Z).
    start = datetime.fromisoformat("2026-11-01T05:20:00+00:00")
    ticks, _ = time_ticks(start, start + timedelta(minutes=80), ZoneInfo("America/New_York"))
    assert _clock(ticks) == [("01:30", "05:30Z"), ("01:45", "05:45Z"), ("01:00", "06:00Z"), ("01:15", "06:15Z"),
                             ("01:30", "06:30Z")]


@pytest.mark.parametrize(("value", "unit", "step", "text"), [
    (1.5, "s", 0.5, "1.5 s"), (0.25, "s", 0.25, "0.25 s"), (200, "req/s", 50, "200 req/s"), (1.8234, "s", None, "1.82 s"),
    (12.5, "%", None, "12.5 %"), (4, "replicas", 1, "4 replicas"), (1234.5, "req", None, "1,234 req"),
])
def test_values_carry_their_unit(value: float, unit: str, step: float | None, text: str) -> None:
    assert format_value(value, unit, step) == text


def test_a_latency_chart_has_title_clock_axis_units_slo_line_and_legend() -> None:
    ttft = every_15s([0.4, 0.5, 1.6, 1.8, 1.2])
    html = time_chart("Latency p95 against the SLO", "s", [Line("time to first token p95", ttft, "blue")],
                      thresholds=[Threshold("TTFT p95 SLO", 1.0)], start=T0, end=T0 + timedelta(minutes=2))
    assert '<figcaption class="chart-title">Latency p95 against the SLO</figcaption>' in html
    assert 'aria-label="Latency p95 against the SLO"' in html
    assert ">02:03:00<" in html and ">02:04:00<" in html and ">02:05:00<" in html  # clock times on the time axis
    assert ">0.0 s<" in html and ">2.0 s<" in html  # y ticks with the unit
    assert 'class="threshold tone-red"' in html
    assert "time to first token p95</span> <b>1.2 s</b>" in html  # the latest value in the legend
    assert "TTFT p95 SLO</span> 1 s" in html
    assert "time in UTC" in html


def test_unknown_values_and_missing_ticks_are_gaps_not_zero() -> None:
    points = every_15s([1.0, 2.0, None, 3.0, 4.0]) + [(T0 + timedelta(minutes=10), 5.0),
                                                        (T0 + timedelta(minutes=10, seconds=15), 6.0)]
    html = time_chart("Queue", "req", [Line("waiting", points, "orange")])
    assert html.count("<polyline") == 3  # split at the unknown value and at the 9-minute silence
    assert 'cy="' not in html  # no lone dot: every segment has two points


def test_a_lone_reading_between_gaps_is_a_dot() -> None:
    html = time_chart("Queue", "req", [Line("waiting", every_15s([None, 3.0, None]), "orange")])
    assert html.count("<polyline") == 0 and html.count("<circle") == 1


def test_the_forecast_band_and_markers_are_drawn_and_listed() -> None:
    ready = every_15s([2, 2, 4, 6])
    band = Band("forecast (expected to p90)", [(T0 + timedelta(seconds=45), 5, 8), (T0 + timedelta(minutes=30), 5, 8)])
    marks = [Marker(T0 + timedelta(seconds=20), "Proposal #3 approved (bob via slack)", "blue"),
             Marker(T0 + timedelta(seconds=40), "Proposal #3 replicas ready", "green"),
             Marker(T0 - timedelta(hours=1), "long before: not on this chart")]
    html = time_chart("Replicas", "replicas", [Line("ready", ready, "green")], bands=[band], markers=marks,
                      end=T0 + timedelta(minutes=30))
    assert html.count('<polygon class="band tone-orange"') == 1
    assert html.count('class="marker tone-') == 2
    assert re.search(r"<li><span class=\"marker-key tone-blue\">1</span> 02:03:20 Proposal #3 approved \(bob via slack\)</li>", html)
    assert "long before" not in html
    assert "forecast (expected to p90)" in html


def test_labels_are_escaped() -> None:
    html = time_chart("<script>", "s", [Line("<b>x</b>", every_15s([1, 2]))], markers=[Marker(T0, "<img>")])
    assert "<script>" not in html and "<b>x</b>" not in html and "<img>" not in html


def test_no_data_says_so_under_its_title() -> None:
    html = time_chart("Latency", "s", [Line("ttft", every_15s([None, None]))])
    assert "Latency" in html and "No data to chart yet." in html and "<svg" not in html


def test_step_charts_still_draw_with_a_labelled_axis_and_gaps() -> None:
    html = line_chart([Series("expected req/s", [1, 2, None, 4, 5], "expected")], y_label="last 5 min", title="Forecast")
    assert html.count("<polyline") == 2 and "Forecast" in html and "last 5 min" in html and ">0<" in html
    assert "No data" in line_chart([Series("x", [None], "expected")])
