"""The headroom policy against the tuned baselines, the clairvoyant bound and every static size, on a suite of replays.

    .venv/bin/python bench/headroom_suite.py [--traces ../shared/traces] [--seed-offset N] [--pool FIELD=VALUE ...]
        [--profile NAME] [--cold-start-s S] [--slo-ttft-ms MS] [--warmup-s S] [--approval-delay-s S] [--reactive-max-percent P] [--rate-window-s S]
        [--cases LABEL,...] [--no-baselines] [--no-bound-check] [--json]

Why a suite: one trace rewards tuning to that trace. Each case is an Azure trace (request mode,
the defaults of docs/simulator.md) reshaped so that its bursts, surges and rates differ: rate
scales, surges of several sizes, lengths and start times, seeds for the copies a surge adds, and a
long-prompt pool (prompt lengths redrawn so that TTFT is prefill-bound and no pool size meets the
objective). The `code` cases are the training side (the baselines' thresholds and the planner's
constants were fitted on `code` as recorded); the `conv` cases were never used to fit anything.

For every case: SLO attainment and GPU-hours of `headroom`, of `keda-queue` and `hpa-util` with
their tuned thresholds (`bench/tune_baselines.py`), and of the clairvoyant bound; the bound check
(the clairvoyant searched again at each causal policy's own attainment, `bound_at`: no causal
policy may spend fewer GPU-hours than it at equal attainment); and the smallest static pool reaching
headroom's attainment (headroom is dominated when that pool needs 20 % fewer GPU-hours). Then the
aggregates and the issue's targets. The first `--warmup-s` seconds (default 600) are played to
every policy and not scored.

`--pool FIELD=VALUE` overrides a `PoolPlan` field (`scaling/engine/planner.py`) for every case,
so a planner constant can be compared across the whole suite before it is changed.
The replay approves as production's default `ApprovalPolicy` does: reactive and predictive scale-ups
up to the guardrail at once (a larger one runs that share, the rest after `--approval-delay-s`), the
planner's settled scale-downs at once, everything else after `--approval-delay-s`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from controlplane.config import ApprovalPolicy
from scaling.engine.planner import PoolPlan
from scaling.sim.config import ColdStart, SimConfig
from scaling.sim.loaders import load_trace
from scaling.sim.policies import PolicyContext, bound_at, build_policy, clairvoyant
from scaling.sim.policies.base import LATENCY_WINDOW_S
from scaling.sim.policies.headroom import HeadroomPolicy, pool_plan_for
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.profiles import DEFAULT_PROFILE, PROFILES, get_profile
from scaling.sim.request_mode import run_request_mode
from scaling.sim.transforms import long_prompts, rate_scale, surge

# (label, trace file, rate scale, surge "factor:minutes" or None, surge start as a share of the span, seed,
#  prompt lengths (median tokens, sigma) or None)
CASES = (
    ("code", "AzureLLMInferenceTrace_code.csv", 1.0, None, None, 0, None),
    ("code x3", "AzureLLMInferenceTrace_code.csv", 3.0, None, None, 0, None),
    ("code surge 10:5", "AzureLLMInferenceTrace_code.csv", 1.0, "10:5", None, 0, None),
    ("code surge 10:5 s1", "AzureLLMInferenceTrace_code.csv", 1.0, "10:5", None, 1, None),
    ("code surge 4:10 @0.5", "AzureLLMInferenceTrace_code.csv", 1.0, "4:10", 0.5, 0, None),
    ("conv", "AzureLLMInferenceTrace_conv.csv", 1.0, None, None, 0, None),
    ("conv x8", "AzureLLMInferenceTrace_conv.csv", 8.0, None, None, 0, None),
    ("conv surge 10:5", "AzureLLMInferenceTrace_conv.csv", 1.0, "10:5", None, 0, None),
    ("conv x4 surge 3:15 @0.2", "AzureLLMInferenceTrace_conv.csv", 4.0, "3:15", 0.2, 0, None),
    ("conv x2 surge 20:3 @0.6", "AzureLLMInferenceTrace_conv.csv", 2.0, "20:3", 0.6, 2, None),
    ("conv long prompts surge 10:5", "AzureLLMInferenceTrace_conv.csv", 1.0, "10:5", None, 0, (4000.0, 0.6)),
)
DOMINATED_SAVING = 0.2  # a static pool reaching headroom's attainment with this share fewer GPU-hours dominates it


def workload_for(traces: Path, file_name: str, scale: float, surge_spec: str | None, start_share: float | None, seed: int,
                 prompts: tuple[float, float] | None = None):
    workload = load_trace(traces / file_name)
    if prompts is not None:
        workload = long_prompts(workload, *prompts, seed=seed)
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


def with_overrides(pool: PoolPlan, overrides: dict[str, float]) -> PoolPlan:
    """`pool` with `--pool` overrides applied, each cast to its field's type (a count stays an int)."""
    return dataclasses.replace(pool, **{k: type(getattr(pool, k))(v) for k, v in overrides.items()})


