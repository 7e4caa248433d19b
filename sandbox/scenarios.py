"""Named traffic scenarios for the sandbox, as request traces in model seconds.

- `idle`: no traffic.
- `steady`: Poisson arrivals, `BASE_RPS_PER_POOL` per pool, conversation-like token lengths.
- `surge`: the steady load with a 10x surge from minute 2 to minute 7 of every 15 minutes.
- `surge-10x`: one such surge and then the end: 2 minutes steady, 5 minutes at 10x, 1 minute steady
  (8 minutes, finite: what `manage.py demo --headless` scores). The headless run backfills yesterday
  as `surge_history_rate`: the same hour held a 30-minute peak, so the loop forecasts it.
- `daily`: the steady load with a 15x peak of 30 minutes once a day, 2 h 15 min into the scenario's
  day. Live traffic continues the backfilled history's timeline, so with `--history 26` the past
  holds yesterday's peak and today's comes 10 minutes after the start: a forecaster can see it coming.
- `story`: the demo's scripted day (`manage.py demo --scenario story`, sandbox/story.py): a quiet start,
  an unforeseen 10x surge from minute 5 to minute 12, calm again, and then the peak that yesterday's
  backfilled history foretold (15x for 30 wall minutes, 10 wall minutes after the start at 2x or faster).
  The peak is placed on the wall clock (the forecaster's days are wall days), so its model time depends
  on the speed.
- `azure-conv`, `azure-code`: the shared Azure LLM inference traces, replayed (looped) through the
  simulator's loaders.
"""
from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path

from sandbox.traffic import TraceRequest, load_trace_file

BASE_RPS_PER_POOL = 2.0
SURGE_FACTOR = 10.0
SURGE_START_S, SURGE_END_S, SURGE_PERIOD_S = 120.0, 420.0, 900.0
PROMPT_MEDIAN, OUTPUT_MEDIAN = 500, 100
TRACE_FILES = {"azure-conv": "AzureLLMInferenceTrace_conv.csv", "azure-code": "AzureLLMInferenceTrace_code.csv"}
SURGE_10X_END_S = 480.0  # `surge-10x` stops after one surge and a calm minute
SCENARIOS = ("idle", "steady", "surge", "surge-10x", "daily", "story", *TRACE_FILES)
DAILY_FACTOR, DAILY_START_S, DAILY_END_S, DAY_S = 15.0, 8100.0, 9900.0, 86400.0
# The story's timeline in model seconds (its peak's length in wall seconds: the forecaster's bins are wall time).
STORY_SURGE_START_S, STORY_SURGE_END_S = 300.0, 720.0
STORY_REPORT_AT_S = STORY_SURGE_END_S + 240.0  # the warm-pool report, once the fallback has handed back (story.py)
STORY_PEAK_WALL_S = 1800.0


def story_peak_wall_s(speed: float) -> float:
    """When the forecast peak starts, in wall seconds from the start: 10 minutes, and never before the report has
    had two minutes to run (its replay shares the demo's CPU with the peak's traffic)."""
    return max(600.0, STORY_REPORT_AT_S / speed + 120.0)


def story_rate(t: float, base: float, speed: float = 1.0) -> float:
    """The story's request rate at model second `t`: base, the 10x surge, then the forecast peak (15x)."""
    if STORY_SURGE_START_S <= t < STORY_SURGE_END_S:
        return base * SURGE_FACTOR
    peak_start = story_peak_wall_s(speed) * speed
    if peak_start <= t < peak_start + STORY_PEAK_WALL_S * speed:
        return base * DAILY_FACTOR
    return base


def story_history_rate(t_wall: float, base: float, speed: float = 1.0) -> float:
    """Yesterday's request rate, per wall second, `t_wall` seconds from the story's start (negative: the
    past): the base load, and a day before the peak the same 15x peak (no surge: today's is unforeseen).
    Per wall second, as the loop reads the live pool at `speed` (K model seconds per wall second)."""
    peak_wall_start = story_peak_wall_s(speed) - DAY_S
    in_peak = peak_wall_start <= t_wall < peak_wall_start + STORY_PEAK_WALL_S
    return base * speed * (DAILY_FACTOR if in_peak else 1.0)


