"""The decide step's incremental forecasts against recomputing them every tick (issue 12 item 11).

    .venv/bin/python bench/forecast_incremental.py [--traces ../shared/traces] [--json]

Before item 11 the decide step remade the lead-time forecast at every tick from the last hour of
1-minute bins ending *now*, and the 30-minute one every 5 minutes from 8 days of 10-minute bins
ending now. Now both forecasters take one bin *on the clock* as it completes (`decide.advance`).
This replays 15-s samples of a trace through both and scores each forecast against the mean rate
of the bin it was made for: the lead-time forecasts at every tick on the Azure traces (1-minute
bins), the 30-minute forecasts every 10 minutes on ServeGen m-small's 14 days (10-minute bins; at
those ticks the two forecast the same bin). The recomputation uses today's methods and memory, so
the difference is the bins and the windows alone.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaling.engine import decide  # noqa: E402
from scaling.engine.forecast import DEFAULT_MEMORY, forecast_path  # noqa: E402
from scaling.engine.planner import PoolPlan  # noqa: E402
from scaling.engine.rate_series import from_values, read_series  # noqa: E402

TICK_S = 15.0


class _History:
    def __init__(self, times: np.ndarray, rates: np.ndarray) -> None:
        self.times, self.rates, self.upto = times, rates, 0

    def rates_since(self, since_s: float) -> tuple[np.ndarray, np.ndarray]:
        start = int(np.searchsorted(self.times[: self.upto], since_s, side="right"))
        return self.times[start: self.upto], self.rates[start: self.upto]

    def requested_at(self) -> list[float]:
        return []

    def approved_floor(self, now_s: float) -> int:
        return 0


def _recomputed(times, rates, now, bin_s, window_s, horizon_s, method, memory):
    bins = decide.binned_rates(times, rates, now - window_s, now, bin_s)
    finite = np.flatnonzero(np.isfinite(bins))
    if finite.size < 2:
        return math.nan, math.nan
    path = forecast_path(from_values(bins[finite[0]:], bin_s), horizon_s, method, memory)
    return float(path.expected[-1]), float(path.p90[-1])


def _score(made: list[tuple[float, float, float]]) -> dict[str, float]:
    ok = [(e, u, a) for e, u, a in made if math.isfinite(e) and math.isfinite(u) and math.isfinite(a)]
    actual = sum(a for _, _, a in ok)
    return {"points": len(ok), "wape": round(sum(abs(e - a) for e, _, a in ok) / actual, 4),
            "p90_coverage": round(sum(u >= a for _, u, a in ok) / len(ok), 4)}


def compare(times: np.ndarray, rates: np.ndarray, which: str, every: int) -> dict[str, object]:
    """Replay 15-s samples through `decide.forecasts` and the recomputation; score both."""
    pool = PoolPlan(capacity_rps_per_replica=5.0)
    bin_s = decide.FORECAST_BIN_S if which == "lead" else decide.SEASONAL_BIN_S
    horizon = pool.lead_s if which == "lead" else pool.prescale_horizon_s
    steps = max(int(round(horizon / bin_s)), 1)
    history, state = _History(times, rates), decide.DecideState()
    incremental, recomputed, seconds = [], [], {"incremental": 0.0, "recomputed": 0.0}
    for i, now in enumerate(times):
        history.upto = i  # the samples before now; this tick's rate is passed as the reading
        started = time.process_time()
        lead, _, _, state = decide.forecasts(history, pool, float(now), float(rates[i]), state)
        seconds["incremental"] += time.process_time() - started
        if i % every or now < 2 * 3600:
            continue
        end = float(now) + steps * bin_s  # the bin forecast at a tick on the bin grid: (end - bin, end]
        inside = rates[(times > end - bin_s) & (times <= end)]
        inside = inside[np.isfinite(inside)]
        actual = float(inside.mean()) if inside.size else math.nan
        if which == "lead":
            new = (lead.expected_rps, lead.p90_rps) if lead else (math.nan, math.nan)
            window, method, memory = decide.RECENT_HISTORY_S, decide.LEAD_METHOD, decide.LEAD_MEMORY
        else:
            new = (state.seasonal.expected_rps or math.nan, state.seasonal.p90_rps or math.nan)
            window, method, memory = decide.SEASONAL_HISTORY_S, decide.SEASONAL_METHOD, DEFAULT_MEMORY
        started = time.process_time()
        old = _recomputed(times[: i + 1], rates[: i + 1], float(now), bin_s, window, horizon, method, memory)
        seconds["recomputed"] += time.process_time() - started
        incremental.append((*new, actual))
        recomputed.append((*old, actual))
    return {"incremental": _score(incremental), "recomputed": _score(recomputed),
            "cpu_s": {k: round(v, 2) for k, v in seconds.items()}}


def _azure(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The trace's 15-s rates, one sample per tick (the clock starts two hours before the trace)."""
    series = read_series(path, step_s=TICK_S)
    return TICK_S * np.arange(1, len(series) + 1) + 3600.0 * 2, series.rates_rps


def _servegen(path: Path) -> tuple[np.ndarray, np.ndarray]:
    series = read_series(path)
    per = int(series.step_s / TICK_S)
    rates = np.repeat(series.rates_rps, per)
    return TICK_S * np.arange(1, len(rates) + 1), rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parents[1] / ".." / "shared" / "traces")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = {}
    for name in ("code", "conv"):
        times, rates = _azure(args.traces / f"AzureLLMInferenceTrace_{name}.csv")
        rows[f"azure {name}, lead time, every tick"] = compare(times, rates, "lead", 1)
    times, rates = _servegen(args.traces / "servegen" / "servegen_language_m-small_aggregate_rate.csv")
    rows["servegen 14 days, 30 minutes, every 10 minutes"] = compare(times, rates, "far", 40)
    if args.json:
        print(json.dumps(rows))
    else:
        for name, row in rows.items():
            print(name, json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
