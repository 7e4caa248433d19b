"""The busy-share term's onset, fitted on the training side only: the suite's `code` cases and ServeGen's week 1.

    .venv/bin/python bench/onset_fit.py [--onsets 1.2,1.5,2,3] [--busy-share-target 0.3]
        [--reactive-max-percent P] [--pool FIELD=VALUE ...] [--json]      # about 45 CPU-s an onset

For each onset (`PoolPlan.busy_share_onset`), headroom alone with the busy share term on:
- the five `code` cases at seed offset 0 (request mode, as `bench/headroom_suite.py` replays them), each
  against the tuned baselines' attainment saved in `bench/results/issue12_suite_seed0_session12.jsonl` and
  the smallest static pool reaching headroom's attainment (dominated: 20 % fewer GPU-hours);
- ServeGen's first week (fluid mode, x0.05, as `bench/forecastable_case.py`), each day's attainment and its
  GPU-hours over the clairvoyant's of that day (saved in
  `bench/results/issue12_forecastable_servegen_session17.json`: the bound does not depend on headroom).

The rule (docs/engine.md, `busy_share_onset`), fixed before judging: every `code` case at least the tuned
baselines' attainment (counting nothing past the objective) and none dominated, every day of week 1 at 0.99
within 1.25x the clairvoyant's GPU-hours; then the fewest GPU-hours (week 1's, then the `code` cases'), ties
to the smaller onset, which sees more onsets. The held-out side (the `conv` cases, seed offset 10, week 2,
Mooncake) is judged with the scripts that judge every setting.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.forecastable_case import add_case_arguments, case_from, per_day  # noqa: E402
from bench.headroom_suite import (CASES, add_guardrail_argument, is_training, parse_overrides,  # noqa: E402
                                  static_dominates, with_overrides, workload_for)
from scaling.sim.config import SimConfig  # noqa: E402
from scaling.sim.fluid_mode import run_fluid_mode  # noqa: E402
from scaling.sim.policies import PolicyContext  # noqa: E402
from scaling.sim.policies.headroom import HeadroomPolicy, pool_plan_for  # noqa: E402
from scaling.sim.policies.static import StaticPolicy  # noqa: E402
from scaling.sim.profiles import DEFAULT_PROFILE, get_profile  # noqa: E402
from scaling.sim.request_mode import run_request_mode  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BASELINES = RESULTS / "issue12_suite_seed0_session12.jsonl"
CLAIRVOYANT = RESULTS / "issue12_forecastable_servegen_session17.json"
TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
OBJECTIVE = 0.99
DAY_RATIO = 1.25
WEEK_1 = range(1, 8)


def onsets(text: str) -> list[float]:
    """`--onsets`: comma-separated multiples within the constant's bounds, 0-10 (0: every tick)."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or any(not 0 <= v <= 10 for v in values):
        raise argparse.ArgumentTypeError(f"expected onsets from 0 to 10, got {text!r}")
    return values


def code_cases(onset: float, args: argparse.Namespace, baselines: dict[str, dict]) -> list[dict]:
    config = SimConfig.for_profile(get_profile(DEFAULT_PROFILE), slo_ttft_s=1.0, warmup_s=600.0)
    rows = []
    for label, file_name, scale, surge_spec, start_share, seed, prompts in CASES:
        if not is_training(label):
            continue
        workload = workload_for(Path(args.traces), file_name, scale, surge_spec, start_share, seed, prompts)
        pool = dataclasses.replace(with_overrides(pool_plan_for(config, workload), parse_overrides(args.pool)),
                                   busy_share_target=args.busy_share_target, busy_share_onset=onset)
        result = run_request_mode(workload, config, HeadroomPolicy(pool, tick_s=config.tick_s or 15.0,
                                                                   reactive_max_percent=args.reactive_max_percent))
        context = PolicyContext(workload, config, lambda policy, w=workload: run_request_mode(w, config, policy))
        size = context.smallest_static(result.slo_attainment)
        static = run_request_mode(workload, config, StaticPolicy(size))
        best = max(baselines[label][name]["slo_attainment"] for name in ("keda-queue", "hpa-util"))
        rows.append({"case": label, "slo_attainment": result.slo_attainment, "gpu_hours": round(result.gpu_hours, 2),
                     "below_a_baseline": result.slo_attainment < min(best, OBJECTIVE),
                     "dominated": static_dominates(static, result)})
    return rows


