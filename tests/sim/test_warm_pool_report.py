"""The warm-pool report's computation (`scaling/reports.py`): pure, on short synthetic traffic."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from scaling import reports
from scaling.reports import Prices, ReportInputError, ReportSpec, SizeResult
from scaling.sim.config import ColdStart
from scaling.sim.fluid_mode import run_fluid_mode
from scaling.sim.policies.headroom import pool_plan_for
from scaling.sim.profiles import get_profile
from scaling.sim.workload import RateTrace

from tests.sim.helpers import LatencyReadingStatic

PROFILE = get_profile("llama-3.1-8b-h100")
CAPACITY_RPS = 12.0  # per replica: a fixed plan skips the load test (a shortcut for tests)


def spec(**overrides: object) -> ReportSpec:
    base = dict(profile=PROFILE, cold_start=ColdStart(60.0, 90.0), cold_start_source="60/90 s",
                prices=Prices(4.5, 2.1, "test prices"), current_pct=40.0, sizes_pct=(0, 20, 40, 60))
    return ReportSpec(**{**base, **overrides})  # type: ignore[arg-type]


WAVE_HOURS = 3.0


def daily_wave(hours: float = WAVE_HOURS, low: float = 20.0, high: float = 120.0, period_h: float = 1.5) -> RateTrace:
    """A smooth wave between `low` and `high` req/s: busy hours and quiet ones, no sudden burst."""
    starts = np.arange(0, hours * 3600, 60.0)
    rates = low + (high - low) * (0.5 - 0.5 * np.cos(2 * np.pi * starts / (period_h * 3600)))
    return RateTrace("wave", starts, 60.0, rates)


def plan_for(report_spec: ReportSpec, workload: RateTrace):  # noqa: ANN201
    return pool_plan_for(reports._config(report_spec), workload, capacity_rps=CAPACITY_RPS)


@pytest.fixture(scope="module")
def wave_report() -> reports.Report:
    workload = daily_wave()
    report_spec = spec(peak_basis="day-peak", sizes_pct=(0, 60, 90))
    return reports.run_report(workload, report_spec, plan=plan_for(report_spec, workload))


def test_it_never_costs_less_or_serves_worse_with_a_larger_standing_floor(wave_report: reports.Report) -> None:
    rows = wave_report.rows
    assert [row.warm_pool_pct for row in rows] == [0, 40, 60, 90]  # the current 40 % is added
    hours = [row.gpu_hours for row in rows]
    attainment = [row.slo_attainment for row in rows]
    assert hours == sorted(hours) and hours[-1] > hours[0] * 1.1  # the floor really holds capacity
    assert all(later >= earlier - 0.0005 for earlier, later in zip(attainment, attainment[1:]))
    assert rows[-1].ttft_p99_ms <= rows[0].ttft_p99_ms
    assert rows[-1].mean_ready_replicas > rows[0].mean_ready_replicas


def test_the_costs_follow_the_prices_and_the_baseline(wave_report: reports.Report) -> None:
    baseline, largest = wave_report.rows[0], wave_report.rows[-1]
    assert largest.cost_on_demand_usd == pytest.approx(largest.gpu_hours * 4.5, abs=0.05)
    assert largest.cost_spot_usd == pytest.approx(largest.gpu_hours * 2.1, abs=0.05)
    extra = largest.cost_on_demand_usd - baseline.cost_on_demand_usd
    assert largest.extra_cost_pct == pytest.approx(100 * extra / baseline.cost_on_demand_usd, abs=0.05)
    months = (WAVE_HOURS * 3600 - 600) / 86_400 / 30  # the scored traffic: all but the 10-minute warm-up
    assert largest.extra_cost_usd_per_month == pytest.approx(extra / months, rel=0.001)
    assert baseline.extra_cost_pct == 0 and not baseline.flagged


def _row(pct: float, cost: float, attainment: float) -> SizeResult:
    return SizeResult(warm_pool_pct=pct, gpu_hours=cost / 4.5, cost_on_demand_usd=cost, cost_spot_usd=None,
                      ttft_p95_ms=100, ttft_p99_ms=200, e2e_p95_ms=1000, e2e_p99_ms=2000, slo_attainment=attainment,
                      requests=1000, cold_start_requests=0, worst_minute_s=None, worst_minute_misses=0,
                      mean_ready_replicas=1, max_replicas=1, replica_starts=0, meets_slo=attainment >= 0.99)


@pytest.mark.parametrize(("flag_above", "flagged"), [(25.0, [False, False, False, True]), (10.0, [False, False, True, True]),
                                                      (50.0, [False, False, False, False])])
def test_it_flags_sizes_costing_more_than_the_threshold_above_the_baseline(flag_above: float, flagged: list[bool]) -> None:
    rows = [_row(0, 100, 0.97), _row(20, 108, 0.985), _row(40, 120, 0.992), _row(60, 130, 0.995)]
    recommended = reports.assess(rows, spec(flag_above_pct=flag_above), scored_s=7 * 86_400)
    assert [row.flagged for row in rows] == flagged
    assert recommended == 40 and [row.recommended for row in rows] == [False, False, True, False]
    assert [row.current for row in rows] == [False, False, True, False]
    assert rows[3].extra_cost_pct == 30.0 and rows[3].extra_cost_usd_per_month == pytest.approx(30 / 7 * 30, abs=0.01)


def test_it_recommends_nothing_when_no_size_meets_the_objective() -> None:
    rows = [_row(0, 100, 0.95), _row(40, 120, 0.97)]
    assert reports.assess(rows, spec(), scored_s=86_400) is None
    sentence = reports.recommendation_sentence(rows, None, spec())
    assert sentence.startswith("No warm-pool size meets the SLO") and "40 %" in sentence


def test_the_json_and_csv_have_one_row_per_size(wave_report: reports.Report) -> None:
    result = json.loads(json.dumps(wave_report.as_json()))  # what is stored is plain JSON
    assert set(result) == {"period", "slo", "capacity_rps_per_replica", "flag_above_pct", "recommended_pct",
                           "recommendation", "rows", "assumptions", "worst_day", "observed_vs_replay", "wall_s",
                           "fallback", "what_if"}
    assert set(result["rows"][0]) == set(reports.CSV_COLUMNS) | {"with_fallback"}
    assert all(row["with_fallback"] is None for row in result["rows"])  # no fallback model in this spec
    assert result["fallback"] is None and result["what_if"] is None
    lines = list(csv.reader(io.StringIO(reports.rows_csv(result))))
    assert tuple(lines[0]) == reports.CSV_COLUMNS and len(lines) == 1 + len(result["rows"])
    assert [float(line[0]) for line in lines[1:]] == [row["warm_pool_pct"] for row in result["rows"]]
    day = result["worst_day"]
    assert len(day["demand_rps"]) == len(day["current"]["ready_capacity_rps"]) == day["minutes"] <= 1440
    assert any("Cold starts: 60/90 s" in line for line in result["assumptions"])
    assert any(line.startswith("Not modelled:") for line in result["assumptions"])


def test_the_worst_minute_and_cold_start_misses_come_from_the_replay() -> None:
    """A step from 10 to 100 req/s: the minutes after it miss while replicas load."""
    starts = np.arange(0, 2 * 3600, 60.0)
    rates = np.where(starts < 5400, 10.0, 100.0)
    workload = RateTrace("step", starts, 60.0, rates)
    report_spec = spec(sizes_pct=(0,), current_pct=0)
    report = reports.run_report(workload, report_spec, plan=plan_for(report_spec, workload))
    row = report.rows[0]
    assert row.worst_minute_s is not None and 5400 - 600 <= row.worst_minute_s <= 5400 - 600 + 300
    assert row.worst_minute_misses > 0 and 0 < row.cold_start_requests <= round((1 - row.slo_attainment) * row.requests) + 1


def test_fluid_misses_by_minute_add_up_to_the_attainment() -> None:
    workload = daily_wave(hours=1.0, high=60.0)
    config = reports._config(spec())
    result = run_fluid_mode(workload, config, LatencyReadingStatic(4), misses_by_minute=True)
    missed = sum((result.misses_by_minute or {}).values())
    assert missed > 0 and min(result.misses_by_minute or {}) >= 10  # none in the warm-up's 10 minutes
    assert missed == pytest.approx((1 - result.slo_attainment) * result.requests, rel=0.02, abs=5)


def test_stored_rates_become_minute_windows_with_short_holes_filled() -> None:
    times = [0, 30, 60, 90, 300, 330]  # no sample in minutes 2-4: filled between their neighbours
    workload = reports.workload_from_rates(times, [10, 20, 30, 30, 60, None], 0, 360)
    assert workload.window_len_s == 60 and list(workload.rate_rps) == [15, 30, 37.5, 45, 52.5, 60]


def test_a_long_gap_in_the_history_is_an_error_naming_it() -> None:
    times = list(range(0, 3600, 15)) + list(range(3 * 3600, 4 * 3600, 15))
    with pytest.raises(ReportInputError, match=r"gap of 2.0 h from 1970-01-01 01:00 UTC to 1970-01-01 03:00 UTC"):
        reports.workload_from_rates(times, [5.0] * len(times), 0, 4 * 3600)


def test_no_history_is_an_error() -> None:
    with pytest.raises(ReportInputError, match="no request-rate history"):
        reports.workload_from_rates([], [], 0, 3600)
    with pytest.raises(ReportInputError, match="no request-rate history"):
        reports.workload_from_rates([10, 20], [None, None], 0, 3600)


@pytest.mark.parametrize(("text", "message"), [("0,ten", "'ten' is not a number"), ("0,120", "120 is outside 0-100"),
                                               ("-5", "-5 is outside")])
def test_bad_sizes_are_named(text: str, message: str) -> None:
    with pytest.raises(ReportInputError, match=message):
        reports.parse_sizes(text)


def test_the_cold_starts_come_from_measurements_when_there_are_enough() -> None:
    measured, source = reports.cold_start_from([40, 50, 60, 70, 200], 60, 90, PROFILE)
    assert measured.p50_s == 60 and measured.p95_s == pytest.approx(174) and "5 measured" in source
    configured, source = reports.cold_start_from([40], 30, 45, PROFILE)
    assert (configured.p50_s, configured.p95_s) == (30, 45) and "configured" in source
    default, source = reports.cold_start_from([], None, None, PROFILE)
    assert (default.p50_s, default.p95_s) == (PROFILE.cold_start_p50_s, PROFILE.cold_start_p95_s) and "profile" in source


def test_traffic_too_short_for_the_warm_up_is_refused() -> None:
    workload = RateTrace("short", np.arange(0, 600, 60.0), 60.0, np.full(10, 5.0))
    with pytest.raises(ReportInputError, match="too short"):
        reports.run_report(workload, spec(), plan=plan_for(spec(), workload))


def test_the_replay_is_compared_with_what_the_pool_recorded(wave_report: reports.Report) -> None:
    current = wave_report.series[40.0]
    recorded = reports.Recorded(ttft_p95_s=(0.2, 0.3, 0.4), ready_replicas=(4, 5, 6))
    rows = wave_report.rows
    compared = reports.observed_vs_replay(recorded, rows, current, spec(peak_basis="day-peak"))
    assert compared is not None
    assert compared["ready_replicas_mean"] == {"observed": 5.0, "predicted": rows[1].mean_ready_replicas}
    assert compared["ttft_p95_ms_median"]["observed"] == 300.0 and compared["ready_replicas_max"]["observed"] == 6
    assert compared["ttft_p95_ms_median"]["predicted"] is not None and "ready replicas" in compared["summary"]


def _replayed(report: reports.Report) -> tuple[dict, dict]:
    result = report.as_json()
    result.pop("wall_s")
    series = {size: [getattr(minutes, name).tobytes() for name in reports.MinuteSeries.__dataclass_fields__]
              for size, minutes in report.series.items()}
    return result, series


def test_the_sizes_read_one_recording_of_the_forecasts_and_decide_as_each_would_alone(monkeypatch) -> None:  # noqa: ANN001
    """Every size replays the same arrivals, so the first size's forecasts serve them all: computed once a
    tick instead of once a tick per size, and every size's rows and minutes are the same to the bit."""
    from scaling.engine import decide

    made: list[float] = []
    real_forecasts = decide.forecasts

    def counted(history, pool, now_s, rate_now, state):  # noqa: ANN001, ANN202
        made.append(now_s)
        return real_forecasts(history, pool, now_s, rate_now, state)

    monkeypatch.setattr(decide, "forecasts", counted)
    workload = daily_wave(hours=2.0, period_h=0.75)
    report_spec = spec(peak_basis="day-peak", sizes_pct=(0, 30, 60, 90))
    plan = plan_for(report_spec, workload)
    alone = reports.run_report(workload, report_spec, plan=plan, share_forecasts=False)
    ticks = len(made) // 5  # five sizes (the four asked and the current 40 %), a tick every 15 s and at 0
    assert ticks == 481 and sorted(made) == sorted(made[:ticks] * 5)
    made.clear()
    shared = reports.run_report(workload, report_spec, plan=plan)
    assert len(made) == ticks  # one size's worth
    assert _replayed(shared) == _replayed(alone)
    rows = shared.rows
    assert rows[-1].gpu_hours > rows[0].gpu_hours  # the sizes differ: the floors bind, on shared forecasts


