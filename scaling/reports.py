"""Warm-pool reports: what each warm-pool size would have cost and bought on a pool's own traffic.

Pure Python (no Django, so it is fast to test and runs in any worker): the caller hands over the
traffic (a `Workload`: the pool's stored request rates or a trace) and a `ReportSpec` (profile,
cold starts, SLO, prices, sizes). Each size is replayed in fluid mode under the `headroom` policy,
the live loop's decide step (`scaling/engine/decide.py`), with the warm floor set to that share of
the expected peak; everything else is the same for every size, including the load-tested capacity.
When the pool has a fallback model, each size is also replayed request by request through route mode
(`with_fallback`). For an incident (`ReportSpec.what_if`), the window is replayed and every setting is
compared with what ran, minute by minute (`would_have_met`, `what_if`).
`scaling/report_service.py` reads the inputs from the database and stores the answer.
"""
from __future__ import annotations

import csv
import io
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import numpy as np

from scaling.engine.planner import PoolPlan
from scaling.sim.config import ColdStart, SimConfig
from scaling.sim.fluid_mode import Fork, resume_fluid_mode, run_fluid_mode, run_fluid_with_shadows
from scaling.sim.policies.base import Observation
from scaling.sim.policies.headroom import (ForecastReader, ForecastsDiverged, HeadroomPolicy, SharedForecasts,
                                           measured_capacity_rps, pool_plan_for)
from scaling.engine.fallback import FallbackPolicy
from scaling.sim.profiles import PoolProfile
from scaling.sim.request_mode import run_request_mode
from scaling.sim.result import SimResult
from scaling.sim.route_mode import FallbackRoute, run_route_mode
from scaling.sim.transforms import time_shift
from scaling.sim.workload import RateTrace, Trace, Workload

DEFAULT_SIZES_PCT = (0, 10, 20, 30, 40, 50, 60)  # of the expected peak; the current setting is added
MAX_SIZES = 21  # every 5 % from 0 to 100: each size is a replay, and one request should not queue hours of them
DEFAULT_DAYS = 7.0
DEFAULT_FLAG_ABOVE_PCT = 25.0  # a size costing more than this above the no-warm-pool baseline is flagged
WARMUP_S = 600.0  # seen by the policy, not scored (docs/simulator.md)
RATE_BIN_S = 60.0  # stored samples are averaged into 1-minute windows
MAX_GAP_S = 600.0  # longer holes in the stored history are an error, shorter ones are interpolated
MIN_MEASURED_COLD_STARTS = 5  # fewer measurements: the pool's configured p50/p95 instead
DAYS_PER_MONTH = 30.0
NOT_MODELLED = (
    "node autoscaling and pod scheduling delays beyond the drawn cold start",
    "prefix caching, preemption, speculative decoding and per-request KV-cache use",
    "client timeouts and retries (off in the report)",
    "the fallback pool's own scaling (it is replayed as a static warm pool of its minimum replicas)",
    "approvals: everything policy does not approve is applied 60 s later, as a person would",
)

# What the warm-pool share is a share of. `forecast` is what the planner does today (its warm floor is
# the share of the 30-minute forecast's expected peak); `day-peak` holds the share of the highest
# 1-minute rate of the last 24 hours as a floor (a proposed planner change, replayed through the same
# decide step as the pool's minimum).
PEAK_BASES = ("forecast", "day-peak")
DAY_S = 86_400.0
MODES = ("fluid", "request")
# The fallback column replays request by request (route mode: the live fallback step splits the
# route every tick); above this many requests it would take too long and the column says so.
FALLBACK_MAX_REQUESTS = 400_000

Progress = Callable[[float], None]  # share done, 0..1


class ReportInputError(ValueError):
    """Input a report cannot be made from; the message names the problem for a person."""


@dataclass(frozen=True)
class Prices:
    on_demand_usd_per_gpu_hour: float
    spot_usd_per_gpu_hour: float | None
    source: str  # where the prices came from, for the assumptions


@dataclass(frozen=True)
class FallbackSpec:
    """The pool's fallback model as the replay routes to it (`scaling/sim/route_mode.py`)."""

    profile: PoolProfile
    replicas: int  # the fallback pool, replayed warm and static
    policy: FallbackPolicy = FallbackPolicy()
    priority_share: float = 0.0  # of the requests, a class that never falls back
    live: bool = True  # the pool's policy is enabled: the incident's own replay ran with it
    description: str = ""
    usd_per_gpu_hour: float | None = None  # its GPUs' on-demand price; None: the primary's


@dataclass(frozen=True)
class ReportSpec:
    profile: PoolProfile
    cold_start: ColdStart
    cold_start_source: str
    prices: Prices
    current_pct: float
    sizes_pct: tuple[float, ...] = DEFAULT_SIZES_PCT
    slo_ttft_s: float = 1.0
    slo_objective: float = 0.99
    min_replicas: int = 1
    max_replicas: int = 100
    flag_above_pct: float = DEFAULT_FLAG_ABOVE_PCT
    warmup_s: float = WARMUP_S
    fluid_step_s: float = 1.0
    traffic_source: str = "a trace"
    period_start_s: float | None = None  # epoch seconds of the scored period's start, when known
    peak_basis: str = "forecast"  # one of PEAK_BASES
    mode: str = "fluid"  # one of MODES; an incident's short window replays request by request
    fallback: FallbackSpec | None = None  # the pool's fallback model: each size is replayed with it too
    fallback_max_requests: int = FALLBACK_MAX_REQUESTS
    # The day-peak floor's peak before the replay starts (an incident window is replayed without
    # the day before it: the highest 1-minute rate of the stored 24 hours stands in for it).
    day_peak_seed_rps: float = 0.0
    what_if: bool = False  # an incident window: compare every setting with what ran (`what_if`)
    # Under `day-peak`, the planner's own warm-pool fraction under the standing floor: 0 for a report
    # (the sizes alone), the pool's setting for an incident (its 0 % row is then what ran).
    base_warm_pct: float = 0.0

    def all_sizes_pct(self) -> tuple[float, ...]:
        """The sizes replayed: the asked ones, the baseline (0 %) and the current setting, ascending."""
        return tuple(sorted({round(float(size), 3) for size in (*self.sizes_pct, 0.0, self.current_pct)}))


@dataclass(frozen=True)
class Recorded:
    """What the live pool recorded over the period (SignalSamples): for predicted-vs-observed."""

    ttft_p95_s: tuple[float, ...]  # per tick, known values only
    ready_replicas: tuple[float, ...]


@dataclass
class MinuteSeries:
    """One replay, per minute of the scored period: what the worst-day chart draws."""

    demand_rps: np.ndarray
    ready_replicas: np.ndarray
    ttft_p95_ms: np.ndarray
    ttft_p99_ms: np.ndarray
    starting: np.ndarray  # bool: replicas were still loading in that minute
    misses: np.ndarray


