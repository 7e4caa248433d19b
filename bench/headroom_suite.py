"""The headroom policy against keda-queue and the clairvoyant schedule on a wider set of replays than issue 5's table.

    .venv/bin/python bench/headroom_suite.py [--traces ../shared/traces] [--seed-offset N] [--pool FIELD=VALUE ...]
        [--profile NAME] [--cold-start-s S] [--slo-ttft-ms MS] [--warmup-s S] [--approval-delay-s S]
        [--no-baselines] [--json]

Why a suite: one trace rewards tuning to that trace. Each case is an Azure trace (request mode,
the defaults of docs/simulator.md) reshaped so that its bursts, surges and rates differ: rate
scales, surges of several sizes, lengths and start times, and three seeds for the copies a surge
adds. For every case it prints the headroom policy's SLO attainment and GPU-hours over the clairvoyant's,
with keda-queue for reference, then the aggregate: cases meeting the objective, the mean
attainment shortfall below it, and the geometric mean of GPU-hours over the clairvoyant's. The first
`--warmup-s` seconds (default 600) are played to every policy and not scored.

`--pool FIELD=VALUE` overrides a `PoolPlan` field (`scaling/engine/planner.py`) for every case,
so a planner constant can be compared across the whole suite before it is changed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from scaling.engine.planner import PoolPlan
from scaling.sim.config import ColdStart, SimConfig
from scaling.sim.loaders import load_trace
from scaling.sim.policies.headroom import HeadroomPolicy, pool_plan_for
from scaling.sim.profiles import DEFAULT_PROFILE, PROFILES, get_profile
from scaling.sim.request_mode import run_request_mode
from scaling.sim.runner import simulate
from scaling.sim.transforms import rate_scale, surge

# (label, trace file, rate scale, surge "factor:minutes" or None, surge start as a share of the span, seed)
CASES = (
    ("code", "AzureLLMInferenceTrace_code.csv", 1.0, None, None, 0),
    ("code x3", "AzureLLMInferenceTrace_code.csv", 3.0, None, None, 0),
    ("code surge 10:5", "AzureLLMInferenceTrace_code.csv", 1.0, "10:5", None, 0),
    ("code surge 10:5 s1", "AzureLLMInferenceTrace_code.csv", 1.0, "10:5", None, 1),
    ("code surge 4:10 @0.5", "AzureLLMInferenceTrace_code.csv", 1.0, "4:10", 0.5, 0),
    ("conv", "AzureLLMInferenceTrace_conv.csv", 1.0, None, None, 0),
    ("conv x8", "AzureLLMInferenceTrace_conv.csv", 8.0, None, None, 0),
    ("conv surge 10:5", "AzureLLMInferenceTrace_conv.csv", 1.0, "10:5", None, 0),
    ("conv x4 surge 3:15 @0.2", "AzureLLMInferenceTrace_conv.csv", 4.0, "3:15", 0.2, 0),
    ("conv x2 surge 20:3 @0.6", "AzureLLMInferenceTrace_conv.csv", 2.0, "20:3", 0.6, 2),
)


def workload_for(traces: Path, file_name: str, scale: float, surge_spec: str | None, start_share: float | None, seed: int):
    workload = load_trace(traces / file_name)
    if scale != 1.0:
        workload = rate_scale(workload, scale, seed=seed)
    if surge_spec:
        factor, minutes = (float(part) for part in surge_spec.split(":"))
        start = None if start_share is None else workload.span_s * start_share
        workload = surge(workload, factor, minutes, start, seed=seed)
    return workload


def parse_overrides(pairs: list[str]) -> dict[str, float]:
    overrides: dict[str, float] = {}
    fields = {f.name for f in dataclasses.fields(PoolPlan) if f.type in ("int", "float")}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in fields or not value:
            raise SystemExit(f"--pool {pair!r}: expected FIELD=VALUE with FIELD one of {', '.join(sorted(fields))}")
        overrides[name] = float(value)
    return overrides


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--pool", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--seed-offset", type=int, default=0,
                        help="add to every case's seed: other copies and thinnings of the same traces")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES))
    parser.add_argument("--cold-start-s", type=float, metavar="S", help="cold-start p50; p95 keeps the profile's ratio")
    parser.add_argument("--slo-ttft-ms", type=float, default=1000.0, metavar="MS")
    parser.add_argument("--warmup-s", type=float, default=600.0, metavar="S", help="seen by every policy, not scored")
    parser.add_argument("--approval-delay-s", type=float, default=60.0, metavar="S",
                        help="a person's answer to what policy does not approve (0: everything at once)")
    parser.add_argument("--no-baselines", action="store_true", help="skip keda-queue (the clairvoyant is always run)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    overrides = parse_overrides(args.pool)
    profile = get_profile(args.profile)
    config = SimConfig.for_profile(profile, slo_ttft_s=args.slo_ttft_ms / 1000.0, warmup_s=args.warmup_s)
    if args.cold_start_s is not None:
        ratio = profile.cold_start_p95_s / profile.cold_start_p50_s
        config = dataclasses.replace(config, cold_start=ColdStart(args.cold_start_s, args.cold_start_s * ratio))
    rows = []
    if not args.json:
        print("| case | headroom attainment | × clairvoyant GPU-h | keda-queue attainment | × clairvoyant "
              "| clairvoyant attainment / GPU-h |")
        print("|---|---|---|---|---|---|")
    for label, file_name, scale, surge_spec, start_share, seed in CASES:
        workload = workload_for(Path(args.traces), file_name, scale, surge_spec, start_share, seed + args.seed_offset)
        clairvoyant = simulate(workload, config, "clairvoyant")
        pool = pool_plan_for(config, workload)
        pool = dataclasses.replace(pool, **{k: type(getattr(pool, k))(v) for k, v in overrides.items()})
        policy = HeadroomPolicy(pool, approval_delay_s=args.approval_delay_s, tick_s=config.tick_s or 15.0)
        headroom = run_request_mode(workload, config, policy)
        keda = None if args.no_baselines else simulate(workload, config, "keda-queue")
        row = {
            "case": label,
            "headroom": {"slo_attainment": headroom.slo_attainment, "gpu_hours": headroom.gpu_hours},
            "clairvoyant": {"slo_attainment": clairvoyant.slo_attainment, "gpu_hours": clairvoyant.gpu_hours},
            "keda-queue": None if keda is None else {"slo_attainment": keda.slo_attainment, "gpu_hours": keda.gpu_hours},
        }
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            keda_cells = "– | –" if keda is None else f"{keda.slo_attainment:.4f} | {keda.gpu_hours / clairvoyant.gpu_hours:.2f}"
            print(f"| {label} | {headroom.slo_attainment:.4f} | {headroom.gpu_hours / clairvoyant.gpu_hours:.2f} | {keda_cells} "
                  f"| {clairvoyant.slo_attainment:.4f} / {clairvoyant.gpu_hours:.2f} |", flush=True)
    objective = config.slo_objective
    met = sum(r["headroom"]["slo_attainment"] >= objective for r in rows)
    shortfall = sum(max(0.0, objective - r["headroom"]["slo_attainment"]) for r in rows) / len(rows)
    cost = math.exp(sum(math.log(r["headroom"]["gpu_hours"] / r["clairvoyant"]["gpu_hours"]) for r in rows) / len(rows))
    summary = {"cases": len(rows), "meeting_objective": met, "mean_shortfall": round(shortfall, 4),
               "geomean_gpu_hours_over_clairvoyant": round(cost, 3), "overrides": overrides}
    print(json.dumps(summary) if args.json else f"\n{met}/{len(rows)} cases meet {objective:.0%}; mean shortfall "
          f"{shortfall:.4f}; GPU-hours over the clairvoyant's, geometric mean {cost:.3f}; overrides {overrides or 'none'}")


if __name__ == "__main__":
    main()
