"""How much of a plateau's last decimal is noise: one clairvoyant plan with only a floor raised under it.

    .venv/bin/python bench/plateau.py [--traces ../shared/traces] [--case LABEL] [--utilisation U]
        [--lead-s S] [--cap N] [--floors N,N,...]

Where no pool size meets the objective (the suite's long-prompt case: TTFT is prefill-bound), the
attainment's fourth decimal is a few requests in tens of thousands. This replays the clairvoyant's
1-s plan at one utilisation bound and lead time (`OracleDemand.plan`) with each floor of replicas
under it, and prints attainment and GPU-hours per floor: if more replicas buy nothing and
neighbouring floors move the fourth decimal either way, that decimal is noise, which is why the
suite's bound check (`bound_at`) allows `BEST_ATTAINMENT_TOLERANCE` there (docs/benchmarks.md,
"The bound check on a plateau").
"""
from __future__ import annotations

import argparse
from pathlib import Path

from bench.headroom_suite import CASES, workload_for
from scaling.sim.config import SimConfig
from scaling.sim.policies.oracle import OracleDemand
from scaling.sim.request_mode import run_request_mode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--case", default="conv long prompts surge 10:5", choices=[case[0] for case in CASES])
    parser.add_argument("--utilisation", type=float, default=0.25, metavar="U")
    parser.add_argument("--lead-s", type=float, default=75.0, metavar="S", help="default: the cold start's p50 and a tick")
    parser.add_argument("--cap", type=int, metavar="N", help="the plan's ceiling (default: the pool's max replicas)")
    parser.add_argument("--floors", default="1,4,8,12,14,15,16,18,20,24,30,40,60,82", metavar="N,N,...")
    args = parser.parse_args()
    try:
        floors = [int(part) for part in args.floors.split(",")]
    except ValueError:
        raise SystemExit(f"--floors {args.floors!r}: expected whole numbers of replicas separated by commas") from None
    _, file_name, scale, surge_spec, start_share, seed, prompts = next(case for case in CASES if case[0] == args.case)
    workload = workload_for(Path(args.traces), file_name, scale, surge_spec, start_share, seed, prompts)
    config = SimConfig.for_profile(SimConfig().profile, warmup_s=600.0)
    demand = OracleDemand.of(workload, config, bin_s=max(config.slo_ttft_s, config.fluid_step_s))
    cap = args.cap or config.max_replicas
    if max(floors) > cap or min(floors) < 1:
        raise SystemExit(f"--floors: each floor must be between 1 and the cap ({cap} replicas)")
    print("| floor (replicas) | attainment | GPU-hours |\n|---|---|---|")
    for floor in floors:
        result = run_request_mode(workload, config, demand.plan(args.utilisation, args.lead_s, floor, cap, config.tick_s or 15.0))
        print(f"| {floor} | {result.slo_attainment:.4f} | {result.gpu_hours:.1f} |", flush=True)


if __name__ == "__main__":
    main()
