"""The warm-pool report's recommendation and its use of worker processes (pure: no database)."""
from __future__ import annotations

import concurrent.futures

import pytest

from scaling import reports
from tests.sim.test_warm_pool_report import _row, daily_wave, plan_for, spec


def test_it_recommends_the_cheapest_size_that_meets_the_objective() -> None:
    """60 % costs less than 0 % and serves better (a floor that spares an over-ordered scale-up, docs/reports.md):
    recommending 0 % beside it would contradict the table."""
    rows = [_row(0, 100.0, 0.9951), _row(20, 100.0, 0.9951), _row(40, 100.0, 0.9951), _row(60, 99.7, 0.9952),
            _row(100, 108.2, 0.9955)]
    recommended = reports.assess(rows, spec(), scored_s=3600)
    assert recommended == 60 and [row.recommended for row in rows] == [False, False, False, True, False]
    assert "the cheapest size that meets" in reports.recommendation_sentence(rows, recommended, spec())


def test_the_workers_asked_for_start_no_more_processes_than_replays_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork-started process pool launches all of its processes at once: `--workers 500` must not fork 500
    copies of the process for a handful of replays."""
    asked: list[int] = []

    class Recording(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, max_workers: int | None = None, **options: object) -> None:
            asked.append(max_workers or 0)
            super().__init__(max_workers=min(max_workers or 1, 4), **options)  # type: ignore[arg-type]

    monkeypatch.setattr(reports, "ProcessPoolExecutor", Recording)
    workload = daily_wave()
    report_spec = spec(peak_basis="day-peak", sizes_pct=(0, 60, 90))
    reports.run_report(workload, report_spec, plan=plan_for(report_spec, workload), workers=500)
    assert asked and asked[0] <= len(report_spec.all_sizes_pct()), asked
