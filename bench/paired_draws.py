"""The suite's cases under several draws of the replay's own chance, every policy on the same draws.

    .venv/bin/python bench/paired_draws.py [--traces ../shared/traces] [--cases LABEL,...] [--draws N]
        [--seed-offset N] [--pool FIELD=VALUE ...] [--reactive-max-percent P] [--pool-at-surge NAME] [--json]
    .venv/bin/python bench/paired_draws.py --trace PATH [--rate-scale K ...] [--surge FACTOR:MINUTES ...] ...

Why: one replay is one draw of the cold starts (60 s p50, 90 s p95 each) and of the clients' retry
jitter. On a surge that ramps faster than a cold start, whether the replicas started at its first tick
are ready at 60 s or at 85 s moves a case's attainment by a point, so a single replay's "below a
baseline" can be the draw's doing. Here each case of `bench/headroom_suite.py` is replayed under
`--draws` draws (`SimConfig.seed` 0..N-1; the arrivals are the case's own, fixed by `--seed-offset`),
every policy under the same draws (common random numbers: the k-th replica any policy starts gets
the same cold start), and per draw headroom's attainment minus each tuned baseline's, counting nothing
past the objective (as the suite's "below"). A case is below a baseline when the 95 % bootstrap
interval of the mean difference lies wholly under 0 and headroom's mean attainment is short of the
objective; above when the interval is wholly over 0; "level" otherwise.

`--pool-at-surge NAME` (keda-queue or hpa-util) replays headroom once more per draw, on the cases with
a surge, holding at least the replicas NAME's run of the same draw had ready when the surge began,
from 5 minutes before it until its ramp ends: the pool the surge found, which no decision taken once it
began can change before a cold start has passed (issue 12 leaves unforeseeable surges to the warm pool
and the fallback model). What difference is left is headroom's reaction.

`--trace PATH` replaces the suite's cases with `bench/unseen_traffic.py`'s on that trace (as it is, at each
`--rate-scale`, under each `--surge`; `--seed-offset` seeds their copies): the held-out judgment over draws.

The pool's plan is load-tested once per case (draw 0), as a pool is load-tested once before it serves.
About 3 CPU-s per replay on `conv`, 6 on `code`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.headroom_suite import (  # noqa: E402
    CASES, add_guardrail_argument, parse_overrides, with_overrides, workload_for)
from bench.unseen_traffic import load_or_exit, parse_surge, positive, trace_cases  # noqa: E402
from scaling.sim.config import SimConfig  # noqa: E402
from scaling.sim.loaders import FORMATS  # noqa: E402
from scaling.sim.policies import PolicyContext, build_policy  # noqa: E402
from scaling.sim.policies.headroom import HeadroomPolicy, pool_plan_for  # noqa: E402
from scaling.sim.profiles import DEFAULT_PROFILE, get_profile  # noqa: E402
from scaling.sim.request_mode import run_request_mode  # noqa: E402
from scaling.sim.transforms import SURGE_START_SHARE  # noqa: E402

BASELINES = ("keda-queue", "hpa-util")
BOOTSTRAP_RESAMPLES = 10_000
HOLD_BEFORE_SURGE_S = 300.0  # the pool the surge found: held from this long before it began to the ramp's end


@dataclass(frozen=True)
class HeldAtSurge:
    """A policy whose replicas are at least `replicas` from `start_s` to `end_s` (the pool a surge found)."""

    inner: Any
    replicas: int
    start_s: float
    end_s: float

    @property
    def name(self) -> str:
        return f"{self.inner.name} (held at {self.replicas})"

    @property
    def tick_s(self) -> float:
        return self.inner.tick_s

    @property
    def observes_latency(self) -> bool:
        return bool(getattr(self.inner, "observes_latency", False))

    def new_state(self) -> Any:
        return self.inner.new_state()

    def decide(self, now: float, observation: Any, state: Any) -> int:
        desired = self.inner.decide(now, observation, state)
        return max(desired, self.replicas) if self.start_s <= now < self.end_s else desired


def surge_start_s(workload, start_share: float | None) -> float:
    """When a case's surge begins (`scaling.sim.transforms.surge`: a third of the way in by default)."""
    return workload.span_s * (SURGE_START_SHARE if start_share is None else start_share)


