"""Request-rate forecasts: an expected value and a p90 upper bound, 30 minutes ahead by default.

Methods (all causal: a forecast made at step t uses data up to t only):
- `persistence`: the last valid rate.
- `mean`: the mean of the last horizon's worth of rates (smooths noise, lags trends).
- `seasonal-daily` / `seasonal-weekly`: the last rate times the change the same clock time saw one
  day (median over up to 7 days) or one week (up to 2 weeks) earlier; `seasonal` takes weekly once a
  week of history exists, daily before that. Without enough history they fall back to persistence.
- `adaptive` (default): a Bates-Granger blend of persistence, mean and the two seasonal changes,
  each weighted by the inverse of its recent squared error (exponentially weighted, half-life
  12 h); a candidate joins only while its recent error is no worse than persistence's, and before
  anything is scored the candidates are averaged with equal weights. Every forecast is scored when
  its actual arrives, so the weights move to whatever has been working.
- `trend`: a damped Holt linear trend whose smoothing and damping constants are chosen at every
  origin, from a fixed grid, by the squared error of their own earlier forecasts for the same
  horizon (causal). Meant for short horizons (the planner's lead time); `adaptive` stays the default.

The p90 is calibrated online from the method's own recent errors: a split-conformal quantile of
the last 3 days of residuals on a shifted-log scale (so it scales with the level and survives
zeros), raised by adaptive conformal inference whenever recent misses run above 10 %.

Backtest: `python -m scaling.engine.forecast --backtest PATH [--format auto|servegen|azure|rates]
[--step-s S] [--horizon-min 30] [--method NAME] --json`.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from scaling.engine.rate_series import FORMATS, RateSeries, SeriesError, read_series, resample

DEFAULT_HORIZON_S = 30 * 60
DEFAULT_METHOD = "adaptive"
METHODS = ("persistence", "mean", "seasonal", "seasonal-daily", "seasonal-weekly", "adaptive", "trend")
UPPER_QUANTILE = 0.9

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
SEASONS_DAILY = 7  # days whose same-clock-time change is pooled (median)
SEASONS_WEEKLY = 2
WEIGHT_HALF_LIFE_S = 12 * 3600.0  # memory of the blend's error scores
RESIDUAL_WINDOW_S = 3 * DAY_S  # residuals the p90 is calibrated on
MIN_RESIDUALS = 10  # below this the p90 is wide: 2x the expected or the recent peak
ACI_STEP = 0.005  # adaptive conformal inference learning rate
# `trend`: damped Holt linear trend (Gardner & McKenzie 1985). The constants are chosen per origin
# from TREND_GRID by the method's own scored errors; these are the setting used before any score.
TREND_ALPHA = 0.5  # level smoothing
TREND_BETA = 0.3  # trend smoothing
TREND_PHI = 0.9  # damping per step: the trend adds at most phi / (1 - phi) = 9 steps of slope
LOG_SHIFT_FRACTION = 0.1  # shift = 10 % of the running mean rate, so zero rates stay finite


@dataclass(frozen=True)
class Forecast:
    method: str
    made_at_s: float
    horizon_s: float
    expected_rps: float
    p90_rps: float


@dataclass(frozen=True)
class ForecastPath:
    """Forecasts for every origin: index t holds the forecast for t + horizon_steps made at t."""

    expected: np.ndarray
    p90: np.ndarray
    horizon_steps: int


# ---------------------------------------------------------------------------- candidates


def _forward_fill(values: np.ndarray) -> np.ndarray:
    index = np.where(np.isfinite(values), np.arange(len(values)), -1)
    np.maximum.accumulate(index, out=index)
    filled = np.where(index >= 0, values[np.maximum(index, 0)], np.nan)
    return filled


def _trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    finite = np.isfinite(values)
    sums = np.concatenate([[0.0], np.cumsum(np.where(finite, values, 0.0))])
    counts = np.concatenate([[0], np.cumsum(finite)])
    upper = np.arange(1, len(values) + 1)
    lower = np.maximum(upper - window, 0)
    n = counts[upper] - counts[lower]
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (sums[upper] - sums[lower]) / n
    return np.where(n > 0, means, np.nan)


def _seasonal_change(values: np.ndarray, period: int, horizon: int, seasons: int) -> np.ndarray:
    """Median over earlier seasons of y[t+h-kP] / y[t-kP]; NaN where no season is available."""
    n = len(values)
    ratios = np.full((seasons, n), np.nan)
    if period <= horizon:
        return np.full(n, np.nan)
    for k in range(1, seasons + 1):
        base = np.arange(n) - k * period
        ahead = base + horizon
        ok = base >= 0
        before = np.full(n, np.nan)
        after = np.full(n, np.nan)
        before[ok] = values[base[ok]]
        after[ok] = values[ahead[ok]]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios[k - 1] = np.where(before > 0, after / before, np.nan)
    if not np.isfinite(ratios).any():
        return np.full(n, np.nan)
    with np.errstate(invalid="ignore"), _quiet_all_nan():
        return np.nanmedian(ratios, axis=0)


class _quiet_all_nan:
    def __enter__(self) -> None:
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore", category=RuntimeWarning)

    def __exit__(self, *exc: object) -> None:
        self._catch.__exit__(*exc)


def candidate_forecasts(series: RateSeries, horizon_steps: int) -> dict[str, np.ndarray]:
    """Each simple method's expected rate for t + horizon, made at every t (NaN when unavailable)."""
    values = np.where(series.valid, series.rates_rps, np.nan)
    last = _forward_fill(values)
    day = int(round(DAY_S / series.step_s))
    week = int(round(WEEK_S / series.step_s))
    daily = last * _seasonal_change(values, day, horizon_steps, SEASONS_DAILY)
    weekly = last * _seasonal_change(values, week, horizon_steps, SEASONS_WEEKLY)
    return {
        "persistence": last,
        "mean": _trailing_mean(values, max(horizon_steps, 1)),
        "seasonal-daily": np.where(np.isfinite(daily), daily, last),
        "seasonal-weekly": np.where(np.isfinite(weekly), weekly, last),
        "seasonal": np.where(np.isfinite(weekly), weekly, np.where(np.isfinite(daily), daily, last)),
        "_daily": daily,  # without the persistence fallback, for the blend
        "_weekly": weekly,
    }