def test_a_replay_of_other_arrivals_makes_its_own_forecasts() -> None:
    """Forecasts recorded on one traffic are not read by a replay of another: it is replayed with its own."""
    from scaling.sim.policies.headroom import SharedForecasts

    workload, louder = daily_wave(hours=1.0), daily_wave(hours=1.0, high=130.0)
    report_spec = spec(peak_basis="day-peak")
    plan, config = plan_for(report_spec, workload), reports._config(report_spec)
    recorded = SharedForecasts()
    reports._replay(workload, config, plan, 40.0, "day-peak", forecasts=recorded)
    recorded.recording = False
    assert len(recorded.ticks) == 241  # a tick every 15 s and the one at 0
    read = reports._replay(louder, config, plan, 40.0, "day-peak", forecasts=recorded)
    own = reports._replay(louder, config, plan, 40.0, "day-peak")
    assert read.samples == own.samples and read.gpu_hours == own.gpu_hours



def test_the_sizes_replay_together_as_each_would_alone(monkeypatch) -> None:  # noqa: ANN001
    """Small floors of a pool that never runs that low decide as the first size does at every tick: they
    take its outcome. Larger ones are forked where they first decide otherwise and replayed from there.
    The report is the same to the bit as replaying every size alone, in one process or in two."""
    forked: list[float] = []
    real = reports.resume_fluid_mode

    def counted(workload, config, fork, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        forked.append(fork.policy.share)
        assert fork.state is not None and fork.state["t"] > 0  # from where it first differed, not the start
        return real(workload, config, fork, *args, **kwargs)

    monkeypatch.setattr(reports, "resume_fluid_mode", counted)
    workload = daily_wave(hours=2.0, period_h=0.75)  # 20 to 120 req/s at 12 req/s a replica: never under 2
    report_spec = spec(peak_basis="day-peak", sizes_pct=(0, 10, 20, 60, 90), current_pct=40.0)
    plan = plan_for(report_spec, workload)
    together = reports.run_report(workload, report_spec, plan=plan)
    assert forked == [0.4, 0.6, 0.9]  # 10 % and 20 %: a floor of one replica or two, never binding
    alone = reports.run_report(workload, report_spec, plan=plan, share_forecasts=False)
    assert _replayed(together) == _replayed(alone)
    monkeypatch.undo()
    in_two = reports.run_report(workload, report_spec, plan=plan, workers=2)
    assert _replayed(in_two) == _replayed(alone)
    hours = [row.gpu_hours for row in together.rows]
    assert hours[0] == hours[1] == hours[2] < hours[3] < hours[-1]