def week_1(onset: float, args: argparse.Namespace, clairvoyant_days: dict[int, float]) -> dict[str, object]:
    config, workload, pool = case_from(args)
    pool = dataclasses.replace(pool, busy_share_target=args.busy_share_target, busy_share_onset=onset)
    result = run_fluid_mode(workload, config, HeadroomPolicy(pool, tick_s=config.tick_s or 15.0,
                                                             reactive_max_percent=args.reactive_max_percent),
                            misses_by_minute=True)
    days = [d for d in per_day(result, workload, config, 0) if d["day"] in WEEK_1]
    gpu_hours = sum(d["gpu_hours"] for d in days)
    return {"worst_day": min(d["slo_attainment"] for d in days),
            "worst_day_ratio": round(max(d["gpu_hours"] / clairvoyant_days[d["day"]] for d in days), 3),
            "gpu_hours": round(gpu_hours, 1),
            "over_clairvoyant": round(gpu_hours / sum(clairvoyant_days[d] for d in WEEK_1), 3)}


def passes(code: list[dict], week: dict[str, object]) -> bool:
    """The rule's bar: no `code` case below a baseline or dominated, every day of week 1 at the objective
    within 1.25x the clairvoyant's GPU-hours."""
    return (not any(r["below_a_baseline"] or r["dominated"] for r in code)
            and week["worst_day"] >= OBJECTIVE and week["worst_day_ratio"] <= DAY_RATIO)


def chosen(fits: list[dict]) -> dict | None:
    """Of the onsets that pass, the fewest GPU-hours (week 1's, then the code cases'), ties to the smaller."""
    return min((f for f in fits if f["passes"]),
               key=lambda f: (f["week_1"]["gpu_hours"], f["code_gpu_hours"], f["onset"]), default=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onsets", type=onsets, default=onsets("1.2,1.5,2,3"), metavar="R,...")
    parser.add_argument("--busy-share-target", type=float, default=0.3, metavar="U")
    parser.add_argument("--traces", default=str(TRACES))
    add_guardrail_argument(parser)
    add_case_arguments(parser)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 0 < args.busy_share_target <= 1:
        parser.error(f"--busy-share-target: expected a share above 0 and at most 1, got {args.busy_share_target:g}")
    parse_overrides(args.pool)  # a bad --pool says so before the first replay
    baselines = {row["case"]: row for row in map(json.loads, BASELINES.read_text().splitlines()) if "case" in row}
    scoring = json.loads(CLAIRVOYANT.read_text())["scorings"]["14 days"]
    clairvoyant_days = {d["day"]: d["gpu_hours"] for d in scoring["per_day"]["clairvoyant"]}
    fits = []
    for onset in args.onsets:
        started = time.process_time()
        print(f"onset_fit: {onset:g} ...", file=sys.stderr, flush=True)
        code, week = code_cases(onset, args, baselines), week_1(onset, args, clairvoyant_days)
        fits.append({"onset": onset, "passes": passes(code, week), "week_1": week, "code": code,
                     "code_gpu_hours": round(sum(r["gpu_hours"] for r in code), 2),
                     "cpu_s": round(time.process_time() - started, 1)})
    best = chosen(fits)
    if args.json:
        print(json.dumps({"fits": fits, "chosen": best and best["onset"]}))
        return
    print("| onset | code cases below a baseline / dominated | code GPU-h | week 1: worst day | worst day's GPU-h × clairvoyant "
          "| week 1 × clairvoyant | rule |")
    print("|---|---|---|---|---|---|---|")
    for f in fits:
        below = [r["case"] for r in f["code"] if r["below_a_baseline"]]
        dominated = [r["case"] for r in f["code"] if r["dominated"]]
        print(f"| {f['onset']:g} | {', '.join(below) or 'none'} / {', '.join(dominated) or 'none'} | {f['code_gpu_hours']:.2f} "
              f"| {f['week_1']['worst_day']:.4f} | {f['week_1']['worst_day_ratio']:.2f} | {f['week_1']['over_clairvoyant']:.3f} "
              f"| {'passes' if f['passes'] else 'fails'}{' (chosen)' if f is best else ''} |")
    if best is None:
        print("\nno onset passes the rule")


if __name__ == "__main__":
    main()