@dataclass
class SizeResult:
    warm_pool_pct: float
    gpu_hours: float
    cost_on_demand_usd: float
    cost_spot_usd: float | None
    ttft_p95_ms: float
    ttft_p99_ms: float
    e2e_p95_ms: float
    e2e_p99_ms: float
    slo_attainment: float
    requests: int
    cold_start_requests: int  # missed the SLO in a minute when replicas were still loading
    worst_minute_s: float | None  # from the scored period's start
    worst_minute_misses: int
    mean_ready_replicas: float
    max_replicas: int
    replica_starts: int
    meets_slo: bool
    extra_cost_pct: float = 0.0
    extra_cost_usd_per_month: float = 0.0
    flagged: bool = False
    current: bool = False
    recommended: bool = False
    # The same size with the pool's fallback model taking the overflow (route mode); None when the
    # pool has no fallback or the traffic is too long to replay request by request (`Report.fallback`).
    with_fallback: dict[str, Any] | None = None


CSV_COLUMNS = tuple(name for name in SizeResult.__dataclass_fields__ if name != "with_fallback")
# Appended when the pool has a fallback model: the same size with it (`fallback_cells`).
FALLBACK_CSV_COLUMNS = tuple(f"fallback_{name}" for name in (
    "slo_attainment", "meets_slo", "ttft_p95_ms", "ttft_p99_ms", "fallback_share", "gpu_hours", "fallback_gpu_hours",
    "cost_on_demand_usd", "extra_cost_pct", "extra_cost_usd_per_month", "misses"))


@dataclass
class Report:
    rows: list[SizeResult]
    recommended_pct: float | None
    recommendation: str
    assumptions: list[str]
    period: dict[str, Any]
    slo: dict[str, float]
    capacity_rps_per_replica: float
    flag_above_pct: float
    worst_day: dict[str, Any] | None
    observed_vs_replay: dict[str, Any] | None
    wall_s: float = 0.0
    series: dict[float, MinuteSeries] = field(default_factory=dict, repr=False)
    fallback: dict[str, Any] | None = None  # the fallback model replayed, or why its column is empty
    what_if: dict[str, Any] | None = None  # an incident window's replay: who missed, who would have met
    fallback_series: dict[float, MinuteSeries] = field(default_factory=dict, repr=False)

    def as_json(self) -> dict[str, Any]:
        return {"fallback": self.fallback, "what_if": self.what_if,
            "period": self.period, "slo": self.slo, "capacity_rps_per_replica": round(self.capacity_rps_per_replica, 3),
            "flag_above_pct": self.flag_above_pct, "recommended_pct": self.recommended_pct,
            "recommendation": self.recommendation, "rows": [asdict(row) for row in self.rows],
            "assumptions": self.assumptions, "worst_day": self.worst_day,
            "observed_vs_replay": self.observed_vs_replay, "wall_s": self.wall_s,
        }


def rows_csv(result: dict[str, Any]) -> str:
    """The rows of a report's JSON as CSV, one line per warm-pool size, columns in `CSV_COLUMNS`
    (and `FALLBACK_CSV_COLUMNS` when the fallback column was replayed)."""
    out = io.StringIO()
    with_fallback = any(row.get("with_fallback") for row in result["rows"])
    columns = CSV_COLUMNS + (FALLBACK_CSV_COLUMNS if with_fallback else ())
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in result["rows"]:
        cells = {f"fallback_{key}": value for key, value in (row.get("with_fallback") or {}).items()}
        writer.writerow({key: "" if {**row, **cells}.get(key) is None else {**row, **cells}.get(key) for key in columns})
    return out.getvalue()


# ---------------------------------------------------------------------------- inputs


def parse_sizes(text: str) -> tuple[float, ...]:
    """'0,10,20' → (0.0, 10.0, 20.0): percent of the expected peak, each in 0..100."""
    sizes = []
    for part in text.split(","):
        try:
            size = float(part)
        except ValueError:
            raise ReportInputError(f"sizes: {part.strip()!r} is not a number (expected e.g. 0,10,20)") from None
        if not 0 <= size <= 100 or not math.isfinite(size):
            raise ReportInputError(f"sizes: {size:g} is outside 0-100 (percent of the expected peak)")
        sizes.append(size)
    if not sizes:
        raise ReportInputError("sizes: give at least one size")
    if len(sizes) > MAX_SIZES:
        raise ReportInputError(f"sizes: at most {MAX_SIZES} sizes (each is a replay), got {len(sizes)}")
    return tuple(sizes)