def damped_trend(values: np.ndarray, horizon: int, alpha: float = TREND_ALPHA, beta: float = TREND_BETA,
                 phi: float = TREND_PHI) -> np.ndarray:
    """Damped Holt forecast for t + horizon made at every t (causal; gaps carry the state over).

    level_t = a*y_t + (1-a)*(level + phi*trend); trend_t = b*(level_t - level) + (1-b)*phi*trend;
    forecast = level_t + (phi + ... + phi^h) * trend_t, never below 0.
    """
    return _damped_trends(values, horizon, ((alpha, beta, phi),))[0]


def _damped_trends(values: np.ndarray, horizon: int, grid: tuple[tuple[float, float, float], ...]) -> np.ndarray:
    """`damped_trend` for every (alpha, beta, phi) of `grid` at once: one row per setting."""
    alpha, beta, phi = (np.array([g[k] for g in grid], dtype=float) for k in range(3))
    reach = sum(phi**k for k in range(1, horizon + 1))
    out = np.full((len(grid), len(values)), np.nan)
    level = trend = None
    for t, y in enumerate(values):
        if np.isfinite(y):
            if level is None:
                level, trend = np.full(len(grid), float(y)), np.zeros(len(grid))
            else:
                previous = level
                level = alpha * y + (1 - alpha) * (previous + phi * trend)
                trend = beta * (level - previous) + (1 - beta) * phi * trend
        if level is not None:
            out[:, t] = np.maximum(level + reach * trend, 0.0)
    return out