def ready_at(result, at_s: float) -> int:
    """The ready replicas of the last tick at or before `at_s` (a replay's samples, one per tick)."""
    ready = [o.ready_replicas for o in result.samples if o.now <= at_s]
    if not ready:
        raise ValueError(f"no tick at or before {at_s:g} s")
    return ready[-1]


def paired_difference(ours: list[float], theirs: list[float], objective: float, seed: int = 0) -> dict[str, float]:
    """Mean of `ours - theirs` over paired draws (each capped at the objective), its 95 % bootstrap interval,
    the share of draws where ours is at least theirs, and the verdict."""
    if len(ours) != len(theirs) or not ours:
        raise ValueError(f"need the same draws on both sides, got {len(ours)} and {len(theirs)}")
    diffs = np.minimum(ours, objective) - np.minimum(theirs, objective)
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(diffs), (BOOTSTRAP_RESAMPLES, len(diffs)))].mean(axis=1)
    low, high = (float(q) for q in np.quantile(means, [0.025, 0.975]))
    # below: the interval wholly under 0 and our mean short of the objective (a mean that meets it is the
    # suite's "nothing past the objective" for the draws together); above: wholly over; level: it holds 0.
    # Read before rounding.
    below = high < 0 and float(np.mean(ours)) < objective
    verdict = "below" if below else "above" if low > 0 else "level"
    return {"mean": round(float(diffs.mean()), 4), "low": round(low, 4), "high": round(high, 4),
            "at_least_share": round(float(np.mean(diffs >= 0)), 3), "verdict": verdict}


def spread(values: list[float]) -> dict[str, object]:
    """Mean, standard deviation and range over the draws, and each draw's value (draw 0 first)."""
    return {"mean": round(float(np.mean(values)), 4), "sd": round(float(np.std(values)), 4),
            "min": round(min(values), 4), "max": round(max(values), 4), "draws": [round(v, 4) for v in values]}


def draw_case(label: str, workload, start_share: float | None, ramp_s: float | None, config: SimConfig,
              overrides: dict[str, float], args: argparse.Namespace) -> dict[str, object]:
    """One case under `args.draws` draws; `ramp_s`: its surge's ramp (None: no surge)."""
    surged = ramp_s is not None
    pool = with_overrides(pool_plan_for(config, workload), overrides)
    policy = HeadroomPolicy(pool, tick_s=config.tick_s or 15.0, reactive_max_percent=args.reactive_max_percent)
    context = PolicyContext(workload, config, lambda p: run_request_mode(workload, config, p))
    baselines = {name: build_policy(name, context) for name in BASELINES}
    start = surge_start_s(workload, start_share)
    runs: dict[str, list] = {name: [] for name in ("headroom", *BASELINES)}
    held: list = []
    for draw in range(args.draws):
        drawn = dataclasses.replace(config, seed=draw)
        runs["headroom"].append(run_request_mode(workload, drawn, policy))
        for name, baseline in baselines.items():
            runs[name].append(run_request_mode(workload, drawn, baseline))
        if args.pool_at_surge and surged:
            found = ready_at(runs[args.pool_at_surge][-1], start)
            held.append(run_request_mode(workload, drawn, HeldAtSurge(
                policy, found, start - HOLD_BEFORE_SURGE_S, start + ramp_s)))
        print(f"paired_draws: {label}: draw {draw + 1} of {args.draws}", file=sys.stderr, flush=True)
    attainment = {name: [r.slo_attainment for r in results] for name, results in runs.items()}
    row: dict[str, object] = {"case": label, "draws": args.draws}
    for name, results in runs.items():
        row[name] = {"slo_attainment": spread(attainment[name]),
                     "gpu_hours": round(float(np.mean([r.gpu_hours for r in results])), 3)}
    if surged:
        row["ready_at_surge"] = {name: spread([float(ready_at(r, start)) for r in results])
                                 for name, results in runs.items()}
    row["headroom_minus"] = {}
    for name in BASELINES:
        row["headroom_minus"][name] = paired_difference(attainment["headroom"], attainment[name],  # type: ignore[index]
                                                         config.slo_objective)
    if held:
        theirs = attainment[args.pool_at_surge]
        row["held_at_surge_pool"] = {
            "of": args.pool_at_surge, "slo_attainment": spread([r.slo_attainment for r in held]),
            "gpu_hours": round(float(np.mean([r.gpu_hours for r in held])), 3),
            "minus": paired_difference([r.slo_attainment for r in held], theirs, config.slo_objective)}
    return row