def static_dominates(static, result) -> bool:
    """A static pool reaching `result`'s attainment with `DOMINATED_SAVING` fewer GPU-hours."""
    return static.slo_attainment >= result.slo_attainment and static.gpu_hours <= (1 - DOMINATED_SAVING) * result.gpu_hours


def guardrail_percent(text: str) -> int | None:
    """`--reactive-max-percent`: a whole number of percent, 1-1000 (the approval policy's own bounds), or
    `off` for the step alone (the policy's null)."""
    if text.strip().lower() == "off":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of percent or off, got {text!r}") from None
    if not 0 < value <= 1000:
        raise argparse.ArgumentTypeError(f"expected a whole number of percent from 1 to 1000, got {value}")
    return value


def add_guardrail_argument(parser: argparse.ArgumentParser) -> None:
    """The approval guardrail the replay approves reactive scale-ups under, as every judgment script takes it."""
    default = ApprovalPolicy.reactive_max_percent
    parser.add_argument("--reactive-max-percent", type=guardrail_percent, default=default, metavar="P",
                        help="reactive and predictive scale-ups approved at once up to max(+4, +P %%) of the pool "
                             f"(`ApprovalPolicy.reactive_max_percent`; default {default}, as a pool's; off: +4 only)")


def score(result) -> dict[str, float]:
    return {"slo_attainment": result.slo_attainment, "gpu_hours": round(result.gpu_hours, 4)}


def run_case(workload, config: SimConfig, pool: PoolPlan, args: argparse.Namespace) -> dict[str, object]:
    def evaluate(policy):
        return run_request_mode(workload, config, policy)

    context = PolicyContext(workload, config, evaluate)
    bound = clairvoyant(context)[1]
    policy = HeadroomPolicy(pool, approval_delay_s=args.approval_delay_s, tick_s=config.tick_s or 15.0,
                            reactive_max_percent=args.reactive_max_percent, rate_window_s=args.rate_window_s)
    results = {"headroom": run_request_mode(workload, config, policy)}
    if not args.no_baselines:
        for name in ("keda-queue", "hpa-util"):
            results[name] = evaluate(build_policy(name, context))
    row: dict[str, object] = {name: score(result) for name, result in results.items()}
    row["clairvoyant"] = score(bound)
    row["attainment_target"] = round(context.attainment_target(), 4)
    if not args.no_bound_check:
        # The bound at each causal policy's own attainment: none may spend fewer GPU-hours there.
        checks = {}
        for name, result in results.items():
            at_equal = bound if result.slo_attainment == bound.slo_attainment else bound_at(context, result.slo_attainment)
            checks[name] = {**score(at_equal), "beaten": result.gpu_hours < at_equal.gpu_hours * (1 - 1e-6)}
        row["clairvoyant_at_equal_attainment"] = checks
    headroom = results["headroom"]
    size = context.smallest_static(headroom.slo_attainment)
    static = evaluate(StaticPolicy(size))
    row["static_at_headroom_attainment"] = {"replicas": size, **score(static),
                                            "dominates": static_dominates(static, headroom)}
    return row


def score_case(label: str, workload, config: SimConfig, overrides: dict[str, float], args: argparse.Namespace) -> dict:
    """One case's row: its pool load-tested, the `--pool` overrides applied, then `run_case`."""
    return {"case": label, **run_case(workload, config, with_overrides(pool_plan_for(config, workload), overrides), args)}


def is_training(label: str) -> bool:
    """The `code` cases: the baselines' thresholds and the planner's new constants were fitted there."""
    return label.startswith("code")


def _side_summary(rows: list[dict], objective: float) -> dict[str, object] | None:
    if not rows:
        return None
    return {
        "cases": len(rows),
        "meeting_objective": sum(r["headroom"]["slo_attainment"] >= objective for r in rows),
        "mean_shortfall": round(sum(max(0.0, objective - r["headroom"]["slo_attainment"]) for r in rows) / len(rows), 4),
        "geomean_gpu_hours_over_clairvoyant": round(math.exp(sum(
            math.log(r["headroom"]["gpu_hours"] / r["clairvoyant"]["gpu_hours"]) for r in rows) / len(rows)), 3),
    }