# A coarse, conventional grid (light to heavy smoothing, weak to strong damping): not fitted to a trace.
TREND_GRID = tuple((a, b, phi) for a in (0.2, 0.5, 0.8) for b in (0.05, 0.1, 0.3) for phi in (0.8, 0.9, 0.98))


def selected_trend(values: np.ndarray, horizon: int) -> np.ndarray:
    """Damped trend whose constants are chosen at every origin from TREND_GRID by the squared error of
    their own earlier forecasts for this horizon (causal: only forecasts whose actual has arrived)."""
    paths = _damped_trends(values, horizon, TREND_GRID)
    n = len(values)
    errors = np.zeros((len(TREND_GRID), n))  # errors[:, o]: the forecast made at o, scored at o + horizon
    if n > horizon:
        actual = values[horizon:]
        made = paths[:, : n - horizon]
        ok = np.isfinite(actual)[None, :] & np.isfinite(made)
        errors[:, : n - horizon] = np.where(ok, (made - actual[None, :]) ** 2, 0.0)
    scored = np.cumsum(errors, axis=1)  # scored[:, o]: errors of origins <= o
    expected = np.full(n, np.nan)
    default = TREND_GRID.index((TREND_ALPHA, TREND_BETA, TREND_PHI))
    for t in range(n):
        known = t - horizon  # the last origin whose actual has arrived by t
        choice = int(np.argmin(scored[:, known])) if known >= 0 and scored[:, known].any() else default
        expected[t] = paths[choice, t]
    return expected


# ---------------------------------------------------------------------------- blend and calibration


def _adaptive_expected(values: np.ndarray, candidates: dict[str, np.ndarray], horizon: int, step_s: float) -> np.ndarray:
    names = ["persistence", "mean", "_daily", "_weekly"]
    stack = np.vstack([candidates[name] for name in names])
    decay = 0.5 ** (step_s / WEIGHT_HALF_LIFE_S)
    squared = np.zeros(len(names))
    weight = np.zeros(len(names))
    expected = np.full(len(values), np.nan)
    for t in range(len(values)):
        origin = t - horizon
        squared *= decay
        weight *= decay
        if origin >= 0 and np.isfinite(values[t]):
            made = stack[:, origin]
            scored = np.isfinite(made)
            squared[scored] += (made[scored] - values[t]) ** 2
            weight[scored] += 1.0
        now = stack[:, t]
        usable = np.isfinite(now) & (weight >= 1.0)
        if not usable.any():
            # Nothing scored yet: equal weights, the hard-to-beat default of forecast combination.
            available = now[np.isfinite(now)]
            expected[t] = float(available.mean()) if available.size else np.nan
            continue
        mse = np.where(usable, squared / np.maximum(weight, 1e-12), np.inf)
        if usable[0]:
            # Persistence is the baseline: a candidate joins only while it has been at least as good.
            usable &= mse <= mse[0]
        inverse = 1.0 / np.maximum(mse[usable], 1e-12)
        expected[t] = float(np.dot(inverse, now[usable]) / inverse.sum())
    return expected


def _conformal_quantile(residuals: deque[float], level: float) -> float | None:
    n = len(residuals)
    rank = math.ceil((n + 1) * level)
    if n < MIN_RESIDUALS or rank > n:
        return None
    return float(np.partition(np.fromiter(residuals, float), rank - 1)[rank - 1])


