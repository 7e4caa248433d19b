"""Issue 13's replay targets for fallback models: a surge with and without a fallback pool.

    .venv/bin/python bench/fallback_targets.py [--traces ../shared/traces] [--cases judge|fit]
        [--fallback-replicas N ...] [--priority-share F] [--max-replicas N] [--set FIELD=VALUE ...]
        [--spillover F] [--scheduling-policy fcfs|priority] [--no-baselines] [--json]

Per case (an Azure trace with `--surge 10:5`, request mode, the replay's defaults) it runs the
clairvoyant primary-only schedule (the cost reference), `headroom` without a fallback, and
`headroom` with a `llama-3.2-1b-l4` fallback pool of each `--fallback-replicas` size, and prints
SLO attainment (all requests, by class, by model), the fallback's share, the cost over the
clairvoyant's, and when the traffic was last all back on the primary against the surge's end
(`--max-replicas` caps the primary). `--set` overrides a `FallbackPolicy` field for a fit;
`--scheduling-policy priority` has the pools' replicas start the priority class's waiting requests
first (vLLM's `--scheduling-policy priority`).

Fit and judge: the thresholds are fitted on the `fit` cases (seed 1 of both traces: other copies of
the surge's added requests) and judged on the `judge` cases (seed 0, the issue's runs).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from headroom_suite import workload_for  # noqa: E402 (bench/ is the script's directory)

from scaling.engine.fallback import FallbackPolicy
from scaling.sim.config import SimConfig
from scaling.sim.profiles import DEFAULT_PROFILE, SCHEDULING_POLICIES, get_profile
from scaling.sim.route_mode import FallbackRoute
from scaling.sim.runner import simulate

FALLBACK_PROFILE = "llama-3.2-1b-l4"
SURGE = "10:5"
CASES = {
    "judge": (("code", "AzureLLMInferenceTrace_code.csv", 0), ("conv", "AzureLLMInferenceTrace_conv.csv", 0)),
    "fit": (("code s1", "AzureLLMInferenceTrace_code.csv", 1), ("conv s1", "AzureLLMInferenceTrace_conv.csv", 1)),
}


def surge_end_s(span_s: float, minutes: float) -> float:
    """`transforms.surge`: starts at a third of the span, ramps, holds and decays `minutes` each."""
    return span_s / 3 + 3 * minutes * 60.0


def parse_sets(pairs: list[str]) -> dict[str, float]:
    fields = {f.name for f in dataclasses.fields(FallbackPolicy) if f.type in ("float", "int")}
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in fields or not value:
            raise SystemExit(f"--set {pair!r}: expected FIELD=VALUE with FIELD one of {', '.join(sorted(fields))}")
        out[name] = float(value)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--cases", default="judge", choices=sorted(CASES))
    parser.add_argument("--fallback-replicas", type=int, nargs="+", default=[32])
    parser.add_argument("--priority-share", type=float, default=0.1)
    parser.add_argument("--max-replicas", type=int, default=100)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--spillover", type=float, metavar="F", help="per-request spill-over past F x the SLO")
    parser.add_argument("--scheduling-policy", default="fcfs", choices=SCHEDULING_POLICIES)
    parser.add_argument("--no-baselines", action="store_true", help="only the runs with a fallback pool")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    fallback_policy = FallbackPolicy(**parse_sets(args.set))
    hysteresis_s = fallback_policy.return_time_s
    config = SimConfig.for_profile(get_profile(DEFAULT_PROFILE), warmup_s=600.0, max_replicas=args.max_replicas)
    reference = SimConfig.for_profile(get_profile(DEFAULT_PROFILE), warmup_s=600.0)
    if not args.json:
        print("| case | run | attainment | priority class | primary model / fallback model | fallback share "
              "| cost $ | × clairvoyant | last back on the primary − surge end (s) |")
        print("|---|---|---|---|---|---|---|---|---|")
    for label, file_name, seed in CASES[args.cases]:
        workload = workload_for(Path(args.traces), file_name, 1.0, SURGE, None, seed)
        end = surge_end_s(workload.span_s, float(SURGE.split(":")[1]))
        clairvoyant = simulate(workload, reference, "clairvoyant")
        runs = [] if args.no_baselines else [("clairvoyant, primary only", clairvoyant),
                                             ("headroom, no fallback", simulate(workload, config, "headroom"))]
        for replicas in args.fallback_replicas:
            route = FallbackRoute(get_profile(FALLBACK_PROFILE), replicas, args.priority_share, fallback_policy,
                                  spillover_wait_share=args.spillover, scheduling_policy=args.scheduling_policy)
            spill = "" if args.spillover is None else f", spill-over {args.spillover:g}"
            spill += ", priority scheduling" if args.scheduling_policy == "priority" else ""
            runs.append((f"headroom + {replicas} x {FALLBACK_PROFILE}{spill}", simulate(workload, config, "headroom",
                                                                                 fallback=route)))
        for name, result in runs:
            report = result.as_json()
            restored = [at for at, event, _ in report.get("fallback_events", []) if event == "restored"]
            entered = [at for at, event, _ in report.get("fallback_events", []) if event in ("entered", "reactivated")]
            still_on = bool(entered) and (not restored or max(entered) > max(restored))
            back = "still on the fallback" if still_on else (f"{max(restored) - end:+.0f}" if restored else "–")
            row = {"case": label, "run": name, "max_replicas": args.max_replicas, "slo_attainment": result.slo_attainment,
                   "by_class": report.get("slo_attainment_by_class"), "by_model": report.get("slo_attainment_by_model"),
                   "fallback_share": report.get("fallback_share"), "cost_usd": result.cost_usd,
                   "cost_over_clairvoyant": round(result.cost_usd / clairvoyant.cost_usd, 2),
                   "back_on_primary_after_surge_end_s": back, "hysteresis_s": hysteresis_s,
                   "events": report.get("fallback_events", [])}
            if args.json:
                print(json.dumps(row), flush=True)
                continue
            by_class = row["by_class"] or {}
            by_model = row["by_model"] or {}
            models = " / ".join(f"{v:.4f}" for v in by_model.values()) if by_model else "–"
            print(f"| {label} | {name} | {result.slo_attainment:.4f} | {by_class.get('priority', '–')} | {models} "
                  f"| {row['fallback_share'] if row['fallback_share'] is not None else '–'} | {result.cost_usd:.2f} "
                  f"| {row['cost_over_clairvoyant']:.2f} | {back} |", flush=True)
    print(f"\nfallback policy: {fallback_policy}; hysteresis (demand window + exit_after_s + return holds) {hysteresis_s:.0f} s; "
          f"primary max replicas {args.max_replicas}")


if __name__ == "__main__":
    main()
