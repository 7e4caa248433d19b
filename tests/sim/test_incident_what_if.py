"""An incident's what-if (`scaling/reports.py` `would_have_met`, `what_if`): pure, on a short surge."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from scaling import reports
from scaling.reports import FallbackSpec, Prices, ReportSpec
from scaling.sim.config import ColdStart
from scaling.sim.policies.headroom import pool_plan_for
from scaling.sim.profiles import get_profile
from scaling.sim.workload import RateTrace

PROFILE = get_profile("llama-3.1-8b-h100")
FALLBACK = get_profile("llama-3.2-1b-l4")
CAPACITY_RPS = 12.0  # fixed plans skip the load tests


@pytest.mark.parametrize(("missed", "alternative", "expected"), [
    ([5, 0, 3], [0, 0, 0], (8, 8, 0)),  # every miss saved
    ([5, 0, 3], [5, 0, 3], (8, 0, 0)),  # the same misses: nobody saved
    ([5, 0, 3], [2, 4, 3], (8, 3, 4)),  # 3 saved in minute 0; 4 others missed in minute 1, not netted off
    ([5, 2], [1], (7, 6, 0)),  # a shorter series: its missing minutes missed nothing
    ([], [2], (0, 0, 2)),
])
def test_who_missed_and_who_would_have_met(missed: list[int], alternative: list[int],
                                           expected: tuple[int, int, int]) -> None:
    assert reports.would_have_met(np.array(missed, float), np.array(alternative, float)) == expected


def test_the_line_says_how_many_of_how_many_for_how_much() -> None:
    line = reports.what_if_line(30.0, False, 530, 412, 0, 1234.4)
    assert line == ("With a warm pool of 30 % of the expected peak, 412 of the 530 requests that missed the SLO "
                    "would have met it, for $1,234/month more.")
    line = reports.what_if_line(0.0, True, 530, 500, 7, -20.0, "Llama-1B")
    assert "and the fallback model Llama-1B" in line and "$20/month less" in line and "(7 others" in line
    assert "at no extra cost" in reports.what_if_line(10.0, False, 5, 0, 0, 0.2)


def surge() -> RateTrace:
    """30 quiet minutes (the warm-up and the calm before), then 20 minutes at eight times the rate."""
    rates = np.r_[np.full(30, 3.0), np.full(20, 24.0), np.full(10, 3.0)]
    return RateTrace("surge", np.arange(len(rates)) * 60.0, 60.0, rates)


@pytest.fixture(scope="module")
def incident_report() -> reports.Report:
    workload = surge()
    spec = ReportSpec(profile=PROFILE, cold_start=ColdStart(120.0, 150.0), cold_start_source="120/150 s",
                      prices=Prices(4.5, None, "test prices"), current_pct=0.0, sizes_pct=(0, 50, 100),
                      peak_basis="day-peak", day_peak_seed_rps=24.0, mode="request", warmup_s=1200.0,
                      fallback=FallbackSpec(FALLBACK, replicas=2), what_if=True)
    plan = pool_plan_for(reports._config(spec), workload, capacity_rps=CAPACITY_RPS)
    return reports.run_report(workload, spec, plan=plan)  # the fallback's capacity is load-tested (about 1 s)


def test_the_incident_what_if_compares_every_setting_with_what_ran(incident_report: reports.Report) -> None:
    what_if = incident_report.what_if
    ran = what_if["ran"]
    assert ran == {**ran, "warm_pool_pct": 0.0, "with_fallback": True}  # the policy is live: it ran with the fallback
    current = next(row for row in incident_report.rows if row.current)
    assert ran["missed"] == current.with_fallback["misses"] > 0  # the surge outran cold starts
    keys = {(a["warm_pool_pct"], a["with_fallback"]) for a in what_if["alternatives"]}
    assert keys == {(0.0, False), (50.0, False), (50.0, True), (100.0, False), (100.0, True)}
    for alternative in what_if["alternatives"]:
        assert alternative["missed"] == ran["missed"]
        assert 0 <= alternative["would_have_met"] <= ran["missed"]
        assert alternative["line"].startswith("With a warm pool of")
    # A standing floor of the day's peak holds the surge's replicas: it saves most of the misses.
    full = next(a for a in what_if["alternatives"] if a["warm_pool_pct"] == 100.0 and not a["with_fallback"])
    assert full["would_have_met"] > ran["missed"] // 2
    # Without the fallback, the same warm pool misses more than what ran (the fallback took overflow).
    bare = next(a for a in what_if["alternatives"] if a["warm_pool_pct"] == 0.0 and not a["with_fallback"])
    assert bare["newly_missed"] > 0
    assert what_if["best"]["would_have_met"] - what_if["best"]["newly_missed"] == max(
        a["would_have_met"] - a["newly_missed"] for a in what_if["alternatives"])
    assert what_if["summary"].startswith(f"In the replay of the incident, {ran['missed']:,} of")


def test_the_fallback_column_fills_each_size(incident_report: reports.Report) -> None:
    assert incident_report.fallback["replayed"] and incident_report.fallback["profile"] == FALLBACK.name
    for row in incident_report.rows:
        cells = row.with_fallback
        assert cells is not None and 0.0 <= cells["fallback_share"] <= 1.0
        # Both pools are billed: the fallback's two warm replicas cost on top of the primary's.
        assert cells["fallback_gpu_hours"] > 0 and cells["gpu_hours"] > cells["fallback_gpu_hours"]
    assert any(row.with_fallback["fallback_share"] > 0 for row in incident_report.rows)
    assert any("Fallback: llama-3.2-1b-l4" in line for line in incident_report.assumptions)
    lines = list(csv.reader(io.StringIO(reports.rows_csv(json.loads(json.dumps(incident_report.as_json()))))))
    assert tuple(lines[0]) == reports.CSV_COLUMNS + reports.FALLBACK_CSV_COLUMNS
    share = lines[0].index("fallback_fallback_share")
    assert [float(line[share]) for line in lines[1:]] == [row.with_fallback["fallback_share"] for row in incident_report.rows]


def test_a_long_trace_leaves_the_fallback_column_empty_and_says_why() -> None:
    workload = surge()
    spec = ReportSpec(profile=PROFILE, cold_start=ColdStart(60.0, 90.0), cold_start_source="60/90 s",
                      prices=Prices(4.5, None, "test prices"), current_pct=0.0, sizes_pct=(0,),
                      fallback=FallbackSpec(FALLBACK, replicas=2), fallback_max_requests=1000)
    plan = pool_plan_for(reports._config(spec), workload, capacity_rps=CAPACITY_RPS)
    report = reports.run_report(workload, spec, plan=plan, fallback_capacity_rps=20.0)
    assert report.fallback["replayed"] is False and "more than the 1,000" in report.fallback["why_not"]
    assert all(row.with_fallback is None for row in report.rows) and report.what_if is None
