"""Replay a trace through a simulated vLLM pool under a scaling policy.

    python -m scaling.sim.replay --trace PATH --policy keda-queue [--json]
    python -m scaling.sim.replay --trace PATH --policy headroom --fallback llama-3.2-1b-l4 \
        [--fallback-replicas N] [--priority-share F] [--fallback-spillover F] [--scheduling-policy priority] [--json]

Errors in the input are printed as `error: ...` with exit status 2, never as a traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Sequence

from scaling.sim.config import ClientConfig, ColdStart, SimConfig
from scaling.sim.loaders import FORMATS, TraceFormatError, load_trace
from scaling.sim.policies import ALIASES, POLICIES
from scaling.sim.profiles import DEFAULT_PROFILE, PROFILES, SCHEDULING_POLICIES, get_profile
from scaling.sim.route_mode import FallbackRoute
from scaling.sim.runner import MODES, simulate
from scaling.sim.transforms import rate_scale, surge, time_scale, time_shift
from scaling.sim.workload import Workload

LARGE_WORKLOAD_REQUESTS = 500_000
DEFAULT_WARMUP_S = 600.0  # a running pool's last 10 minutes: causal policies start warm
DEFAULT_FALLBACK_REPLICAS = 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors, in our format
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m scaling.sim.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True, help="trace file (Azure CSV, Mooncake JSONL, ServeGen CSV or tar.gz)")
    parser.add_argument("--format", default="auto", choices=FORMATS)
    parser.add_argument("--rate-scale", type=float, default=1.0, metavar="K", help="multiply the request rate by K")
    parser.add_argument("--time-scale", type=float, default=1.0, metavar="K", help="stretch time by K (K=2: half the rate)")
    parser.add_argument("--time-shift-s", type=float, default=0.0, metavar="S", help="start the trace S seconds later")
    parser.add_argument("--surge", metavar="K:MINUTES", help="ramp to K x the trace over MINUTES, hold, decay")
    parser.add_argument("--policy", required=True, choices=sorted(POLICIES) + sorted(ALIASES),
                        help="oracle is the earlier name of clairvoyant")
    parser.add_argument("--replicas", type=int, help="static pool size (default: the smallest that meets the SLO)")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES))
    parser.add_argument("--cold-start-s", type=float, metavar="S", help="cold-start p50; p95 keeps the profile's ratio")
    parser.add_argument("--slo-ttft-ms", type=float, default=1000.0, metavar="MS")
    parser.add_argument("--slo-objective", type=float, default=0.99, help="share of requests that must meet the TTFT SLO")
    parser.add_argument("--min-replicas", type=int, default=1)
    parser.add_argument("--max-replicas", type=int, default=100)
    parser.add_argument("--queue-limit", type=int, help="waiting requests before the router answers 503")
    parser.add_argument("--timeout-s", type=float, help="client timeout on the whole response")
    parser.add_argument("--retries", type=int, default=0, help="client retries after a timeout or 503")
    parser.add_argument("--mode", default="request", choices=sorted(MODES))
    parser.add_argument("--fluid-step-s", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-s", type=float, default=DEFAULT_WARMUP_S, metavar="S",
                        help="the first S seconds are seen by every policy and not scored (default 600)")
    parser.add_argument("--misses-by-minute", action="store_true",
                        help="add slo_misses_by_minute: requests that missed the TTFT SLO by minute of arrival (request mode)")
    parser.add_argument("--fallback", metavar="PROFILE", choices=sorted(PROFILES),
                        help="route over the pool and a fallback pool of this profile (request mode)")
    parser.add_argument("--fallback-replicas", type=int, metavar="N",
                        help=f"warm replicas of the fallback pool (default {DEFAULT_FALLBACK_REPLICAS})")
    parser.add_argument("--priority-share", type=float, metavar="F",
                        help="share of requests in the priority class, which never falls back (default 0)")
    parser.add_argument("--fallback-spillover", type=float, metavar="F",
                        help="also send an eligible request to the fallback, active or standing by, when the "
                             "primary would start it later than F x the SLO (per-request spill-over; default off)")
    parser.add_argument("--scheduling-policy", choices=SCHEDULING_POLICIES, metavar="POLICY",
                        help="how each replica of the route's pools picks its next waiting request, as vLLM's "
                             "--scheduling-policy: fcfs (default) in arrival order, priority the priority class first")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def config_from(args: argparse.Namespace) -> SimConfig:
    profile = get_profile(args.profile)
    config = SimConfig.for_profile(profile)
    cold_start = config.cold_start
    if args.cold_start_s is not None:
        if args.cold_start_s <= 0:
            raise UsageError("--cold-start-s must be positive")
        cold_start = ColdStart(args.cold_start_s, args.cold_start_s * profile.cold_start_p95_s / profile.cold_start_p50_s)
    if args.min_replicas < 0 or args.max_replicas < max(1, args.min_replicas):
        raise UsageError("need 0 <= --min-replicas <= --max-replicas and --max-replicas >= 1")
    return dataclasses.replace(
        config,
        cold_start=cold_start,
        slo_ttft_s=args.slo_ttft_ms / 1000.0,
        slo_objective=args.slo_objective,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        queue_limit=args.queue_limit,
        client=ClientConfig(timeout_s=args.timeout_s, max_retries=args.retries),
        fluid_step_s=args.fluid_step_s,
        seed=args.seed,
        warmup_s=args.warmup_s,
    )


def fallback_from(args: argparse.Namespace) -> FallbackRoute | None:
    if args.fallback is None:
        for flag, value in (("--fallback-replicas", args.fallback_replicas), ("--priority-share", args.priority_share),
                            ("--fallback-spillover", args.fallback_spillover),
                            ("--scheduling-policy", args.scheduling_policy)):
            if value is not None:
                raise UsageError(f"{flag} needs --fallback PROFILE")
        return None
    if args.mode != "request":
        raise UsageError("--fallback needs --mode request")
    if args.timeout_s is not None or args.retries or args.queue_limit is not None:
        raise UsageError("--fallback does not model client timeouts, retries or --queue-limit; leave them out")
    replicas = DEFAULT_FALLBACK_REPLICAS if args.fallback_replicas is None else args.fallback_replicas
    if replicas < 1:
        raise UsageError("--fallback-replicas must be at least 1")
    priority_share = 0.0 if args.priority_share is None else args.priority_share
    if not 0.0 <= priority_share <= 1.0:
        raise UsageError("--priority-share must be between 0 and 1")
    if args.fallback_spillover is not None and not args.fallback_spillover > 0:
        raise UsageError("--fallback-spillover must be positive")
    return FallbackRoute(get_profile(args.fallback), replicas, priority_share,
                         spillover_wait_share=args.fallback_spillover,
                         scheduling_policy=args.scheduling_policy or "fcfs")


def workload_from(args: argparse.Namespace) -> Workload:
    workload = load_trace(args.trace, args.format)
    if args.rate_scale != 1.0:
        workload = rate_scale(workload, args.rate_scale, args.seed)
    if args.time_scale != 1.0:
        workload = time_scale(workload, args.time_scale)
    if args.time_shift_s:
        workload = time_shift(workload, args.time_shift_s)
    if args.surge:
        factor, _, minutes = args.surge.partition(":")
        try:
            workload = surge(workload, float(factor), float(minutes), seed=args.seed)
        except ValueError:
            raise UsageError(f"--surge expects K:MINUTES with positive numbers, got {args.surge!r}") from None
    return workload


def format_table(report: dict[str, object]) -> str:
    rows = [(key, json.dumps(value) if isinstance(value, (dict, list)) else str(value)) for key, value in report.items()]
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def _progress(done_s: float, total_s: float) -> None:
    share = 100 * done_s / total_s if total_s else 100
    print(f"replay: {share:5.1f}% ({done_s:,.0f} of {total_s:,.0f} simulated seconds)", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    started = time.perf_counter()
    try:
        args = build_parser().parse_args(argv)
        config = config_from(args)
        if args.misses_by_minute and args.mode != "request":
            raise UsageError("--misses-by-minute needs --mode request (fluid mode scores aggregates, not requests)")
        fallback = fallback_from(args)
        workload = workload_from(args)
        if not 0 <= args.warmup_s < workload.span_s:
            raise UsageError(f"--warmup-s must be at least 0 and shorter than the trace ({workload.span_s:.0f} s)")
        if args.policy in ("clairvoyant", "oracle", "static") and workload.expected_requests > LARGE_WORKLOAD_REQUESTS:
            print(f"replay: sizing {args.policy} by searching with replays first", file=sys.stderr, flush=True)
        result = simulate(workload, config, args.policy, args.mode, args.replicas, progress=_progress,
                          fallback=fallback)
    except (UsageError, TraceFormatError, ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2
    result.wall_s = round(time.perf_counter() - started, 3)
    report = result.as_json()
    if args.misses_by_minute:
        report["slo_misses_by_minute"] = {str(minute): count for minute, count in (result.misses_by_minute or {}).items()}
    print(json.dumps(report) if args.json else format_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