def calibrate_upper(values: np.ndarray, expected: np.ndarray, horizon: int, step_s: float) -> np.ndarray:
    """p90 at every origin from the expected forecast's own past errors (causal)."""
    window = max(int(RESIDUAL_WINDOW_S / step_s), MIN_RESIDUALS)
    residuals: deque[float] = deque(maxlen=window)
    shifts = np.full(len(values), np.nan)
    upper = np.full(len(values), np.nan)
    miss_rate_target = 1.0 - UPPER_QUANTILE
    alpha = miss_rate_target
    total = count = 0.0
    for t in range(len(values)):
        if np.isfinite(values[t]):
            total += values[t]
            count += 1
        shifts[t] = max(LOG_SHIFT_FRACTION * (total / count if count else 0.0), 1e-9)
        origin = t - horizon
        if origin >= 0 and np.isfinite(values[t]) and np.isfinite(expected[origin]):
            shift = shifts[origin]
            residuals.append(math.log(values[t] + shift) - math.log(max(expected[origin], 0.0) + shift))
            if np.isfinite(upper[origin]):
                missed = 1.0 if values[t] > upper[origin] else 0.0
                # Adaptive conformal inference, one-sided: misses above 10 % raise the quantile level;
                # it never drops below the plain conformal 90 % (under-covering costs an SLO).
                alpha = min(max(alpha + ACI_STEP * (miss_rate_target - missed), 0.001), miss_rate_target)
        if not np.isfinite(expected[t]):
            continue
        quantile = _conformal_quantile(residuals, 1.0 - alpha)
        base = max(expected[t], 0.0)
        if quantile is None:
            # Too few errors seen: stay wide, at least twice the expected and the recent peak.
            recent = values[max(t - horizon, 0) : t + 1]
            peak = float(np.nanmax(recent)) if np.isfinite(recent).any() else 0.0
            upper[t] = max(2.0 * base + shifts[t], peak)
        else:
            upper[t] = max((base + shifts[t]) * math.exp(quantile) - shifts[t], base)
    return upper


def forecast_path(series: RateSeries, horizon_s: float = DEFAULT_HORIZON_S, method: str = DEFAULT_METHOD) -> ForecastPath:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (one of {', '.join(METHODS)})")
    horizon = max(int(round(horizon_s / series.step_s)), 1)
    values = np.where(series.valid, series.rates_rps, np.nan)
    candidates = candidate_forecasts(series, horizon)
    if method == "adaptive":
        expected = _adaptive_expected(values, candidates, horizon, series.step_s)
    elif method == "trend":
        expected = selected_trend(values, horizon)
    else:
        expected = candidates[method]
    return ForecastPath(expected=expected, p90=calibrate_upper(values, expected, horizon, series.step_s), horizon_steps=horizon)


def forecast(series: RateSeries, horizon_s: float = DEFAULT_HORIZON_S, method: str = DEFAULT_METHOD) -> Forecast:
    """The forecast made now (at the end of `series`) for `horizon_s` ahead."""
    if len(series) == 0:
        raise ValueError("an empty series has no forecast")
    path = forecast_path(series, horizon_s, method)
    made_at = series.start_s + series.step_s * (len(series) - 1)
    return Forecast(method, made_at, horizon_s, float(path.expected[-1]), float(path.p90[-1]))


def forecast_peak(series: RateSeries, horizon_s: float = DEFAULT_HORIZON_S, method: str = DEFAULT_METHOD) -> Forecast:
    """The peak forecast within the next `horizon_s`: a forecast for every step up to it, the one
    with the highest expected rate (with its own horizon), and the highest p90 among them.

    A peak ten minutes out that is over by the thirtieth minute is missed by a forecast made for
    the thirtieth minute alone.
    """
    steps = max(int(round(horizon_s / series.step_s)), 1)
    made = [forecast(series, step * series.step_s, method) for step in range(1, steps + 1)]
    finite = [f for f in made if math.isfinite(f.expected_rps)] or made
    peak = max(finite, key=lambda f: f.expected_rps)
    upper = max((f.p90_rps for f in finite if math.isfinite(f.p90_rps)), default=peak.p90_rps)
    return Forecast(method, peak.made_at_s, peak.horizon_s, peak.expected_rps, upper)


# ---------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class ForecastScore:
    """One forecast against its actual, recorded when the actual arrives."""

    absolute_error_rps: float
    percentage_error: float | None  # None when the actual was 0
    covered: bool  # p90 >= actual
    overshoot: float | None  # p90 / actual - 1 when covered and actual > 0