def cold_start_from(measured_s: Sequence[float], p50_s: float | None, p95_s: float | None,
                    profile: PoolProfile) -> tuple[ColdStart, str]:
    """The cold-start distribution to replay: the pool's measured ones when there are enough,
    else its configured p50/p95, else the profile's; and a sentence saying which."""
    measured = [value for value in measured_s if value > 0 and math.isfinite(value)]
    if len(measured) >= MIN_MEASURED_COLD_STARTS:
        p50, p95 = (float(value) for value in np.percentile(measured, [50, 95]))
        return ColdStart(p50, max(p50, p95)), (
            f"lognormal through the p50 {p50:.0f} s and p95 {max(p50, p95):.0f} s of {len(measured)} measured cold starts")
    if p50_s and p95_s:
        return ColdStart(p50_s, max(p50_s, p95_s)), (
            f"lognormal through the pool's configured p50 {p50_s:.0f} s and p95 {max(p50_s, p95_s):.0f} s "
            f"({len(measured)} measured, fewer than {MIN_MEASURED_COLD_STARTS})")
    return ColdStart(profile.cold_start_p50_s, profile.cold_start_p95_s), (
        f"lognormal through the profile's p50 {profile.cold_start_p50_s:.0f} s and p95 {profile.cold_start_p95_s:.0f} s "
        "(none measured or configured)")


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def workload_from_rates(times_s: Sequence[float], rates_rps: Sequence[float | None], start_s: float, end_s: float,
                        name: str = "stored samples", max_gap_s: float = MAX_GAP_S, advice: str = "") -> RateTrace:
    """1-minute windows of the stored request rates over [start_s, end_s); holes up to `max_gap_s`
    are interpolated, a longer one (or none at all) is an error naming it. `advice`: what the person
    can do about a hole (default: a report's options)."""
    windows = int((end_s - start_s) // RATE_BIN_S)
    if windows < 2:
        raise ReportInputError(f"the period {_iso(start_s)} to {_iso(end_s)} is shorter than two minutes")
    times = np.asarray(times_s, dtype=float)
    rates = np.asarray([math.nan if rate is None else rate for rate in rates_rps], dtype=float)
    keep = (times >= start_s) & (times < start_s + windows * RATE_BIN_S) & np.isfinite(rates)
    if not keep.any():
        raise ReportInputError(f"no request-rate history between {_iso(start_s)} and {_iso(end_s)}")
    index = ((times[keep] - start_s) // RATE_BIN_S).astype(np.int64)
    counts = np.bincount(index, minlength=windows)
    sums = np.bincount(index, weights=rates[keep], minlength=windows)
    known = counts > 0
    gap = _longest_gap(known)
    if gap is not None and (gap[1] - gap[0]) * RATE_BIN_S > max_gap_s:
        first, last = start_s + gap[0] * RATE_BIN_S, start_s + gap[1] * RATE_BIN_S
        if gap[0] == 0:  # not a hole: the history begins after the period does (a young pool, a pruned one)
            raise ReportInputError(
                f"the stored history starts only at {_iso(last)}: it covers {(end_s - last) / 3600:.1f} h of the "
                f"{(end_s - start_s) / 3600:.1f} h asked for (with the warm-up): "
                + (advice or "ask for fewer days (--days) or upload a trace"))
        raise ReportInputError(
            f"the history has a gap of {(last - first) / 3600:.1f} h from {_iso(first)} to {_iso(last)} "
            f"(longer than {max_gap_s / 60:.0f} minutes): "
            + (advice or "pick a period without it (--days) or upload a trace"))
    positions = np.arange(windows)
    filled = np.interp(positions, positions[known], sums[known] / counts[known])
    return RateTrace(name, positions * RATE_BIN_S, RATE_BIN_S, np.maximum(filled, 0.0))


def _longest_gap(known: np.ndarray) -> tuple[int, int] | None:
    """(first, end) windows of the longest run of unknown windows, or None."""
    best: tuple[int, int] | None = None
    run_start = None
    for position, is_known in enumerate(np.append(known, True)):
        if not is_known and run_start is None:
            run_start = position
        elif is_known and run_start is not None:
            if best is None or position - run_start > best[1] - best[0]:
                best = (run_start, position)
            run_start = None
    return best


def replayable_window(workload: Workload, days: float, warmup_s: float) -> Workload:
    """The last `days` of an uploaded trace, checked as the replay will read it: windows back to back,
    and enough traffic after the warm-up to score. The upload is checked with it, so a trace the run
    would refuse is refused when it is sent."""
    if isinstance(workload, RateTrace):
        _check_no_holes(workload)
    window = last_days(workload, days, warmup_s)
    if window.span_s <= warmup_s + RATE_BIN_S or window.expected_requests <= 0:
        count = window.expected_requests
        raise ReportInputError(
            f"the last {days:g} days of the traffic hold {count:,.0f} request{'' if count == 1 else 's'} over "
            f"{window.span_s:,.0f} s: too little for a {warmup_s:.0f}-s warm-up and a scored period"
            f"{_late_outlier(workload, days)}")
    return window


def _check_no_holes(workload: RateTrace) -> None:
    """Windows are replayed one after the other: a hole between two would be replayed as if absent."""
    expected = workload.window_start_s[0] + np.arange(len(workload.rate_rps)) * workload.window_len_s
    off = np.flatnonzero(np.abs(workload.window_start_s - expected) > 1e-6 * workload.window_len_s)
    if off.size:
        index = int(off[0])
        raise ReportInputError(
            f"window {index + 1} starts at {workload.window_start_s[index]:,.0f} s, not at {expected[index]:,.0f} s "
            f"(the previous start + {workload.window_len_s:g} s): windows must follow one another without holes")


def _late_outlier(workload: Workload, days: float) -> str:
    """Names a last request far after the others (a mistyped timestamp), which the last days would hold alone."""
    if not isinstance(workload, Trace) or len(workload) < 2:
        return ""
    gap_s = float(workload.arrival_s[-1] - workload.arrival_s[-2])
    if gap_s <= days * DAY_S:
        return ""
    return (f"; its last request comes {gap_s / DAY_S:,.0f} days after the one before it "
            f"(request {len(workload):,} by time): is that timestamp right?")


def last_days(workload: Workload, days: float, warmup_s: float) -> Workload:
    """The last `days` of a workload plus the warm-up before them (the whole of a shorter one)."""
    if workload.span_s <= warmup_s + RATE_BIN_S:
        raise ReportInputError(f"the traffic lasts {workload.span_s:.0f} s: too short for a "
                               f"{warmup_s:.0f}-s warm-up and a scored period")
    drop = workload.span_s - days * 86_400.0 - warmup_s
    return time_shift(workload, -drop) if drop > 0 else workload


# ---------------------------------------------------------------------------- replays


def _config(spec: ReportSpec) -> SimConfig:
    return SimConfig(profile=spec.profile, cold_start=spec.cold_start, slo_ttft_s=spec.slo_ttft_s,
                     slo_objective=spec.slo_objective, min_replicas=spec.min_replicas, max_replicas=spec.max_replicas,
                     fluid_step_s=spec.fluid_step_s, warmup_s=spec.warmup_s)


@dataclass
class _DayPeakState:
    inner: Any  # the headroom policy's state
    # (minute start, highest rate) of the last 24 hours' minutes that may still be the highest: each
    # entry's rate is above every later one's (a sliding-window maximum, O(1) a tick instead of a
    # pass over 1,440 minutes, which was a third of a 7-day report's CPU).
    minute_peaks: deque[tuple[float, float]] = field(default_factory=deque)
    policies: dict[int, HeadroomPolicy] = field(default_factory=dict)  # by floor: built once, not every tick


@dataclass(frozen=True)
class DayPeakFloor:
    """The headroom policy with a standing floor: `share` of the highest 1-minute arrival rate seen in
    the last 24 hours, at the load-tested capacity, handed to the same decide step as the pool's
    minimum (so its rate limits, stabilisation and approvals apply to it as to any target)."""

    base: HeadroomPolicy
    share: float
    seed_peak_rps: float = 0.0  # the peak of the day before the replay, when it is not replayed
    name: str = "headroom"
    tick_s: float = 15.0
    observes_latency: bool = True

    def new_state(self) -> _DayPeakState:
        return _DayPeakState(self.base.new_state())

    def decide(self, now: float, observation: Observation, state: _DayPeakState) -> int:
        minute = now // 60.0 * 60.0
        peaks, rate = state.minute_peaks, observation.arrival_rate_rps
        if peaks and peaks[-1][0] == minute:
            rate = max(peaks[-1][1], rate)
            peaks.pop()
        while peaks and peaks[-1][1] <= rate:  # never the highest again while this minute is in the window
            peaks.pop()
        peaks.append((minute, rate))
        while peaks[0][0] <= now - DAY_S:
            peaks.popleft()
        peak = max(self.seed_peak_rps, peaks[0][1])
        pool = self.base.pool
        floor = min(pool.max_replicas, max(pool.min_replicas,
                                           math.ceil(self.share * peak / pool.capacity_rps_per_replica - 1e-9)))
        policy = state.policies.get(floor)
        if policy is None:
            policy = self.base if floor == pool.min_replicas else replace(self.base, pool=replace(pool, min_replicas=floor))
            state.policies[floor] = policy
        return policy.decide(now, observation, state.inner)


def policy_for(plan: PoolPlan, warm_pct: float, peak_basis: str, seed_peak_rps: float = 0.0,
               base_warm_pct: float = 0.0, forecasts: SharedForecasts | ForecastReader | None = None
               ) -> HeadroomPolicy | DayPeakFloor:
    if peak_basis not in PEAK_BASES:
        raise ReportInputError(f"peak: {peak_basis!r} is not one of {', '.join(PEAK_BASES)}")
    if peak_basis == "forecast":
        return HeadroomPolicy(replace(plan, warm_pool_fraction=warm_pct / 100.0), forecasts=forecasts)
    return DayPeakFloor(HeadroomPolicy(replace(plan, warm_pool_fraction=base_warm_pct / 100.0), forecasts=forecasts),
                        warm_pct / 100.0, seed_peak_rps)


def _replay(workload: Workload, config: SimConfig, plan: PoolPlan, warm_pct: float, peak_basis: str = "forecast",
            progress: Callable[[float, float], None] | None = None, mode: str = "fluid",
            seed_peak_rps: float = 0.0, route: FallbackRoute | None = None, base_warm_pct: float = 0.0,
            forecasts: SharedForecasts | None = None) -> SimResult:
    """One size. With `forecasts` reading a recording, a replay whose arrivals turn out not to be the
    recorded ones is replayed again with its own forecasts."""
    if forecasts is not None and (route is not None or mode != "fluid"):
        forecasts = None  # only fluid mode observes the same arrivals at every size, to the bit
    policy = policy_for(plan, warm_pct, peak_basis, seed_peak_rps, base_warm_pct, forecasts)
    if route is not None:
        return run_route_mode(workload, config, policy, route, progress)
    if mode == "request":
        return run_request_mode(workload, config, policy, progress)
    try:
        return run_fluid_mode(workload, config, policy, progress, misses_by_minute=True)
    except ForecastsDiverged:
        if forecasts is None or forecasts.recording:
            raise
        return _replay(workload, config, plan, warm_pct, peak_basis, progress, mode, seed_peak_rps, route,
                       base_warm_pct)


def fallback_route(spec: ReportSpec, config: SimConfig, plan: PoolPlan, workload: Workload,
                   capacity_rps: float | None = None) -> FallbackRoute:
    """The route over the pool and its fallback model, the fallback's capacity load-tested once."""
    assert spec.fallback is not None
    if capacity_rps is None:
        fallback_config = replace(SimConfig.for_profile(spec.fallback.profile), slo_ttft_s=config.slo_ttft_s,
                                  slo_objective=config.slo_objective, seed=config.seed)
        capacity_rps = measured_capacity_rps(fallback_config, workload)
    return FallbackRoute(spec.fallback.profile, spec.fallback.replicas, spec.fallback.priority_share,
                         spec.fallback.policy, plan, capacity_rps)


def _minute_series(result: SimResult, warmup_s: float, span_s: float) -> MinuteSeries:
    minutes = max(1, int(math.ceil((span_s - warmup_s) / 60.0)))

    def per_minute(samples: list[Observation], value: Callable[[Observation], float], how: str) -> np.ndarray:
        index = np.array([int((s.now - warmup_s) // 60) for s in samples], dtype=np.int64)
        values = np.array([value(s) for s in samples], dtype=float)
        keep = (index >= 0) & (index < minutes) & np.isfinite(values)
        if how == "mean":
            sums = np.bincount(index[keep], weights=values[keep], minlength=minutes)
            counts = np.bincount(index[keep], minlength=minutes)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        out = np.full(minutes, np.nan)
        np.fmax.at(out, index[keep], values[keep])
        return out

    samples = result.samples
    misses = np.zeros(minutes)
    first_minute = int(warmup_s // 60)
    for minute, count in (result.misses_by_minute or {}).items():
        if 0 <= minute - first_minute < minutes:
            misses[minute - first_minute] += count
    return MinuteSeries(
        demand_rps=per_minute(samples, lambda s: s.arrival_rate_rps, "mean"),
        ready_replicas=per_minute(samples, lambda s: s.ready_replicas, "mean"),
        ttft_p95_ms=per_minute(samples, lambda s: s.ttft_p95_s * 1000.0, "max"),
        ttft_p99_ms=per_minute(samples, lambda s: s.ttft_p99_s * 1000.0, "max"),
        starting=per_minute(samples, lambda s: float(s.starting_replicas > 0), "max") > 0,
        misses=misses,
    )


def _size_result(warm_pct: float, result: SimResult, series: MinuteSeries, spec: ReportSpec) -> SizeResult:
    gpu_hours = result.gpu_hours
    spot = spec.prices.spot_usd_per_gpu_hour
    worst = int(np.argmax(series.misses)) if series.misses.size and series.misses.max() > 0 else None
    return SizeResult(
        warm_pool_pct=warm_pct, gpu_hours=round(gpu_hours, 2),
        cost_on_demand_usd=round(gpu_hours * spec.prices.on_demand_usd_per_gpu_hour, 2),
        cost_spot_usd=None if spot is None else round(gpu_hours * spot, 2),
        ttft_p95_ms=result.ttft_ms.p95, ttft_p99_ms=result.ttft_ms.p99,
        e2e_p95_ms=result.e2e_ms.p95, e2e_p99_ms=result.e2e_ms.p99,
        slo_attainment=result.slo_attainment, requests=result.requests,
        cold_start_requests=int(round(float(series.misses[series.starting].sum()))),
        worst_minute_s=None if worst is None else worst * 60.0,
        worst_minute_misses=0 if worst is None else int(series.misses[worst]),
        mean_ready_replicas=result.mean_ready_replicas, max_replicas=result.max_replicas,
        replica_starts=result.cold_starts, meets_slo=result.slo_attainment >= spec.slo_objective,
    )


Job = tuple[Workload, ReportSpec, PoolPlan, float, FallbackRoute | None, SharedForecasts | None]


def _replay_size(job: Job, progress: Callable[[float, float], None] | None = None) -> tuple[SimResult, MinuteSeries]:
    """One size, start to finish (a top-level function so a process pool can run it)."""
    workload, spec, plan, warm_pct, route, forecasts = job
    result = _replay(workload, _config(spec), plan, warm_pct, spec.peak_basis, progress, mode=spec.mode,
                     seed_peak_rps=spec.day_peak_seed_rps, route=route, base_warm_pct=spec.base_warm_pct,
                     forecasts=forecasts)
    return result, _minute_series(result, spec.warmup_s, workload.span_s)


ForkJob = tuple[Workload, ReportSpec, PoolPlan, float, Fork]


def _resume_size(job: ForkJob, progress: Callable[[float, float], None] | None = None) -> tuple[SimResult, MinuteSeries]:
    """The rest of a size forked from the first size's replay (`replay_sizes`); a top-level function for a
    process pool. Should its arrivals not be the recorded ones after all, it is replayed alone."""
    workload, spec, plan, warm_pct, fork = job
    try:
        result = resume_fluid_mode(workload, _config(spec), fork, progress, misses_by_minute=True)
    except ForecastsDiverged:
        return _replay_size((workload, spec, plan, warm_pct, None, None), progress)
    return result, _minute_series(result, spec.warmup_s, workload.span_s)


def replay_sizes(workload: Workload, spec: ReportSpec, plan: PoolPlan, sizes: Sequence[float],
                 progress: Callable[[float, float], None] | None = None
                 ) -> tuple[tuple[SimResult, MinuteSeries], list[ForkJob | None]]:
    """Fluid mode's sizes in one replay: the first size's, every other size deciding alongside it on what it
    observes (`run_fluid_with_shadows`), with the forecasts computed once for all (`SharedForecasts`).
    Returns the first size's outcome and, for each other size, None where it decided alike throughout
    (the same outcome, to the bit), else the job that finishes its replay from where it first differed."""
    shared = SharedForecasts()
    first, others = sizes[0], sizes[1:]

    def policy(size: float, forecasts: SharedForecasts | ForecastReader) -> Any:
        return policy_for(plan, size, spec.peak_basis, spec.day_peak_seed_rps, spec.base_warm_pct, forecasts)

    result, forks = run_fluid_with_shadows(workload, _config(spec), policy(first, shared),
                                           [policy(size, shared.reader()) for size in others], progress,
                                           misses_by_minute=True)
    shared.recording = False
    jobs = [None if fork is None else (workload, spec, plan, size, fork) for size, fork in zip(others, forks)]
    return (result, _minute_series(result, spec.warmup_s, workload.span_s)), jobs


def run_report(workload: Workload, spec: ReportSpec, progress: Progress | None = None,
               recorded: Recorded | None = None, plan: PoolPlan | None = None, workers: int = 1,
               fallback_capacity_rps: float | None = None, share_forecasts: bool = True) -> Report:
    """Replay every size (and, when the pool has a fallback model, every size with it) and assemble
    the report. `plan` and `fallback_capacity_rps` skip the load tests (tests); `workers` > 1 replays in parallel processes
    (progress then moves once per finished replay). With `share_forecasts`, fluid mode's sizes are replayed
    together (`replay_sizes`): the forecasts computed once for all, and the stretch of the replay in which
    a size decides as the first one does replayed once; without it each size is replayed alone (tests
    compare the two, to the bit)."""
    started = time.perf_counter()
    if workload.span_s <= spec.warmup_s + RATE_BIN_S:
        raise ReportInputError(f"the traffic lasts {workload.span_s:.0f} s: too short for a "
                               f"{spec.warmup_s:.0f}-s warm-up and a scored period")
    if workload.expected_requests <= 0:
        raise ReportInputError("the traffic has no requests: nothing to replay")
    if spec.mode not in MODES:
        raise ReportInputError(f"mode: {spec.mode!r} is not one of {', '.join(MODES)}")
    sizes = spec.all_sizes_pct()
    fallback_note = _fallback_note(spec, workload)
    with_fallback = fallback_note is not None and fallback_note["replayed"]
    replays = [(size, False) for size in sizes] + ([(size, True) for size in sizes] if with_fallback else [])
    steps = len(replays) + (0 if plan is not None else 1) + (1 if with_fallback else 0)
    report_progress = progress or (lambda share: None)
    config = _config(spec)
    if plan is None:
        plan = pool_plan_for(config, workload)  # the load test, once: the same capacity for every size
        report_progress(1 / steps)
    route = None
    if with_fallback:
        route = fallback_route(spec, config, plan, workload, fallback_capacity_rps)  # its load test, once too
        fallback_note["capacity_rps_per_replica"] = round(route.fallback_capacity_rps or 0.0, 3)
        report_progress((steps - len(replays)) / steps)
    done_before = steps - len(replays)
    outcomes: dict[tuple[float, bool], tuple[SimResult, MinuteSeries]] = {}
    # Each replay left, as (key, a top-level function, its job); those forked from the first size first.
    left: list[tuple[tuple[float, bool], Callable[..., tuple[SimResult, MinuteSeries]], Any]] = []
    if share_forecasts and spec.mode == "fluid":
        def first_size(done_s: float, total_s: float) -> None:
            report_progress((done_before + done_s / max(total_s, 1.0)) / steps)

        outcomes[(sizes[0], False)], forks = replay_sizes(workload, spec, plan, sizes, first_size)
        for size, fork in zip(sizes[1:], forks):
            if fork is None:
                outcomes[(size, False)] = outcomes[(sizes[0], False)]
            else:
                left.append(((size, False), _resume_size, fork))
        report_progress((done_before + len(outcomes)) / steps)
    else:
        left += [((size, False), _replay_size, (workload, spec, plan, size, None, None)) for size in sizes]
    left += [((size, True), _replay_size, (workload, spec, plan, size, route, None)) for size in sizes if with_fallback]
    if workers > 1 and len(left) > 1:
        # A fork-started pool starts all its processes at once: never more than there are replays left.
        with ProcessPoolExecutor(max_workers=min(workers, len(left))) as pool:
            futures = [(key, pool.submit(function, job)) for key, function, job in left]
            for key, future in futures:
                outcomes[key] = future.result()
                report_progress((done_before + len(outcomes)) / steps)
    else:
        for key, function, job in left:
            done = len(outcomes)

            def within(done_s: float, total_s: float, done: int = done) -> None:
                report_progress((done_before + done + done_s / max(total_s, 1.0)) / steps)

            outcomes[key] = function(job, within)
            report_progress((done_before + len(outcomes)) / steps)
    rows = [_size_result(size, *outcomes[(size, False)], spec) for size in sizes]
    if not any(row.requests for row in rows):  # every size replays the same arrivals
        raise ReportInputError(
            f"the scored period (after the {spec.warmup_s / 60:.0f}-minute warm-up) holds no requests: nothing to "
            "score; ask for a period in which the pool served traffic")
    series = {size: outcomes[(size, False)][1] for size in sizes}
    scored_s = workload.span_s - spec.warmup_s
    recommended = assess(rows, spec, scored_s)
    fallback_series: dict[float, MinuteSeries] = {}
    if with_fallback:
        for row in rows:
            result, minute_series = outcomes[(row.warm_pool_pct, True)]
            row.with_fallback = fallback_cells(result, minute_series, rows[0], spec, scored_s)
            fallback_series[row.warm_pool_pct] = minute_series
    current_series = series[round(spec.current_pct, 3)]
    report = Report(
        rows=rows, recommended_pct=recommended, recommendation=recommendation_sentence(rows, recommended, spec),
        assumptions=assumptions(spec, plan, workload),
        period=_period(spec, scored_s), slo={"ttft_ms": spec.slo_ttft_s * 1000.0, "objective": spec.slo_objective},
        capacity_rps_per_replica=plan.capacity_rps_per_replica, flag_above_pct=spec.flag_above_pct,
        worst_day=worst_day(series, spec.current_pct, recommended, plan.capacity_rps_per_replica),
        observed_vs_replay=None if recorded is None else observed_vs_replay(recorded, rows, current_series, spec),
        series=series, fallback=fallback_note, fallback_series=fallback_series,
    )
    if spec.what_if:
        report.what_if = what_if(report, spec, scored_s)
    report.wall_s = round(time.perf_counter() - started, 2)
    report_progress(1.0)
    return report


def _fallback_note(spec: ReportSpec, workload: Workload) -> dict[str, Any] | None:
    """What the fallback column holds: None without a fallback model; else whether it was replayed."""
    if spec.fallback is None:
        return None
    note: dict[str, Any] = {"profile": spec.fallback.profile.name, "model": spec.fallback.profile.model,
                            "replicas": spec.fallback.replicas, "live": spec.fallback.live,
                            "description": spec.fallback.description, "replayed": True, "why_not": ""}
    if workload.expected_requests > spec.fallback_max_requests:
        note.update(replayed=False, why_not=(
            f"{workload.expected_requests:,.0f} requests are more than the {spec.fallback_max_requests:,} the "
            "fallback column replays request by request: "
            + ("the incident's window is too busy for it" if spec.what_if else "pick fewer days (--days) for it")))
    return note


def fallback_cells(result: SimResult, series: MinuteSeries, baseline: SizeResult, spec: ReportSpec,
                   scored_s: float) -> dict[str, Any]:
    """One size with the fallback model: latency, attainment and cost of both pools, the cost above the
    no-warm-pool baseline *without* the fallback (what the fallback adds is paid for too)."""
    gpu_hours = result.gpu_hours
    price = spec.prices.on_demand_usd_per_gpu_hour
    fallback_hours = float(getattr(result, "pools", {}).get("fallback", {}).get("gpu_hours", 0.0))
    fallback_price = spec.fallback.usd_per_gpu_hour if spec.fallback and spec.fallback.usd_per_gpu_hour else price
    cost = (gpu_hours - fallback_hours) * price + fallback_hours * fallback_price  # each pool at its GPUs' price
    months = scored_s / 86_400.0 / DAYS_PER_MONTH
    extra = cost - baseline.cost_on_demand_usd
    return {
        "gpu_hours": round(gpu_hours, 2), "fallback_gpu_hours": round(fallback_hours, 2),
        "cost_on_demand_usd": round(cost, 2),
        "ttft_p95_ms": result.ttft_ms.p95, "ttft_p99_ms": result.ttft_ms.p99,
        "slo_attainment": result.slo_attainment, "meets_slo": result.slo_attainment >= spec.slo_objective,
        "fallback_share": getattr(result, "fallback_share", 0.0), "misses": int(series.misses.sum()),
        "extra_cost_pct": round(100.0 * extra / baseline.cost_on_demand_usd, 1) if baseline.cost_on_demand_usd else 0.0,
        "extra_cost_usd_per_month": round(extra / months, 2) if months > 0 else 0.0,
    }


# ---------------------------------------------------------------------------- an incident's what-if


def would_have_met(missed: np.ndarray, alternative: np.ndarray) -> tuple[int, int, int]:
    """(missed, would have met, newly missed) from per-minute miss counts of the same arrivals.

    Within a minute the replay's requests are interchangeable, so of the minute's `missed[m]` the
    alternative saves `missed[m] - alternative[m]` when it misses fewer, and misses
    `alternative[m] - missed[m]` others when it misses more (reported, not netted off)."""
    length = max(len(missed), len(alternative))
    base = np.zeros(length)
    other = np.zeros(length)
    base[:len(missed)] = missed
    other[:len(alternative)] = alternative
    return (int(round(float(base.sum()))), int(round(float(np.clip(base - other, 0, None).sum()))),
            int(round(float(np.clip(other - base, 0, None).sum()))))


def what_if(report: Report, spec: ReportSpec, scored_s: float) -> dict[str, Any]:
    """An incident's what-if: what ran (the current setting, with the fallback when the pool's policy
    is on) against every other size, with and without the fallback model."""
    current = round(spec.current_pct, 3)
    ran_with_fallback = bool(report.fallback_series) and spec.fallback is not None and spec.fallback.live
    ran = report.fallback_series[current] if ran_with_fallback else report.series[current]
    ran_row = next(row for row in report.rows if row.current)
    ran_cost = ran_row.with_fallback["cost_on_demand_usd"] if ran_with_fallback else ran_row.cost_on_demand_usd
    months = scored_s / 86_400.0 / DAYS_PER_MONTH
    alternatives = []
    for row in report.rows:
        options = [(False, report.series[row.warm_pool_pct], row.cost_on_demand_usd, row.slo_attainment)]
        if row.warm_pool_pct in report.fallback_series:
            options.append((True, report.fallback_series[row.warm_pool_pct], row.with_fallback["cost_on_demand_usd"],
                            row.with_fallback["slo_attainment"]))
        for on_fallback, minute_series, cost, attainment in options:
            if row.warm_pool_pct == current and on_fallback == ran_with_fallback:
                continue
            missed, met, newly = would_have_met(ran.misses, minute_series.misses)
            extra_month = round((cost - ran_cost) / months, 2) if months > 0 else 0.0
            alternatives.append({
                "warm_pool_pct": row.warm_pool_pct, "with_fallback": on_fallback, "missed": missed,
                "would_have_met": met, "newly_missed": newly, "slo_attainment": attainment,
                "extra_cost_usd": round(cost - ran_cost, 2), "extra_cost_usd_per_month": extra_month,
                "line": what_if_line(row.warm_pool_pct, on_fallback, missed, met, newly, extra_month,
                                     spec.fallback.profile.model if spec.fallback else "", spec.peak_basis),
            })
    missed_total = int(round(float(ran.misses.sum())))
    if spec.peak_basis == "day-peak" and spec.base_warm_pct:
        ran_setting = f"what the pool runs (its {spec.base_warm_pct:g} % warm pool, no standing floor)"
    else:
        ran_setting = f"the current {current:g} %"
    left_out = ""
    if spec.fallback is not None and spec.fallback.live and not ran_with_fallback:
        why = (report.fallback or {}).get("why_not") or "its column was not replayed"
        left_out = (f" The incident ran with the fallback model {spec.fallback.profile.model}, which this replay "
                    f"leaves out ({why}): what ran is replayed without it.")
    best = max(alternatives, key=lambda a: (a["would_have_met"] - a["newly_missed"], -a["extra_cost_usd"]),
               default=None)
    return {
        "ran": {"warm_pool_pct": current, "with_fallback": ran_with_fallback, "missed": missed_total,
                "requests": ran_row.requests, "slo_attainment": ran_row.with_fallback["slo_attainment"]
                if ran_with_fallback else ran_row.slo_attainment},
        "alternatives": alternatives,
        "best": best,
        # $/month is the window's extra cost as if it ran for a month: an upper bound for a warm pool
        # whose floor rises with the peak, the price of holding it at this traffic all month.
        "cost_basis": "the window's extra on-demand cost, run for 30 days",
        "summary": (f"In the replay of the incident, {missed_total:,} of {ran_row.requests:,} requests missed the SLO "
                    f"at {ran_setting}{' with the fallback' if ran_with_fallback else ''}." + left_out
                    + (f" Best alternative: {best['line']}" if best and best["would_have_met"] > best["newly_missed"]
                       else " No alternative setting would have had fewer requests miss it"
                       + (" (some save a few and lose others: see each line)."
                          if any(a["would_have_met"] for a in alternatives) else "."))),
    }


def what_if_line(warm_pct: float, on_fallback: bool, missed: int, met: int, newly: int, extra_usd_per_month: float,
                 fallback_model: str = "", peak_basis: str = "forecast") -> str:
    """'With a warm pool of 30 %, 412 of the 530 requests that missed the SLO would have met it, for $1,200/month more.'"""
    setting = f"a warm pool of {warm_pct:g} % of " + (
        "the peak of the last 24 hours" if peak_basis == "day-peak" else "the expected peak")
    if on_fallback:
        setting += f" and the fallback model{f' {fallback_model}' if fallback_model else ''}"
    money = (f"for ${extra_usd_per_month:,.0f}/month more" if extra_usd_per_month > 0.5 else
             f"for ${-extra_usd_per_month:,.0f}/month less" if extra_usd_per_month < -0.5 else "at no extra cost")
    tail = f" ({newly:,} others would have missed it)" if newly else ""
    return f"With {setting}, {met:,} of the {missed:,} requests that missed the SLO would have met it, {money}{tail}."


# ---------------------------------------------------------------------------- reading the replays


def assess(rows: list[SizeResult], spec: ReportSpec, scored_s: float) -> float | None:
    """Cost above the baseline, flags, the current and recommended marks; returns the recommendation:
    the smallest size that meets the SLO objective (None when none does)."""
    baseline = next(row for row in rows if row.warm_pool_pct == 0.0)
    months = scored_s / 86_400.0 / DAYS_PER_MONTH
    for row in rows:
        extra = row.cost_on_demand_usd - baseline.cost_on_demand_usd
        row.extra_cost_pct = round(100.0 * extra / baseline.cost_on_demand_usd, 1) if baseline.cost_on_demand_usd else 0.0
        row.extra_cost_usd_per_month = round(extra / months, 2) if months > 0 else 0.0
        row.flagged = row.extra_cost_pct > spec.flag_above_pct
        row.current = row.warm_pool_pct == round(spec.current_pct, 3)
    meeting = [row for row in rows if row.meets_slo]
    if not meeting:
        return None
    # The cheapest that meets it (the smallest of those alike): a larger size that costs less and meets the
    # objective too would otherwise sit in the table beside a recommendation it beats on both counts.
    chosen = min(meeting, key=lambda row: (row.cost_on_demand_usd, row.warm_pool_pct))
    chosen.recommended = True
    return chosen.warm_pool_pct


def recommendation_sentence(rows: list[SizeResult], recommended: float | None, spec: ReportSpec) -> str:
    objective = f"{spec.slo_objective:.1%} of requests with TTFT ≤ {spec.slo_ttft_s * 1000:.0f} ms"
    current = next(row for row in rows if row.current)
    if len({(row.gpu_hours, row.slo_attainment) for row in rows}) == 1 and len(rows) > 1:
        basis = ("the planner's warm floor (a share of the 30-minute forecast) stays below its forecast term at "
                 "every size; the day-peak basis shows what a standing floor would do"
                 if spec.peak_basis == "forecast" else "no size raises the floor above what the planner asks for")
        return (f"The warm-pool size changes nothing on this traffic: {basis}. All sizes reach "
                f"{current.slo_attainment:.2%} of {objective} for the same cost.")
    if recommended is None:
        best = max(rows, key=lambda row: row.slo_attainment)
        return (f"No warm-pool size meets the SLO ({objective}); the best, {best.warm_pool_pct:g} %, reaches "
                f"{best.slo_attainment:.2%}. A warm pool alone is not enough here: look at capacity or the fallback.")
    chosen = next(row for row in rows if row.recommended)
    verdict = (f"Keep {current.warm_pool_pct:g} %." if chosen is current else
               f"The current setting is {current.warm_pool_pct:g} % "
               f"({'meets' if current.meets_slo else 'misses'} it at {current.slo_attainment:.2%}).")
    flag = " It costs more than the flag threshold above the baseline." if chosen.flagged else ""
    return (f"Recommended: {chosen.warm_pool_pct:g} % of the expected peak, the cheapest size that meets {objective} "
            f"({chosen.slo_attainment:.2%}, {chosen.extra_cost_pct:+.1f} % cost, "
            f"${chosen.extra_cost_usd_per_month:,.0f}/month above no warm pool). {verdict}{flag}")


def assumptions(spec: ReportSpec, plan: PoolPlan, workload: Workload) -> list[str]:
    profile = spec.profile
    return [
        f"Traffic: {spec.traffic_source}; replayed "
        + (f"in fluid mode at {spec.fluid_step_s:g}-s steps" if spec.mode == "fluid" else "request by request")
        + f" after a {spec.warmup_s / 60:.0f}-minute warm-up that is not scored.",
        f"Profile: {profile.name} ({profile.model} on {profile.gpus_per_replica} x {profile.gpu_type}, prefill "
        f"{profile.prefill_tokens_per_s:,.0f} tokens/s, inter-token {profile.itl_ms_base:g} ms + "
        f"{profile.itl_ms_per_seq:g} ms per sequence); load-tested capacity "
        f"{plan.capacity_rps_per_replica:.2f} requests/s per replica at the SLO.",
        "Token lengths: " + ("those of the trace." if hasattr(workload, "arrival_s") else
                             "not recorded with request rates, drawn like the Azure conversation trace "
                             "(prompt median 1,020, output median 129 tokens)."),
        f"Cold starts: {spec.cold_start_source}.",
        f"Prices: {spec.prices.source}.",
        f"Policy: the live decide step; {_basis_sentence(spec.peak_basis)}"
        + (f" on top of the planner's own warm floor at {spec.base_warm_pct:g} % (the pool's setting; the 0 % row is "
           "what ran);" if spec.peak_basis == "day-peak" and spec.base_warm_pct else "")
        + f" min {spec.min_replicas}, "
        f"max {spec.max_replicas} replicas.",
        _fallback_sentence(spec, workload),
        "Not modelled: " + "; ".join(NOT_MODELLED) + ".",
    ]


def _fallback_sentence(spec: ReportSpec, workload: Workload | None = None) -> str:
    if spec.fallback is None:
        return "Fallback: the pool has no fallback model, so the fallback column is empty."
    fallback = spec.fallback
    note = _fallback_note(spec, workload) if workload is not None else None
    if note is not None and not note["replayed"]:
        return (f"Fallback: {fallback.profile.name} ({fallback.profile.model}) is not replayed, so the fallback column "
                f"is empty: {note['why_not']}.")
    return (f"Fallback: {fallback.profile.name} ({fallback.profile.model}), {fallback.replicas} warm replicas; the "
            "fallback column replays each size request by request with the live fallback step splitting the route "
            f"every tick{'' if spec.mode == 'request' else ' (the other columns are fluid mode: compare its rows with each other)'}"
            f"; {fallback.description or 'the policy as configured'}.")


def _basis_sentence(peak_basis: str) -> str:
    if peak_basis == "forecast":
        return ("each size is the planner's warm floor, the share of the 30-minute forecast's expected peak "
                "(what runs today);")
    return ("each size is a standing floor, the share of the highest 1-minute rate of the last 24 hours "
            "(a proposed planner change, not what runs today);")


def _period(spec: ReportSpec, scored_s: float) -> dict[str, Any]:
    start = spec.period_start_s
    return {"source": spec.traffic_source, "days": round(scored_s / 86_400.0, 3),
            "start": None if start is None else datetime.fromtimestamp(start, timezone.utc).isoformat(),
            "end": None if start is None else datetime.fromtimestamp(start + scored_s, timezone.utc).isoformat()}


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def json_safe(value: Any) -> Any:
    """The report's JSON with every NaN or infinity as None: PostgreSQL's JSON has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def _rounded(values: np.ndarray, digits: int = 2) -> list[float | None]:
    return [None if not math.isfinite(value) else round(float(value), digits) for value in values]


def worst_day(series: dict[float, MinuteSeries], current_pct: float, recommended_pct: float | None,
              capacity_rps: float) -> dict[str, Any] | None:
    """The day (24 h from the period's start) where the current setting missed most, per minute:
    demand, ready capacity and TTFT p99 for the current and the recommended setting."""
    current = series[round(current_pct, 3)]
    minutes = len(current.misses)
    if minutes == 0:
        return None
    days = max(1, int(math.ceil(minutes / 1440)))
    by_day = [float(current.misses[day * 1440:(day + 1) * 1440].sum()) for day in range(days)]
    day = int(np.argmax(by_day)) if max(by_day) > 0 else int(np.argmax(
        [np.nanmax(current.demand_rps[d * 1440:(d + 1) * 1440], initial=0.0) for d in range(days)]))
    window = slice(day * 1440, min(minutes, (day + 1) * 1440))

    def lines(minute_series: MinuteSeries) -> dict[str, Any]:
        return {"ready_capacity_rps": _rounded(minute_series.ready_replicas[window] * capacity_rps),
                "ready_replicas": _rounded(minute_series.ready_replicas[window]),
                "ttft_p99_ms": _rounded(minute_series.ttft_p99_ms[window], 0),
                "misses": int(minute_series.misses[window].sum())}

    settings = {"current": lines(current)}
    if recommended_pct is not None:
        settings["recommended"] = lines(series[recommended_pct])
    return {"day": day, "start_s": day * 86_400.0, "minutes": window.stop - window.start,
            "demand_rps": _rounded(current.demand_rps[window]), "current_pct": round(current_pct, 3),
            "recommended_pct": recommended_pct, **settings}


def observed_vs_replay(recorded: Recorded, rows: list[SizeResult], current: MinuteSeries,
                       spec: ReportSpec) -> dict[str, Any] | None:
    """How the replay of the current setting compares with what the live pool recorded."""
    row = next(row for row in rows if row.current)
    observed_p95 = _finite(np.asarray(recorded.ttft_p95_s, dtype=float) * 1000.0)  # a NaN sample says nothing
    predicted_p95 = _finite(current.ttft_p95_ms)
    observed_ready = _finite(np.asarray(recorded.ready_replicas, dtype=float))
    if not observed_p95.size and not observed_ready.size:
        return None

    def median(values: np.ndarray) -> float | None:
        return round(float(np.median(values)), 1) if values.size else None

    def high(values: np.ndarray) -> float | None:
        return round(float(np.percentile(values, 95)), 1) if values.size else None

    out = {
        "ttft_p95_ms_median": {"observed": median(observed_p95), "predicted": median(predicted_p95)},
        "ttft_p95_ms_95th_minute": {"observed": high(observed_p95), "predicted": high(predicted_p95)},
        "ready_replicas_mean": {"observed": round(float(observed_ready.mean()), 2) if observed_ready.size else None,
                                "predicted": row.mean_ready_replicas},
        "ready_replicas_max": {"observed": int(observed_ready.max()) if observed_ready.size else None,
                               "predicted": row.max_replicas},
        "observed_samples": int(max(observed_p95.size, observed_ready.size)),
    }
    ready = out["ready_replicas_mean"]
    if ready["observed"]:
        ratio = ready["predicted"] / ready["observed"]
        subject = "what ran" if spec.what_if else f"the current {spec.current_pct:g} %"
        out["summary"] = (f"The replay of {subject} ran {ratio:.2f}x the ready replicas the "
                          f"pool recorded; typical TTFT p95 {out['ttft_p95_ms_median']['predicted']} ms predicted vs "
                          f"{out['ttft_p95_ms_median']['observed']} ms observed.")
    return out