def markdown(rows: list[dict]) -> str:
    lines = ["| case | headroom att. (sd) / GPU-h | keda-queue | hpa-util | headroom − keda-queue [95 %] | "
             "headroom − hpa-util [95 %] | held at the surge's pool − its owner [95 %] |",
             "|---|---|---|---|---|---|---|"]

    def cell(row: dict, name: str) -> str:
        attainment = row[name]["slo_attainment"]
        return f"{attainment['mean']:.4f} ({attainment['sd']:.4f}) / {row[name]['gpu_hours']:.2f}"

    def diff(d: dict) -> str:
        return f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}] {d['verdict']}"

    for row in rows:
        held = row.get("held_at_surge_pool")
        lines.append(f"| {row['case']} | {cell(row, 'headroom')} | {cell(row, 'keda-queue')} | {cell(row, 'hpa-util')} | "
                     f"{diff(row['headroom_minus']['keda-queue'])} | {diff(row['headroom_minus']['hpa-util'])} | "
                     f"{diff(held['minus']) if held else '–'} |")
    return "\n".join(lines)


def cases_of(args: argparse.Namespace, wanted: set[str], config: SimConfig):
    """(label, workload, surge start as a share of the span or None for a third, ramp in seconds or None)."""
    if args.trace is not None:
        trace = load_or_exit(args.trace, args.format, config.warmup_s)
        for label, workload, ramp_s in trace_cases(trace, args.label or args.trace.stem, args.rate_scale, args.surge,
                                                   args.seed_offset):
            yield label, workload, None, ramp_s
        return
    for label, file_name, scale, surge_spec, start_share, seed, prompts in CASES:
        if wanted and label not in wanted:
            continue
        workload = workload_for(Path(args.traces), file_name, scale, surge_spec, start_share, seed + args.seed_offset, prompts)
        yield label, workload, start_share, float(surge_spec.split(":")[1]) * 60.0 if surge_spec else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--cases", default="", metavar="LABEL,...", help="only these cases (default: all)")
    parser.add_argument("--draws", type=int, default=10, metavar="N", help="draws per case (default 10, at least 2)")
    parser.add_argument("--seed-offset", type=int, default=0, help="the cases' arrivals, as the suite's option")
    parser.add_argument("--pool", action="append", default=[], metavar="FIELD=VALUE")
    add_guardrail_argument(parser)
    parser.add_argument("--pool-at-surge", choices=BASELINES, default=None,
                        help="also replay headroom holding the pool this baseline had when each surge began")
    parser.add_argument("--trace", type=Path, metavar="PATH",
                        help="instead of the suite's cases, a trace of bench/unseen_traffic.py's: as it is, at each "
                             "--rate-scale and under each --surge")
    parser.add_argument("--format", default="auto", choices=FORMATS)
    parser.add_argument("--label", default="", help="the trace's cases' name (default: the file's)")
    parser.add_argument("--rate-scale", action="append", default=[], type=positive, metavar="K")
    parser.add_argument("--surge", action="append", default=[], type=parse_surge, metavar="FACTOR:MINUTES")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.draws < 2:
        parser.error(f"--draws: at least 2 (an interval needs two draws), got {args.draws}")
    if args.trace is None and (args.rate_scale or args.surge):
        parser.error("--rate-scale and --surge reshape a --trace; the suite's cases have their own")
    if args.trace is not None and args.cases:
        parser.error("--cases picks among the suite's cases; with --trace the cases are the trace's")
    overrides = parse_overrides(args.pool)
    wanted = {label.strip() for label in args.cases.split(",") if label.strip()}
    unknown = wanted - {case[0] for case in CASES}
    if unknown:
        parser.error(f"--cases: unknown case {sorted(unknown)[0]!r}; known: {', '.join(case[0] for case in CASES)}")
    config = SimConfig.for_profile(get_profile(DEFAULT_PROFILE), slo_ttft_s=1.0, warmup_s=600.0)
    rows = []
    for label, workload, start_share, ramp_s in cases_of(args, wanted, config):
        row = draw_case(label, workload, start_share, ramp_s, config, overrides, args)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
    if not args.json:
        print(markdown(rows))
    else:
        print(json.dumps({"summary": {name: [r["case"] for r in rows if r["headroom_minus"][name]["verdict"] == "below"]
                                      for name in BASELINES}}))


if __name__ == "__main__":
    main()