def score_forecast(made: Forecast, actual_rps: float) -> ForecastScore:
    error = abs(made.expected_rps - actual_rps)
    covered = made.p90_rps >= actual_rps
    return ForecastScore(
        absolute_error_rps=error,
        percentage_error=error / actual_rps if actual_rps > 0 else None,
        covered=covered,
        overshoot=made.p90_rps / actual_rps - 1 if covered and actual_rps > 0 else None,
    )


@dataclass(frozen=True)
class Backtest:
    method: str
    points: int
    accuracy: float
    persistence_accuracy: float
    p90_coverage: float
    mean_overshoot: float


def _accuracy(predicted: np.ndarray, actual: np.ndarray) -> float:
    """1 - weighted absolute percentage error."""
    total = float(np.abs(actual).sum())
    return 1.0 - float(np.abs(predicted - actual).sum()) / total if total > 0 else float("nan")


def backtest(series: RateSeries, horizon_s: float = DEFAULT_HORIZON_S, method: str = DEFAULT_METHOD) -> Backtest:
    """Score every forecast whose origin and target are both real data (gap windows are skipped)."""
    path = forecast_path(series, horizon_s, method)
    h = path.horizon_steps
    values = np.where(series.valid, series.rates_rps, np.nan)
    origin = values[:-h] if h < len(values) else np.array([])
    actual = values[h:]
    expected, upper = path.expected[: len(actual)], path.p90[: len(actual)]
    scored = np.isfinite(origin) & np.isfinite(actual) & np.isfinite(expected) & np.isfinite(upper)
    if not scored.any():
        raise SeriesError("no point to score: the series is shorter than the horizon or all gaps")
    actual, expected, upper, origin = actual[scored], expected[scored], upper[scored], origin[scored]
    covered = upper >= actual
    overshoot_at = covered & (actual > 0)
    return Backtest(
        method=method,
        points=int(scored.sum()),
        accuracy=round(_accuracy(expected, actual), 4),
        persistence_accuracy=round(_accuracy(origin, actual), 4),
        p90_coverage=round(float(covered.mean()), 4),
        mean_overshoot=round(float((upper[overshoot_at] / actual[overshoot_at] - 1).mean()), 4) if overshoot_at.any() else 0.0,
    )


# ---------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m scaling.engine.forecast", description="Backtest request-rate forecasts on a trace.")
    parser.add_argument("--backtest", metavar="PATH", required=True, help="trace: ServeGen aggregate CSV, Azure request CSV, or t_s,rate_rps CSV")
    parser.add_argument("--format", choices=FORMATS, default="auto")
    parser.add_argument("--step-s", type=float, default=None, help="bin width in seconds (Azure default 60; ServeGen: a multiple of 600)")
    parser.add_argument("--horizon-min", type=float, default=DEFAULT_HORIZON_S / 60)
    parser.add_argument("--method", choices=METHODS, default=DEFAULT_METHOD)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    if args.horizon_min <= 0:
        parser.error("--horizon-min must be positive")
    if args.step_s is not None and args.step_s <= 0:
        parser.error("--step-s must be positive")
    try:
        series = read_series(Path(args.backtest), args.format, args.step_s)
        if args.step_s is not None and args.step_s != series.step_s:
            series = resample(series, args.step_s)
        steps = args.horizon_min * 60 / series.step_s
        if steps < 1 - 1e-9 or abs(steps - round(steps)) > 1e-9:
            raise SeriesError(f"--horizon-min {args.horizon_min:g} is not a whole number of {series.step_s:g}-s steps")
        result = backtest(series, args.horizon_min * 60, args.method)
    except (SeriesError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (UnicodeDecodeError, csv.Error):
        print(f"error: {args.backtest}: not a text CSV file", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        for key, value in asdict(result).items():
            print(f"{key:22} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
