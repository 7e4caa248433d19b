"""The planner's constants in one place: each value, where it came from, and the bounds a pool may override it within.

`PoolPlan` (planner.py) takes its defaults from here. A pool may override any of `OVERRIDABLE` through
its `planner_constants` JSON field (API, form; validated by `parse_overrides`, applied by
`apply_overrides`). "Fitted on" says which data chose the value, so a figure judged on the same data
is not mistaken for a held-out one: the suite's `code` cases and ServeGen's first week are the
training side, its `conv` cases and ServeGen's second week the held-out side (docs/engine.md,
"Constants"). Values that are a protocol or a product default rather than a fit say so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar


@dataclass(frozen=True)
class Constant:
    value: float
    fitted_on: str  # the data (or the rule) that chose the value
    low: float  # the bounds a pool override must stay within (inclusive)
    high: float
    whole: bool = False  # a count of replicas: a whole number


SUITE_ALL = "bench/headroom_suite.py seed offset 0, all ten Azure cases (code and conv: not held out)"

CONSTANTS: dict[str, Constant] = {
    # The reactive terms.
    "request_rate_margin": Constant(1.0, SUITE_ALL + "; 1.25/1.5/2 bought attainment at a steeper price", 0.0, 4.0),
    "queue_term_rate_multiple": Constant(3.0, SUITE_ALL + "; 2 starved conv surges", 0.0, 20.0),
    # The rate a lead time ahead if it keeps growing as it grew over the last minute, at most this multiple
    # of the rate lately (1: off). Rule: the issue's own order (attainment at least
    # the tuned baselines' on every case, then the fewest GPU-hours): the smallest cap with every code case
    # at least the tuned keda-queue's and hpa-util's attainment and none dominated by a static pool. Session
    # 13, of 1-2: 1.75. Refitted by the same rule in session 15, when the correction stopped learning from
    # latency served by fewer replicas (PoolPlan.latency_window_s), of 1.75, 2, 2.25 and 2.5: 2.25 (2 leaves
    # code surge 10:5 s1 at 0.8930 against hpa-util's 0.9048; at 2.5 a static 14 dominates code surge 4:10);
    # judged on conv and week 2. Session 16, when the replay began to read the rate over a minute as the live
    # loop does: no cap of 2.25, 3, 3.5 and 4 meets the rule (3 and 3.5 leave code surge 10:5 s1 below
    # hpa-util, 4 lets a static 14 dominate code surge 4:10), so it stays (docs/benchmarks.md, session 16).
    "rate_trend_cap": Constant(2.25, "the suite's code cases (seed offset 0) against the tuned baselines and "
                                     "static pools", 1.0, 4.0),
    # The guardrails.
    "scale_up_pods": Constant(4, "the Kubernetes HPA default (+4 pods a period)", 1, 1000, whole=True),
    # 900 (10x a period) was chosen on all the suite's cases before the training split, when it bought
    # shortfall; since session 12's predictive cap it buys none on the code cases (seed offsets 0 and 10:
    # the same shortfall, 0.1-0.3 % fewer GPU-hours), and a fit that earns under 1 % gives way to the default.
    "scale_up_percent": Constant(100.0, "the Kubernetes HPA default (+100 % a period); 900 earned nothing on the "
                                        "code cases at seed offsets 0 and 10", 0.0, 10000.0),
    "scale_down_window_s": Constant(300.0, "the Kubernetes HPA default stabilization window", 0.0, 3600.0),
    "scale_down_pods": Constant(1, "a product default: a quarter a minute at most", 1, 1000, whole=True),
    "scale_down_percent": Constant(25.0, "a product default: a quarter a minute at most", 0.0, 100.0),
    # The forecast.
    "recent_peak_factor": Constant(1.0, SUITE_ALL + "; 2 cost 27 % more GPU-hours for more misses", 0.5, 10.0),
    # The recent past whose peak caps the predictive band. Rule, fixed before judging: of 2 (the default
    # lead time), 5, 10, 15 and 30 minutes, the fewest GPU-hours on the code cases with their mean shortfall
    # within 0.001 of 30 minutes' and every day of ServeGen's week 1 at 0.99; judged on conv and week 2.
    "lead_peak_window_s": Constant(120.0, "the suite's code cases (seed offset 0) and ServeGen m-small week 1",
                                   60.0, 3600.0),
    # The busy-share term (0: off). 0.3: of 0.3, 0.35, 0.4 and 0.5, the largest with every code case at least the
    # tuned baselines' attainment and none dominated (with the approval guardrail at +100 %; the target tuned
    # hpa-util reads the same signal at); judged on conv, seed offset 10 and Mooncake. It reads the work share,
    # known only on a pool that states its batch slots or prefill throughput: elsewhere it has no opinion.
    # Acting every tick it held the busy share at the target all day on smooth traffic (ServeGen week 1:
    # 1.53-1.57x the clairvoyant's GPU-hours a day, against the 1.25x target; docs/benchmarks.md, "A busy share
    # read at the tick"); the onset below removes that cost. On by default since session 20: over 10 paired
    # draws of every suite case it leaves one held-out case below hpa-util, at one seed offset of two, and that
    # one is above it from the same pool the surge found (docs/benchmarks.md, "Paired draws"); its cost is
    # GPU-hours on bursty traffic that already meets the objective (code: 5.9 against 4.5).
    "busy_share_target": Constant(0.3, "the suite's code cases (seed offset 0)", 0.0, 1.0),
    # The term acts only at an onset: the tick's busy replicas (busy share x ready) at least this multiple
    # of their mean over the previous minute (0: every tick, as session 18's term and the HPA). Rule, fixed before
    # judging: of 1.2, 1.5, 2 and 3, every code case at least the tuned baselines' attainment and none dominated,
    # every day of ServeGen's week 1 at 0.99 within 1.25x the clairvoyant's GPU-hours, then the fewest GPU-hours
    # (ties to the smaller, which sees more onsets). 1.2-2 give the same code runs (its bursts rise 2x and more
    # a tick); 3 leaves code surge 10:5 s1 below hpa-util; week 1 costs 0.815x at 1.2, 0.813x at 1.5 and 2.
    # Judged on conv, seed offset 10, ServeGen's week 2 and Mooncake.
    "busy_share_onset": Constant(1.5, "the suite's code cases (seed offset 0) and ServeGen m-small week 1", 0.0, 10.0),
    # Set, not fitted: a busy share this high cannot show how much more load waits, so the term acts without an
    # onset (a surge's second minute saturates the replicas the first one brought).
    "busy_share_saturated": Constant(0.9, "set, not fitted: 0.9 reads as saturated", 0.5, 1.0),
    # The capacity correction.
    "correction_min": Constant(0.5, "tests/engine/test_planner.py convergence (synthetic, 0.8-1.2x truth); the suite", 0.1, 1.0),
    "correction_max": Constant(1.5, "the same; 1.0 on a live pool without a load-tested curve (decide.py)", 1.0, 3.0),
    "correction_gain": Constant(0.1, "the convergence test: settles within 5 % in two hours of 15-s ticks", 0.01, 1.0),
    "correction_min_load": Constant(0.5, "the convergence test: below half the capacity latency says little", 0.0, 1.0),
    "correction_queue_share": Constant(0.1, "set, not fitted: a tenth of the SLO spent waiting is load's doing "
                                            "(issue 12 item 6; the long-prompt case is held out)", 0.0, 1.0),
    # The planning margin for bursts. Rule, fixed before judging: the largest value with every day of
    # ServeGen's week 1 at 0.99 and the code cases' mean shortfall no worse than before it (0.9 fails the
    # second, 1.0 the first); then judged on week 2 and the conv cases (docs/benchmarks.md).
    "capacity_utilisation": Constant(0.85, "ServeGen m-small week 1 per day, the suite's code cases (seed offset 0)",
                                     0.3, 1.0),
    # The pre-scale protocol (design.md section 6: a protocol, not a fit).
    "prescale_ratio": Constant(3.0, "design.md section 6: >= 3x the current load within 30 minutes", 1.0, 100.0),
    "prescale_buffer": Constant(0.5, "design.md section 6: the warm pool + 50 %", 0.0, 5.0),
    "prescale_cooldown_s": Constant(900.0, "a product default: a proposal is not repeated every tick", 0.0, 86400.0),
}

# Every constant above may be overridden per pool (the timers of unknown signals are not here: their
# 60 s / 90 s are the staleness contract, design.md section 6).
OVERRIDABLE = tuple(CONSTANTS)

T = TypeVar("T")


def default(name: str) -> Any:
    """The value `PoolPlan` starts from (an int for whole counts)."""
    constant = CONSTANTS[name]
    return int(constant.value) if constant.whole else float(constant.value)


def parse_overrides(raw: Any) -> dict[str, float]:
    """A pool's `planner_constants`, validated: {name: number} within each constant's bounds.

    Raises ValueError with a message fit to show next to the field.
    """
    if raw in (None, ""):
        return {}
    if not isinstance(raw, dict):
        raise ValueError('must be an object, e.g. {"request_rate_margin": 1.25}')
    unknown = sorted(set(raw) - set(OVERRIDABLE))
    if unknown:
        raise ValueError(f"unknown constant {unknown[0]!r}; known: {', '.join(OVERRIDABLE)}")
    values: dict[str, float] = {}
    for name, value in raw.items():
        constant = CONSTANTS[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number")
        try:
            value = float(value)  # an integer of hundreds of digits overflows here, not in a later comparison
        except OverflowError:
            raise ValueError(f"{name} must be between {constant.low:g} and {constant.high:g}") from None
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a number")
        if constant.whole and value != int(value):
            raise ValueError(f"{name} must be a whole number")
        if not constant.low <= value <= constant.high:
            raise ValueError(f"{name} must be between {constant.low:g} and {constant.high:g}, got {value:g}")
        values[name] = int(value) if constant.whole else float(value)
    if values.get("correction_min", default("correction_min")) > values.get("correction_max", default("correction_max")):
        raise ValueError("correction_min must not exceed correction_max")
    return values


def apply_overrides(plan: T, overrides: dict[str, float]) -> T:
    """`plan` (a PoolPlan) with the pool's validated overrides."""
    names = {f.name for f in fields(plan)}  # type: ignore[arg-type]
    return replace(plan, **{name: value for name, value in overrides.items() if name in names})  # type: ignore[type-var]
