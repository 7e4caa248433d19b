"""Request-rate forecasts: an expected value and a p90 upper bound, 30 minutes ahead by default.

Methods (all causal: a forecast made at step t uses data up to t only):
- `persistence`: the last valid rate.
- `mean`: the mean of the last horizon's worth of rates (smooths noise, lags trends).
- `seasonal-daily` / `seasonal-weekly`: the last rate times the change the same clock time saw one
  day (median over up to 7 days) or one week (up to 2 weeks) earlier; `seasonal` takes weekly once a
  week of history exists, daily before that. Without enough history they fall back to persistence.
- `adaptive` (default): a Bates-Granger blend of persistence, mean and the two seasonal changes,
  each weighted by the inverse of its recent squared error (exponentially weighted, half-life
  12 h); a candidate joins only while its recent error is lower than persistence's. Every forecast
  is scored when its actual arrives, so the weights move to whatever has been working; within the
  first horizon, where nothing has arrived yet, each value scores the forecasts made half-way back.
- `trend`: a damped Holt linear trend whose smoothing and damping constants are chosen at every
  origin, from a fixed grid, by the squared error of their own earlier forecasts for the same
  horizon (causal). Meant for short horizons (the planner's lead time); `adaptive` stays the default.

The p90 is calibrated online from the method's own recent errors: a split-conformal quantile of
the last 3 days of residuals (`ForecastMemory`; the planner's lead-time forecast keeps an hour) on a
shifted-log scale (so it scales with the level and survives zeros), raised by adaptive conformal
inference whenever recent misses run above 10 %.

`forecast_path` computes every origin's forecast of a whole series; `OnlineForecast` gives the same
numbers one step at a time from a bounded state (what the live loop and the replay run: a tick
costs the same after a week as after a minute).

Backtest: `python -m scaling.engine.forecast --backtest PATH [--format auto|servegen|azure|rates]
[--step-s S] [--horizon-min 30] [--method NAME] [--days A:B] [--score-from-day D] --json`.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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
# Adaptive conformal inference learning rate: of 0.005, 0.01, 0.02, 0.03 the smallest with the highest
# lowest p90 coverage over the training series (ServeGen m-small's first week and days 0-6 each alone,
# Azure code at 5 and 30 min); judged on the second week, days 7-13 and conv (docs/benchmarks.md, "Forecast").
ACI_STEP = 0.01
# `trend`: damped Holt linear trend (Gardner & McKenzie 1985). The constants are chosen per origin
# from TREND_GRID by the method's own scored errors; these are the setting used before any score.
TREND_ALPHA = 0.5  # level smoothing
TREND_BETA = 0.3  # trend smoothing
TREND_PHI = 0.9  # damping per step: the trend adds at most phi / (1 - phi) = 9 steps of slope
LOG_SHIFT_FRACTION = 0.1  # shift = 10 % of the mean rate over the residual window, so zero rates stay finite
NO_SCALE_SHIFT = 1e-9  # the shift of a window without traffic


@dataclass(frozen=True)
class ForecastMemory:
    """How far back a forecast learns: the residuals its p90 is calibrated on (and the mean rate
    that scales them), and the half-life of the scores that weight the blend and choose the trend's
    constants. The backtest's default is days; the planner's lead-time forecast remembers an hour."""

    residual_s: float = RESIDUAL_WINDOW_S
    score_half_life_s: float = WEIGHT_HALF_LIFE_S

    def residual_steps(self, step_s: float) -> int:
        return max(int(self.residual_s / step_s), MIN_RESIDUALS)

    def decay(self, step_s: float) -> float:
        return 0.5 ** (step_s / self.score_half_life_s)


DEFAULT_MEMORY = ForecastMemory()


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


# ---------------------------------------------------------------------------- shared arithmetic
# The batch functions below work on whole arrays and `OnlineForecast` one step at a time; they share
# only these per-step formulas, so that the two give the same numbers (checked on random series).


def _forward_fill(values: np.ndarray) -> np.ndarray:
    index = np.where(np.isfinite(values), np.arange(len(values)), -1)
    np.maximum.accumulate(index, out=index)
    filled = np.where(index >= 0, values[np.maximum(index, 0)], np.nan)
    return filled


def _window_mean(window: np.ndarray) -> float:
    """The mean of the known values of a window (NaN when none is known)."""
    known = window[np.isfinite(window)]
    return float(np.sum(known) / known.size) if known.size else math.nan


def _trailing_means(values: np.ndarray, window: int) -> np.ndarray:
    return np.array([_window_mean(values[max(t - window + 1, 0): t + 1]) for t in range(len(values))])


def _median_ratio(ratios: np.ndarray) -> float:
    known = ratios[np.isfinite(ratios)]
    return float(np.median(known)) if known.size else math.nan


def _log_shift(mean_rate: float) -> float:
    return max(LOG_SHIFT_FRACTION * (mean_rate if math.isfinite(mean_rate) else 0.0), NO_SCALE_SHIFT)


def _has_scale(shift: float) -> bool:
    """A forecast made while the window had traffic: its error has a scale to be measured against. One
    made from a silent window (a new pool's first minutes, a pool back from days at zero) would measure
    the first requests against 1e-9 and keep a p90 a billion times the rate for the residual window."""
    return shift > NO_SCALE_SHIFT


def _trend_update(level: np.ndarray, trend: np.ndarray, y: float, alpha: np.ndarray, beta: np.ndarray,
                  phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    new_level = alpha * y + (1 - alpha) * (level + phi * trend)
    return new_level, beta * (new_level - level) + (1 - beta) * phi * trend


def _squared_errors(made: np.ndarray, actual: float) -> np.ndarray:
    ok = np.isfinite(made) & math.isfinite(actual)
    return np.where(ok, (made - actual) ** 2, 0.0)


def _blend(now: np.ndarray, squared: np.ndarray, weight: np.ndarray) -> float:
    """The adaptive blend of the candidates' forecasts `now` from their decayed squared errors."""
    usable = np.isfinite(now) & (weight >= 1.0)
    if not usable.any():
        # Nothing scored yet: equal weights, the hard-to-beat default of forecast combination.
        available = now[np.isfinite(now)]
        return float(available.mean()) if available.size else math.nan
    mse = np.where(usable, squared / np.maximum(weight, 1e-12), np.inf)
    if usable[0]:
        # Persistence is the baseline: a candidate joins only while it has done better (a tie, such as
        # the mean of one value against that value, has shown nothing).
        joins = mse < mse[0]
        joins[0] = True
        usable &= joins
    inverse = 1.0 / np.maximum(mse[usable], 1e-12)
    return float(np.dot(inverse, now[usable]) / inverse.sum())


def _conformal_quantile(residuals: deque[float], level: float) -> float | None:
    n = len(residuals)
    rank = math.ceil((n + 1) * level)
    if n < MIN_RESIDUALS or rank > n:
        return None
    return float(np.partition(np.fromiter(residuals, float), rank - 1)[rank - 1])


def _upper(expected: float, shift: float, quantile: float | None, recent: np.ndarray) -> float:
    base = max(expected, 0.0)
    if quantile is None:
        # Too few errors seen: stay wide, at least twice the expected and the recent peak.
        peak = float(np.nanmax(recent)) if np.isfinite(recent).any() else 0.0
        return max(2.0 * base + shift, peak)
    return max((base + shift) * math.exp(quantile) - shift, base)


def _aci_step(alpha: float, missed: bool) -> float:
    """Adaptive conformal inference, one-sided: misses above 10 % raise the quantile level; it never
    drops below the plain conformal 90 % (under-covering costs an SLO)."""
    target = 1.0 - UPPER_QUANTILE
    return min(max(alpha + ACI_STEP * (target - (1.0 if missed else 0.0)), 0.001), target)


# ---------------------------------------------------------------------------- candidates (batch)


def _seasonal_change(values: np.ndarray, period: int, horizon: int, seasons: int) -> np.ndarray:
    """Median over earlier seasons of y[t+h-kP] / y[t-kP]; NaN where no season is available."""
    n = len(values)
    if period <= horizon:
        return np.full(n, np.nan)
    ratios = np.full((seasons, n), np.nan)
    for k in range(1, seasons + 1):
        base = np.arange(n) - k * period
        ok = base >= 0
        before = np.full(n, np.nan)
        after = np.full(n, np.nan)
        before[ok] = values[base[ok]]
        after[ok] = values[base[ok] + horizon]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios[k - 1] = np.where(before > 0, after / before, np.nan)
    return np.array([_median_ratio(ratios[:, t]) for t in range(n)])


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
        "mean": _trailing_means(values, max(horizon_steps, 1)),
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


def _grid_arrays(grid: tuple[tuple[float, float, float], ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    alpha, beta, phi = (np.array([g[k] for g in grid], dtype=float) for k in range(3))
    return alpha, beta, phi


def _reach(phi: np.ndarray, horizon: int) -> np.ndarray:
    return sum(phi**k for k in range(1, horizon + 1))


def _damped_trends(values: np.ndarray, horizon: int, grid: tuple[tuple[float, float, float], ...]) -> np.ndarray:
    """`damped_trend` for every (alpha, beta, phi) of `grid` at once: one row per setting."""
    alpha, beta, phi = _grid_arrays(grid)
    reach = _reach(phi, horizon)
    out = np.full((len(grid), len(values)), np.nan)
    level = trend = None
    for t, y in enumerate(values):
        if np.isfinite(y):
            if level is None:
                level, trend = np.full(len(grid), float(y)), np.zeros(len(grid))
            else:
                level, trend = _trend_update(level, trend, float(y), alpha, beta, phi)
        if level is not None:
            out[:, t] = np.maximum(level + reach * trend, 0.0)
    return out


# A coarse, conventional grid (light to heavy smoothing, weak to strong damping): not fitted to a trace.
TREND_GRID = tuple((a, b, phi) for a in (0.2, 0.5, 0.8) for b in (0.05, 0.1, 0.3) for phi in (0.8, 0.9, 0.98))
TREND_DEFAULT = TREND_GRID.index((TREND_ALPHA, TREND_BETA, TREND_PHI))
_TREND_ARRAYS = _grid_arrays(TREND_GRID)


def selected_trend(values: np.ndarray, horizon: int, decay: float = 1.0) -> np.ndarray:
    """Damped trend whose constants are chosen at every origin from TREND_GRID by the (decayed) squared
    error of their own earlier forecasts for this horizon (causal: only forecasts whose actual has arrived)."""
    paths = _damped_trends(values, horizon, TREND_GRID)
    scored = np.zeros(len(TREND_GRID))  # decayed errors of the origins whose actual has arrived
    expected = np.full(len(values), np.nan)
    for t in range(len(values)):
        origin = t - horizon
        if origin >= 0:
            scored = scored * decay + _squared_errors(paths[:, origin], float(values[t]))
        choice = int(np.argmin(scored)) if origin >= 0 and scored.any() else TREND_DEFAULT
        expected[t] = paths[choice, t]
    return expected


# ---------------------------------------------------------------------------- blend and calibration (batch)

BLEND = ("persistence", "mean", "_daily", "_weekly")


def scored_origin(t: int, horizon: int) -> int | None:
    """The origin whose candidates the value at step t scores in the blend.

    Once a horizon has passed, the forecasts made a horizon ago. Before that none has reached its
    target, so the blend scores the forecasts made half-way back (a shorter lag, where the mean and
    persistence already differ) rather than average candidates nothing has tried: on a series of a
    few hours the first horizon is a large share of it (docs/benchmarks.md, "Forecast").
    """
    if t >= horizon:
        return t - horizon
    return t // 2 if t >= 1 else None


def _adaptive_expected(values: np.ndarray, candidates: dict[str, np.ndarray], horizon: int, decay: float) -> np.ndarray:
    stack = np.vstack([candidates[name] for name in BLEND])
    squared = np.zeros(len(BLEND))
    weight = np.zeros(len(BLEND))
    expected = np.full(len(values), np.nan)
    for t in range(len(values)):
        origin = scored_origin(t, horizon)
        squared *= decay
        weight *= decay
        if origin is not None and np.isfinite(values[t]):
            made = stack[:, origin]
            scored = np.isfinite(made)
            squared[scored] += (made[scored] - values[t]) ** 2
            weight[scored] += 1.0
        expected[t] = _blend(stack[:, t], squared, weight)
    return expected


def calibrate_upper(values: np.ndarray, expected: np.ndarray, horizon: int, step_s: float,
                    memory: ForecastMemory = DEFAULT_MEMORY) -> np.ndarray:
    """p90 at every origin from the expected forecast's own past errors (causal)."""
    window = memory.residual_steps(step_s)
    residuals: deque[float] = deque(maxlen=window)
    shifts = np.array([_log_shift(mean) for mean in _trailing_means(values, window)])
    upper = np.full(len(values), np.nan)
    alpha = 1.0 - UPPER_QUANTILE
    for t in range(len(values)):
        origin = t - horizon
        if origin >= 0 and np.isfinite(values[t]) and np.isfinite(expected[origin]):
            shift = shifts[origin]
            if _has_scale(shift):
                residuals.append(math.log(values[t] + shift) - math.log(max(expected[origin], 0.0) + shift))
            if np.isfinite(upper[origin]):
                alpha = _aci_step(alpha, values[t] > upper[origin])
        if np.isfinite(expected[t]):
            quantile = _conformal_quantile(residuals, 1.0 - alpha)
            upper[t] = _upper(float(expected[t]), float(shifts[t]), quantile, values[max(t - horizon, 0): t + 1])
    return upper


def forecast_path(series: RateSeries, horizon_s: float = DEFAULT_HORIZON_S, method: str = DEFAULT_METHOD,
                  memory: ForecastMemory = DEFAULT_MEMORY) -> ForecastPath:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (one of {', '.join(METHODS)})")
    horizon = max(int(round(horizon_s / series.step_s)), 1)
    values = np.where(series.valid, series.rates_rps, np.nan)
    decay = memory.decay(series.step_s)
    if method == "adaptive":
        expected = _adaptive_expected(values, candidate_forecasts(series, horizon), horizon, decay)
    elif method == "trend":
        expected = selected_trend(values, horizon, decay)
    else:
        expected = candidate_forecasts(series, horizon)[method]
    upper = calibrate_upper(values, expected, horizon, series.step_s, memory)
    return ForecastPath(expected=expected, p90=upper, horizon_steps=horizon)


# ---------------------------------------------------------------------------- one step at a time


def _json_floats(values: Iterable[float]) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in values]


def _floats(values: Iterable[float | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


class OnlineForecast:
    """`forecast_path` one step at a time, for a series that grows by one value per step.

    After `update(y_t)`, `expected` and `p90` are the forecast made at t for t + horizon: the same
    numbers `forecast_path` gives at t for the same series, method and memory
    (`tests/engine/test_forecast_online.py` checks it on random series), from a bounded state
    (the values the seasonal ratios, the mean and the p90 read, the forecasts still waiting for
    their actual, the scores and the residuals), so a step costs the same after a day as after a
    week. `to_dict()`/`from_dict()` keep it in JSON (the live loop stores it with the pool).
    """

    def __init__(self, method: str = DEFAULT_METHOD, step_s: float = 600.0, horizon_steps: int = 3,
                 memory: ForecastMemory = DEFAULT_MEMORY) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r} (one of {', '.join(METHODS)})")
        self.method, self.step_s, self.horizon, self.memory = method, float(step_s), max(int(horizon_steps), 1), memory
        self.window = memory.residual_steps(self.step_s)
        self.decay = memory.decay(self.step_s)
        self.day = int(round(DAY_S / self.step_s))
        self.week = int(round(WEEK_S / self.step_s))
        self.daily = method in ("seasonal-daily", "seasonal", "adaptive") and self.day > self.horizon
        self.weekly = method in ("seasonal-weekly", "seasonal", "adaptive") and self.week > self.horizon
        self.keep = max(self.horizon + 1, self.window,
                        SEASONS_DAILY * self.day + 1 if self.daily else 0,
                        SEASONS_WEEKLY * self.week + 1 if self.weekly else 0)
        self.values: list[float] = []  # the last `keep` values, NaN for gaps
        self.steps = 0  # values seen
        self.known = 0  # of them known
        self.last = math.nan  # the last known value
        self.made: deque[np.ndarray] = deque(maxlen=self.horizon)  # the candidates (or trend paths) of the last origins
        self.squared = np.zeros(len(BLEND))
        self.weight = np.zeros(len(BLEND))
        self.level: np.ndarray | None = None
        self.trend = np.zeros(len(TREND_GRID))
        self.scored = np.zeros(len(TREND_GRID))
        self.reach = _reach(_TREND_ARRAYS[2], self.horizon)
        self.residuals: deque[float] = deque(maxlen=self.window)
        self.alpha = 1.0 - UPPER_QUANTILE
        self.origins: deque[tuple[float, float, float]] = deque(maxlen=self.horizon)  # (expected, p90, shift)
        self.expected = math.nan
        self.p90 = math.nan

    # -- the step

    def update(self, value: float) -> None:
        """The next step's value (NaN: a gap, neither learned from nor scored)."""
        y = float(value) if value is not None and math.isfinite(value) else math.nan
        self.values.append(y)
        if len(self.values) > self.keep:
            del self.values[0]
        t = self.steps
        self.steps += 1
        if math.isfinite(y):
            self.last = y
            self.known += 1
        expected = self._expected(y, t)
        self._calibrate(y, t, expected)

    def _back(self, lag: int) -> float:
        """The value `lag` steps before the newest (NaN before the series began)."""
        return self.values[-1 - lag] if lag < len(self.values) else math.nan

    def _change(self, period: int, seasons: int) -> float:
        ratios = np.full(seasons, np.nan)
        for k in range(1, seasons + 1):
            before, after = self._back(k * period), self._back(k * period - self.horizon)
            if before > 0:
                ratios[k - 1] = after / before
        return _median_ratio(ratios)

    def _candidates(self) -> dict[str, float]:
        last = self.last
        daily = last * self._change(self.day, SEASONS_DAILY) if self.daily else math.nan
        weekly = last * self._change(self.week, SEASONS_WEEKLY) if self.weekly else math.nan
        return {"persistence": last, "_daily": daily, "_weekly": weekly,
                "mean": _window_mean(np.array(self.values[-self.horizon:])) if self.method in ("mean", "adaptive")
                else math.nan}

    def _expected(self, y: float, t: int) -> float:
        if self.method == "trend":
            scoring = t >= self.horizon and len(self.made) == self.horizon
            alpha, beta, phi = _TREND_ARRAYS
            if math.isfinite(y):
                if self.level is None:
                    self.level, self.trend = np.full(len(TREND_GRID), y), np.zeros(len(TREND_GRID))
                else:
                    self.level, self.trend = _trend_update(self.level, self.trend, y, alpha, beta, phi)
            path = (np.maximum(self.level + self.reach * self.trend, 0.0) if self.level is not None
                    else np.full(len(TREND_GRID), np.nan))
            if scoring:
                self.scored = self.scored * self.decay + _squared_errors(self.made[0], y)
            choice = int(np.argmin(self.scored)) if scoring and self.scored.any() else TREND_DEFAULT
            self.made.append(path)
            return float(path[choice])
        c = self._candidates()
        if self.method == "adaptive":
            now = np.array([c[name] for name in BLEND])
            self.squared *= self.decay
            self.weight *= self.decay
            origin = scored_origin(t, self.horizon)
            # `made` holds the last `horizon` origins, the oldest first (all of them before it is full).
            if origin is not None and len(self.made) == min(t, self.horizon) and math.isfinite(y):
                made = self.made[origin - t + len(self.made)]
                ok = np.isfinite(made)
                self.squared[ok] += (made[ok] - y) ** 2
                self.weight[ok] += 1.0
            self.made.append(now)
            return _blend(now, self.squared, self.weight)
        last, daily, weekly = c["persistence"], c["_daily"], c["_weekly"]
        if self.method == "mean":
            return c["mean"]
        if self.method == "seasonal-daily":
            return daily if math.isfinite(daily) else last
        if self.method == "seasonal-weekly":
            return weekly if math.isfinite(weekly) else last
        if self.method == "seasonal":
            return weekly if math.isfinite(weekly) else daily if math.isfinite(daily) else last
        return last

    def _calibrate(self, y: float, t: int, expected: float) -> None:
        if t >= self.horizon and len(self.origins) == self.horizon:
            made, upper, shift = self.origins[0]
            if math.isfinite(y) and math.isfinite(made):
                if _has_scale(shift):
                    self.residuals.append(math.log(y + shift) - math.log(max(made, 0.0) + shift))
                if math.isfinite(upper):
                    self.alpha = _aci_step(self.alpha, y > upper)
        shift = _log_shift(_window_mean(np.array(self.values[-self.window:])))
        upper = math.nan
        if math.isfinite(expected):
            quantile = _conformal_quantile(self.residuals, 1.0 - self.alpha)
            upper = _upper(expected, shift, quantile, np.array(self.values[-(self.horizon + 1):]))
        self.origins.append((expected, upper, shift))
        self.expected, self.p90 = expected, upper

    def recent(self, steps: int) -> np.ndarray:
        """The last `steps` values (fewer when fewer were kept), oldest first; NaN for gaps."""
        return np.array(self.values[-steps:], dtype=float)

    # -- persistence

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method, "step_s": self.step_s, "horizon_steps": self.horizon,
            "memory": [self.memory.residual_s, self.memory.score_half_life_s],
            "values": _json_floats(self.values), "steps": self.steps, "known": self.known,
            "last": _json_floats([self.last])[0],
            "made": [_json_floats(row) for row in self.made],
            "squared": self.squared.tolist(), "weight": self.weight.tolist(),
            "level": None if self.level is None else self.level.tolist(), "trend": self.trend.tolist(),
            "scored": self.scored.tolist(), "residuals": list(self.residuals), "alpha": self.alpha,
            "origins": [_json_floats(row) for row in self.origins],
            "expected": _json_floats([self.expected])[0], "p90": _json_floats([self.p90])[0],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OnlineForecast:
        made = cls(data["method"], data["step_s"], data["horizon_steps"], ForecastMemory(*data["memory"]))
        made.values = _floats(data["values"])[-made.keep:]
        made.steps, made.known = int(data["steps"]), int(data["known"])
        made.last = _floats([data["last"]])[0]
        made.made.extend(np.array(_floats(row)) for row in data["made"])
        made.squared, made.weight = np.array(data["squared"], float), np.array(data["weight"], float)
        made.level = None if data["level"] is None else np.array(data["level"], float)
        made.trend, made.scored = np.array(data["trend"], float), np.array(data["scored"], float)
        made.residuals.extend(float(r) for r in data["residuals"])
        made.alpha = float(data["alpha"])
        made.origins.extend(tuple(_floats(row)) for row in data["origins"])  # type: ignore[misc]
        made.expected, made.p90 = _floats([data["expected"], data["p90"]])
        return made


def online_path(series: RateSeries, horizon_s: float = DEFAULT_HORIZON_S, method: str = DEFAULT_METHOD,
                memory: ForecastMemory = DEFAULT_MEMORY) -> ForecastPath:
    """`forecast_path` computed one step at a time with `OnlineForecast`."""
    horizon = max(int(round(horizon_s / series.step_s)), 1)
    online = OnlineForecast(method, series.step_s, horizon, memory)
    expected, upper = np.full(len(series), np.nan), np.full(len(series), np.nan)
    for t, value in enumerate(np.where(series.valid, series.rates_rps, np.nan)):
        online.update(value)
        expected[t], upper[t] = online.expected, online.p90
    return ForecastPath(expected=expected, p90=upper, horizon_steps=horizon)


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
    wape: float  # weighted absolute percentage error of the expected value: sum |error| / sum actual
    persistence_wape: float
    wape_vs_persistence: float  # wape / persistence_wape - 1: below 0 is better than persistence
    seconds: float  # CPU time of the walk-forward forecasts


def _accuracy(predicted: np.ndarray, actual: np.ndarray) -> float:
    """1 - weighted absolute percentage error."""
    total = float(np.abs(actual).sum())
    return 1.0 - float(np.abs(predicted - actual).sum()) / total if total > 0 else float("nan")


def backtest(series: RateSeries, horizon_s: float = DEFAULT_HORIZON_S, method: str = DEFAULT_METHOD,
             score_from_s: float = 0.0) -> Backtest:
    """Score every forecast whose origin and target are both real data (gap windows are skipped) and
    whose target is at least `score_from_s` after the series' start (learned from, not scored, before)."""
    started = time.process_time()
    path = forecast_path(series, horizon_s, method)
    seconds = time.process_time() - started
    h = path.horizon_steps
    values = np.where(series.valid, series.rates_rps, np.nan)
    origin = values[:-h] if h < len(values) else np.array([])
    actual = values[h:]
    expected, upper = path.expected[: len(actual)], path.p90[: len(actual)]
    targets_s = series.step_s * np.arange(h, len(values))
    scored = (np.isfinite(origin) & np.isfinite(actual) & np.isfinite(expected) & np.isfinite(upper)
              & (targets_s >= score_from_s - 1e-9))
    if not scored.any():
        raise SeriesError("no point to score: the series is shorter than the horizon or all gaps")
    actual, expected, upper, origin = actual[scored], expected[scored], upper[scored], origin[scored]
    covered = upper >= actual
    overshoot_at = covered & (actual > 0)
    wape, persistence_wape = 1.0 - _accuracy(expected, actual), 1.0 - _accuracy(origin, actual)
    return Backtest(
        method=method,
        points=int(scored.sum()),
        accuracy=round(_accuracy(expected, actual), 4),
        persistence_accuracy=round(_accuracy(origin, actual), 4),
        p90_coverage=round(float(covered.mean()), 4),
        mean_overshoot=round(float((upper[overshoot_at] / actual[overshoot_at] - 1).mean()), 4) if overshoot_at.any() else 0.0,
        wape=round(wape, 4),
        persistence_wape=round(persistence_wape, 4),
        wape_vs_persistence=round(wape / persistence_wape - 1, 4) if persistence_wape > 0 else 0.0,
        seconds=round(seconds, 3),
    )


def cut_days(series: RateSeries, first_day: float, last_day: float) -> RateSeries:
    """The steps from `first_day` (inclusive) to `last_day` (exclusive), in days from the start: a
    shorter series, as if the trace began there (the forecast sees nothing before it)."""
    per_day = DAY_S / series.step_s
    lo, hi = int(round(first_day * per_day)), int(round(last_day * per_day))
    if not 0 <= lo < hi or lo >= len(series):
        raise SeriesError(f"--days {first_day:g}:{last_day:g} is outside the trace ({len(series) / per_day:.2f} days)")
    return RateSeries(series.step_s, series.rates_rps[lo:hi], series.valid[lo:hi], series.start_s + lo * series.step_s)


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
    parser.add_argument("--days", metavar="FIRST:LAST", help="only these days of the trace (e.g. 0:1 the first day alone)")
    parser.add_argument("--score-from-day", type=float, default=0.0, metavar="D",
                        help="learn from the whole series, score only targets from day D on (held-out data)")
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
        if args.days is not None:
            first, _, last = args.days.partition(":")
            try:
                days = float(first), float(last)
            except ValueError:
                raise SeriesError(f"--days expects FIRST:LAST in days, got {args.days!r}") from None
            series = cut_days(series, *days)
        if args.score_from_day < 0:
            raise SeriesError("--score-from-day must be at least 0")
        result = backtest(series, args.horizon_min * 60, args.method, args.score_from_day * DAY_S)
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
