"""Headroom alone on two weeks of ServeGen, per day and per week: the figures a planner constant is fitted on.

    .venv/bin/python bench/margin_fit.py [--pool FIELD=VALUE ...]     # about 80 CPU-s a run

Week 1 is training data, week 2 held out (docs/engine.md, "Constants"). One replay of the 14 days under
`headroom` (fluid mode, the replay's defaults, ×0.05, as `bench/forecastable_case.py`), scored per day
after the usual 10-minute warm-up; each week's attainment is its days' weighted by their requests. The
capacity correction is watched at every tick (its mean and the share of ticks at its floor).
`bench/forecastable_case.py` gives the same headroom figures with the clairvoyant and the baselines.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.forecastable_case import Recording, add_case_arguments, case_from, per_day  # noqa: E402
from scaling.sim.fluid_mode import run_fluid_mode  # noqa: E402
from scaling.sim.policies.headroom import HeadroomPolicy  # noqa: E402


class Watched(Recording):
    """Headroom, with its capacity correction kept at every tick."""

    def __init__(self, inner: HeadroomPolicy) -> None:
        super().__init__(inner)
        self.corrections: list[float] = []

    def decide(self, now, observation, state) -> int:
        replicas = super().decide(now, observation, state)
        self.corrections.append(state.decide.planner.capacity_correction)
        return replicas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_arguments(parser)
    args = parser.parse_args()
    config, workload, pool = case_from(args)
    policy = Watched(HeadroomPolicy(pool, tick_s=config.tick_s or 15.0))
    started = time.process_time()
    result = run_fluid_mode(workload, config, policy, misses_by_minute=True)
    days = per_day(result, workload, config, 0)
    requests = workload.bins(86400.0).requests
    report: dict[str, object] = {"pool_overrides": args.pool, "slo_attainment": round(result.slo_attainment, 4),
                                 "gpu_hours": round(result.gpu_hours, 1)}
    for week, span in (("week_1", range(0, 7)), ("week_2", range(7, min(14, len(days))))):
        offered = sum(float(requests[d]) for d in span)
        report[week] = {
            "slo_attainment": round(sum(days[d]["slo_attainment"] * float(requests[d]) for d in span) / offered, 4),
            "gpu_hours": round(sum(days[d]["gpu_hours"] for d in span), 1),
            "worst_day": min(days[d]["slo_attainment"] for d in span),
        }
    report["per_day"] = [d["slo_attainment"] for d in days]
    corrections = np.array(policy.corrections)
    report["correction_mean"] = round(float(corrections.mean()), 3)
    report["ticks_at_correction_floor"] = round(float((corrections <= pool.correction_min + 1e-9).mean()), 3)
    report["cpu_s"] = round(time.process_time() - started, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
