"""bench/forecastable_case.py: its second scoring replays headroom's recorded decisions, and its per-day figures."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench.forecastable_case import DAY_S, Recording, Replayed, per_day
from scaling.sim.config import SimConfig
from scaling.sim.fluid_mode import run_fluid_mode
from scaling.sim.policies.hpa_util import HpaUtilPolicy
from scaling.sim.workload import RateTrace


def _two_days() -> RateTrace:
    hours = np.arange(48)
    rate = 20.0 + 15.0 * np.sin(2 * np.pi * hours / 24) ** 2  # a daily peak, as ServeGen has
    return RateTrace("two-days", hours * 3600.0, 3600.0, rate, cv=np.full(48, 1.5))


def test_recorded_decisions_replay_the_same_run_under_another_warm_up():
    workload, config = _two_days(), SimConfig(warmup_s=600.0)
    recording = Recording(HpaUtilPolicy(1, 40, target_utilisation=0.3))
    first = run_fluid_mode(workload, config, recording, misses_by_minute=True)
    replayed = Replayed(recording.decisions, "hpa-util", recording.tick_s)
    same = run_fluid_mode(workload, config, replayed)
    assert (same.gpu_hours, same.cold_starts, same.slo_attainment) == (first.gpu_hours, first.cold_starts,
                                                                       first.slo_attainment)
    day_two = run_fluid_mode(workload, dataclasses.replace(config, warmup_s=DAY_S), replayed, misses_by_minute=True)
    # Day 2 alone holds what the two-day run held on day 2, and costs less than the whole run.
    held = per_day(first, workload, config, 0)
    alone = per_day(day_two, workload, dataclasses.replace(config, warmup_s=DAY_S), 1)
    assert [d["day"] for d in alone] == [2]
    assert alone[0]["gpu_hours"] == pytest.approx(held[1]["gpu_hours"])
    assert day_two.gpu_hours < first.gpu_hours
    assert sum(d["gpu_hours"] for d in held) == pytest.approx(first.gpu_hours, rel=0.01)
    # A single scored day's attainment is the run's.
    assert alone[0]["slo_attainment"] == pytest.approx(day_two.slo_attainment, abs=2e-4)
