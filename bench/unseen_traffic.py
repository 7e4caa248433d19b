"""Headroom judged on real traffic that is not in `../shared/traces/` (issue 12): nothing was fitted on it.

    .venv/bin/python bench/unseen_traffic.py --trace PATH [--format auto|azure|mooncake|servegen]
        [--label NAME] [--surge FACTOR:MINUTES ...] [--rate-scale K ...] [--rate-window-s S] [--reactive-max-percent P]
        [--pool FIELD=VALUE ...]
        [--no-baselines] [--no-bound-check] [--json]

Each case is the trace as it is, or reshaped as the suite reshapes its Azure traces (`--rate-scale`,
`--surge`, each alone), scored exactly as `bench/headroom_suite.py` scores a case (`score_case`): headroom
with the replay's defaults (the planner's constants as fitted on the suite's `code` cases), the tuned
`keda-queue` and `hpa-util`, the clairvoyant bound and its check, and the smallest static pool reaching
headroom's attainment. Then the suite's aggregates. Every case here is held out: no constant, threshold
or baseline setting was chosen on it.

The traces used in docs/benchmarks.md ("Judged on traffic the suite never saw") are Mooncake's FAST'25
release, `FAST25-release/traces/conversation_trace.jsonl` in the kvcache-ai/Mooncake repository (one hour of
a production conversation service: 12,031 requests, prompts of 12,000 tokens on average). They are not
copied into this repository; pass the path of a local copy.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.headroom_suite import add_guardrail_argument, parse_overrides, score_case, summarise  # noqa: E402
from scaling.sim.config import SimConfig  # noqa: E402
from scaling.sim.loaders import FORMATS, TraceFormatError, load_trace  # noqa: E402
from scaling.sim.policies.base import LATENCY_WINDOW_S  # noqa: E402
from scaling.sim.profiles import DEFAULT_PROFILE, PROFILES, get_profile  # noqa: E402
from scaling.sim.transforms import rate_scale, surge  # noqa: E402
from scaling.sim.workload import Workload  # noqa: E402


def parse_surge(text: str) -> tuple[float, float]:
    try:
        factor, minutes = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FACTOR:MINUTES, e.g. 10:5, got {text!r}") from None
    if factor <= 0 or minutes <= 0:
        raise argparse.ArgumentTypeError(f"a surge needs a positive factor and length, got {text!r}")
    return factor, minutes


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive(text: str) -> float:
    value = number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def non_negative(text: str) -> float:
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of 0 or more, got {text!r}")
    return value


def trace_cases(trace: Workload, label: str, scales: list[float], surges: list[tuple[float, float]],
                seed: int) -> list[tuple[str, Workload, float | None]]:
    """The trace as it is, at each rate scale and under each surge (a third of the way in, as the suite's):
    (name, workload, the surge's ramp in seconds or None)."""
    cases: list[tuple[str, Workload, float | None]] = [(label, trace, None)]
    cases += [(f"{label} x{k:g}", rate_scale(trace, k, seed=seed), None) for k in scales]
    cases += [(f"{label} surge {f:g}:{m:g}", surge(trace, f, m, seed=seed), m * 60.0) for f, m in surges]
    return cases


def load_or_exit(path: Path, trace_format: str, warmup_s: float) -> Workload:
    """The trace at `path`, or exit with a message naming what is wrong with it."""
    try:
        trace = load_trace(path, trace_format)
    except TraceFormatError as error:
        raise SystemExit(f"error: {error}") from None
    if trace.span_s <= warmup_s:
        raise SystemExit(f"error: the trace spans {trace.span_s:.0f} s, no more than the warm-up ({warmup_s:g} s)")
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trace", type=Path, help="the trace to judge on (required; see above for where to get one)")
    parser.add_argument("--format", default="auto", choices=FORMATS)
    parser.add_argument("--label", default="", help="the cases' name (default: the file's)")
    parser.add_argument("--surge", action="append", default=[], type=parse_surge, metavar="FACTOR:MINUTES",
                        help="one more case with this surge (as the suite's), e.g. 10:5; repeatable")
    parser.add_argument("--rate-scale", action="append", default=[], type=positive, metavar="K",
                        help="one more case at K times the rate; repeatable")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES))
    parser.add_argument("--slo-ttft-ms", type=positive, default=1000.0, metavar="MS")
    parser.add_argument("--warmup-s", type=non_negative, default=600.0, metavar="S", help="seen by every policy, not scored")
    parser.add_argument("--approval-delay-s", type=non_negative, default=60.0, metavar="S")
    add_guardrail_argument(parser)
    parser.add_argument("--rate-window-s", type=positive, default=LATENCY_WINDOW_S, metavar="S",
                        help="the window headroom reads the request rate over (default: the live pool's, 60)")
    parser.add_argument("--pool", action="append", default=[], metavar="FIELD=VALUE",
                        help="overrides a PoolPlan field for every case, as the suite's --pool (a diagnosis, not a fit)")
    parser.add_argument("--seed", type=int, default=0, help="for the copies a surge or a rate scale adds")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--no-bound-check", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.trace is None:
        # `make bench-full` runs every script with its defaults: without a trace there is nothing to judge.
        print("unseen_traffic: no --trace given, nothing to judge (the docstring says which traces and where from)")
        return
    overrides = parse_overrides(args.pool)
    trace = load_or_exit(args.trace, args.format, args.warmup_s)
    cases = trace_cases(trace, args.label or args.trace.stem, args.rate_scale, args.surge, args.seed)
    config = SimConfig.for_profile(get_profile(args.profile), slo_ttft_s=args.slo_ttft_ms / 1000.0,
                                   warmup_s=args.warmup_s)
    rows = []
    for name, workload, _ in cases:
        row = score_case(name, workload, config, overrides, args)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            cells = [f"{policy} {row[policy]['slo_attainment']:.4f} / {row[policy]['gpu_hours']:.2f}"
                     for policy in ("headroom", "keda-queue", "hpa-util", "clairvoyant") if policy in row]
            static = row["static_at_headroom_attainment"]
            print(f"{name}: " + ", ".join(cells) + f"; static {static['replicas']}: {static['gpu_hours']:.2f}"
                  + (" DOMINATES" if static["dominates"] else ""), flush=True)
    summary = {**summarise(rows, config.slo_objective), "rate_window_s": args.rate_window_s, "overrides": overrides}
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