def summarise(rows: list[dict], objective: float) -> dict[str, object]:
    def shortfall(policy: str) -> float | None:
        if any(r.get(policy) is None for r in rows):
            return None
        return round(sum(max(0.0, objective - r[policy]["slo_attainment"]) for r in rows) / len(rows), 4)

    def geomean(policy: str) -> float:
        return round(math.exp(sum(math.log(r[policy]["gpu_hours"] / r["clairvoyant"]["gpu_hours"]) for r in rows) / len(rows)), 3)

    summary: dict[str, object] = {
        **{f"{side}_cases": _side_summary([r for r in rows if is_training(r["case"]) == training], objective)
           for side, training in (("training", True), ("held_out", False))},
        "cases": len(rows),
        "meeting_objective": sum(r["headroom"]["slo_attainment"] >= objective for r in rows),
        "mean_shortfall": shortfall("headroom"),
        "geomean_gpu_hours_over_clairvoyant": geomean("headroom"),
        "dominated_by_static": [r["case"] for r in rows if r["static_at_headroom_attainment"]["dominates"]],
    }
    if "clairvoyant_at_equal_attainment" in rows[0]:
        summary["clairvoyant_beaten"] = [f"{r['case']}: {name}" for r in rows
                                         for name, check in r["clairvoyant_at_equal_attainment"].items() if check["beaten"]]
    if "keda-queue" in rows[0]:
        for name in ("keda-queue", "hpa-util"):
            summary[f"{name}_mean_shortfall"] = shortfall(name)
            summary[f"{name}_geomean_gpu_hours_over_clairvoyant"] = geomean(name)
            # Below a baseline: less attainment than it, counting nothing past the objective (a
            # baseline that buys 0.9995 for 4x the GPU-hours is not ahead of one meeting 0.99).
            summary[f"below_{name}"] = [r["case"] for r in rows if r["headroom"]["slo_attainment"]
                                        < min(r[name]["slo_attainment"], objective)]
    return summary


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
    parser.add_argument("--rate-window-s", type=float, default=LATENCY_WINDOW_S, metavar="S",
                        help="the window headroom reads the request rate over, as a live pool's prometheus_rate_window "
                             "(default 60; 15, the tick, reads each tick's own count as replays did before session 16)")
    add_guardrail_argument(parser)
    parser.add_argument("--cases", default="", metavar="LABEL,...", help="only these cases (default: all)")
    parser.add_argument("--no-baselines", action="store_true", help="skip keda-queue and hpa-util")
    parser.add_argument("--no-bound-check", action="store_true", help="skip the clairvoyant at each policy's attainment")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    overrides = parse_overrides(args.pool)
    wanted = {label.strip() for label in args.cases.split(",") if label.strip()}
    unknown = wanted - {case[0] for case in CASES}
    if unknown:
        raise SystemExit(f"--cases: unknown case {sorted(unknown)[0]!r}; known: {', '.join(case[0] for case in CASES)}")
    profile = get_profile(args.profile)
    config = SimConfig.for_profile(profile, slo_ttft_s=args.slo_ttft_ms / 1000.0, warmup_s=args.warmup_s)
    if args.cold_start_s is not None:
        ratio = profile.cold_start_p95_s / profile.cold_start_p50_s
        config = dataclasses.replace(config, cold_start=ColdStart(args.cold_start_s, args.cold_start_s * ratio))
    rows = []
    if not args.json:
        print("| case | headroom att. / × clairvoyant | keda-queue (tuned) | hpa-util (tuned) | clairvoyant att. / GPU-h "
              "| clairvoyant at headroom's att. | smallest static at headroom's att. |")
        print("|---|---|---|---|---|---|---|")
    for label, file_name, scale, surge_spec, start_share, seed, prompts in CASES:
        if wanted and label not in wanted:
            continue
        workload = workload_for(Path(args.traces), file_name, scale, surge_spec, start_share, seed + args.seed_offset, prompts)
        row = score_case(label, workload, config, overrides, args)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        bound_gpu = row["clairvoyant"]["gpu_hours"]

        def cell(name: str) -> str:
            entry = row.get(name)
            return "–" if entry is None else f"{entry['slo_attainment']:.4f} / {entry['gpu_hours'] / bound_gpu:.2f}"

        equal = row.get("clairvoyant_at_equal_attainment", {}).get("headroom")
        equal_cell = "–" if equal is None else f"{equal['gpu_hours']:.2f}{' BEATEN' if equal['beaten'] else ''}"
        static = row["static_at_headroom_attainment"]
        print(f"| {label} | {cell('headroom')} | {cell('keda-queue')} | {cell('hpa-util')} "
              f"| {row['clairvoyant']['slo_attainment']:.4f} / {bound_gpu:.2f} | {equal_cell} "
              f"| {static['replicas']}: {static['gpu_hours']:.2f}{' DOMINATES' if static['dominates'] else ''} |", flush=True)
    if not rows:
        raise SystemExit("--cases selected no case")
    summary = {**summarise(rows, config.slo_objective), "overrides": overrides}
    print(json.dumps(summary) if args.json else "\n" + json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