YESTERDAY_PEAK_WALL_S = 1800.0  # `surge_history_rate`: yesterday's peak lasted 30 wall minutes


def surge_history_rate(t_wall: float, base: float, speed: float, peak_factor: float) -> float:
    """Yesterday's request rate for `surge-10x` (`manage.py demo --headless`), per wall second, `t_wall`
    seconds from the start (negative: the past): the base load, and from the surge's onset a day before,
    `peak_factor` times it for 30 wall minutes: the day's peak, which the loop's forecast sees coming
    (its days are wall days). Today it comes as the scenario's 5-minute surge."""
    onset = SURGE_START_S / speed - DAY_S
    in_peak = onset <= t_wall < onset + YESTERDAY_PEAK_WALL_S
    return base * speed * (peak_factor if in_peak else 1.0)


def _tokens(chooser: random.Random, median: int, sigma: float, cap: int) -> int:
    return max(1, min(cap, int(chooser.lognormvariate(math.log(median), sigma))))


def poisson(rate_at: Callable[[float], float], seed: int = 0, peak_rps: float | None = None) -> Iterator[TraceRequest]:
    """Arrivals of a Poisson process whose rate (req/s) may change with time (thinning).

    `peak_rps` bounds the rate; by default it is found over the first `SURGE_PERIOD_S`.
    """
    chooser = random.Random(seed)
    peak = peak_rps or max(rate_at(t) for t in range(0, int(SURGE_PERIOD_S), 10)) or 1e-9
    t = 0.0
    while True:
        t += chooser.expovariate(peak)
        if chooser.random() * peak <= rate_at(t):
            yield TraceRequest(t, _tokens(chooser, PROMPT_MEDIAN, 0.5, 4000),
                               _tokens(chooser, OUTPUT_MEDIAN, 0.6, 1000))


def _looped(path: Path) -> Iterator[TraceRequest]:
    offset = 0.0
    for _ in itertools.count():
        last = 0.0
        for request in load_trace_file(str(path)):
            last = request.t_s
            yield TraceRequest(offset + request.t_s, request.prompt_tokens, request.output_tokens)
        offset += last + 1.0


def continued(trace: Iterator[TraceRequest], offset_s: float) -> Iterator[TraceRequest]:
    """The trace from `offset_s` on, re-timed to start at 0: live traffic after `offset_s` of history."""
    for request in trace:
        if request.t_s >= offset_s:
            yield TraceRequest(request.t_s - offset_s, request.prompt_tokens, request.output_tokens)


def scenario_trace(name: str, pools: int, traces_dir: Path | None = None,
                   seed: int = 0, speed: float = 1.0) -> Iterator[TraceRequest] | None:
    """The scenario's endless request stream, or None for `idle`. ValueError on an unknown name.
    `speed` places the story's forecast peak on the wall clock (the other scenarios ignore it)."""
    base = BASE_RPS_PER_POOL * max(1, pools)
    if name == "idle":
        return None
    if name == "steady":
        return poisson(lambda t: base, seed)
    if name in ("surge", "surge-10x"):
        def rate(t: float) -> float:
            in_surge = SURGE_START_S <= t % SURGE_PERIOD_S < SURGE_END_S
            return base * (SURGE_FACTOR if in_surge else 1.0)
        if name == "surge":
            return poisson(rate, seed)
        return itertools.takewhile(lambda request: request.t_s < SURGE_10X_END_S, poisson(rate, seed))
    if name == "daily":
        def daily_rate(t: float) -> float:
            in_peak = DAILY_START_S <= t % DAY_S < DAILY_END_S
            return base * (DAILY_FACTOR if in_peak else 1.0)
        return poisson(daily_rate, seed, peak_rps=base * DAILY_FACTOR)
    if name == "story":
        return poisson(lambda t: story_rate(t, base, speed), seed, peak_rps=base * DAILY_FACTOR)
    if name in TRACE_FILES:
        if traces_dir is None:
            raise ValueError(f"scenario {name} needs the traces directory (HEADROOM_TRACES_DIR)")
        path = traces_dir / TRACE_FILES[name]
        if not path.is_file():
            raise ValueError(f"scenario {name} needs {path}, which does not exist")
        return _looped(path)
    raise ValueError(f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}")
