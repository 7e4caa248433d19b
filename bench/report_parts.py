"""Where a warm-pool report's CPU time goes, per size and per part (issue 15 item 4).

    DEBUG=1 PYTHONPATH=. .venv/bin/python bench/report_parts.py [--days 7] [--size 40]

The inputs are the CLI's (docs/benchmarks.md, "Warm-pool reports"): the demo pool
`gpu-us-east/chat-llama-8b` after `seed_demo` (min 1, max 40 replicas), ServeGen m-small x0.066,
`--peak day-peak`. It load-tests once, replays the 0 % size (which records the forecasts) and then one
size that reads them, and prints the CPU seconds (`time.process_time()`) of each and of the parts of
the reading one: the decide step (with the planner inside it), fluid mode's per-tick TTFT percentiles,
the scoring at the end, and fluid mode's own stepping (what is left). Then, as the report replays
them (`reports.replay_sizes`), the sizes of `--together` in one replay: the CPU of the first size's
replay with the others deciding alongside it, and for each other size where it was forked (the share
of the replay it shares with the first size) and the CPU of replaying the rest of it.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

from controlplane.models import Pool  # noqa: E402
from scaling import report_service, reports  # noqa: E402
from scaling.engine import planner  # noqa: E402
from scaling.models import WarmPoolReport  # noqa: E402
from scaling.sim import fluid_mode  # noqa: E402
from scaling.sim.policies import headroom  # noqa: E402

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "servegen" / \
    "servegen_language_m-small_aggregate_rate.csv"
PARTS = (  # (owner, attribute, label): nested parts are counted inside their callers too
    (reports.DayPeakFloor, "decide", "decide step, all of it"),
    (planner, "plan", "  the planner (inside it)"),
    (headroom.SharedForecasts, "__call__", "  the shared forecasts (inside it)"),
    (fluid_mode, "_waits", "TTFT waits (every tick's, and the scoring's)"),
    (fluid_mode, "paired_quantiles", "TTFT quantiles (every tick's)"),
    (fluid_mode, "_score", "  scoring at the end (its waits counted above)"),
    (fluid_mode, "_misses_by_minute", "  misses by minute (its waits counted above)"),
    (reports, "_minute_series", "minute series"),
)


def _timed(owner: object, name: str, label: str, spent: collections.Counter) -> None:
    inner = getattr(owner, name)

    def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        started = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - started

    setattr(owner, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--size", type=float, default=40.0, help="the reading size (percent)")
    parser.add_argument("--together", default="0,10,20,30,40,50,60,70", help="the sizes replayed together")
    parser.add_argument("--seed-peak", type=float, default=0.0,
                        help="the day before's peak in req/s (as an incident's what-if has it): with the week's own "
                             "peak every size's floor binds from the first tick, the worst case for replaying together")
    args = parser.parse_args()
    pool = Pool.objects.select_related("cluster").get(name="chat-llama-8b", cluster__name="gpu-us-east")
    report = WarmPoolReport(pool=pool, days=args.days, sizes_pct=[0, args.size], trace_name=TRACE.name,
                            trace_data=TRACE.read_bytes(), rate_scale=0.066, peak_basis="day-peak")
    inputs = report_service.inputs_for(report)
    workload, spec = inputs.workload, dataclasses.replace(inputs.spec, day_peak_seed_rps=args.seed_peak)
    started = time.process_time()
    plan = headroom.pool_plan_for(reports._config(spec), workload)
    out = {"load_test_cpu_s": round(time.process_time() - started, 2)}
    shared = headroom.SharedForecasts()
    started = time.process_time()
    reports._replay_size((workload, spec, plan, 0.0, None, shared))
    out["recording_size_cpu_s"] = round(time.process_time() - started, 2)
    shared.recording = False
    spent: collections.Counter = collections.Counter()
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in PARTS]
    for owner, name, label in PARTS:
        _timed(owner, name, label, spent)
    started = time.process_time()
    reports._replay_size((workload, spec, plan, args.size, None, shared))
    total = time.process_time() - started
    top = sum(value for label, value in spent.items() if not label.startswith("  "))
    out["reading_size_cpu_s"] = round(total, 2)
    out["reading_size_parts_cpu_s"] = {**{label.strip(): round(value, 2) for label, value in spent.items()},
                                       "fluid mode's stepping and the rest": round(total - top, 2)}
    out["ticks"] = len(shared.ticks)
    for owner, name, original in originals:  # unwrapped: the together replay is timed as the report runs it
        setattr(owner, name, original)
    sizes = reports.parse_sizes(args.together)
    started_all = started = time.process_time()
    _, jobs = reports.replay_sizes(workload, spec, plan, sizes)
    together: dict[str, object] = {"first_with_the_others_deciding_cpu_s": round(time.process_time() - started, 2)}
    steps = len(workload.bins(spec.fluid_step_s).requests)
    for size, job in zip(sizes[1:], jobs):
        if job is None:
            together[f"{size:g} %"] = "decided alike throughout: the first size's outcome"
            continue
        fork = job[4]
        started = time.process_time()
        reports._resume_size(job)
        together[f"{size:g} %"] = {"shared_share": round(fork.state["t"] / steps, 3) if fork.state else 0.0,
                                   "rest_cpu_s": round(time.process_time() - started, 2)}
    together["total_cpu_s"] = round(time.process_time() - started_all, 2)
    out["together"] = together
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
