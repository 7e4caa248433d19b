"""The incremental forecast (`OnlineForecast`) gives the batch forecast's numbers, one step at a time."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaling.engine.forecast import (DEFAULT_MEMORY, METHODS, ForecastMemory, OnlineForecast, forecast_path,
                                     online_path)
from scaling.engine.rate_series import from_values

rate = st.one_of(st.just(math.nan), st.just(0.0), st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False))
MEMORIES = (DEFAULT_MEMORY, ForecastMemory(residual_s=3 * 3600.0, score_half_life_s=1800.0))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.allclose(a, b, rtol=1e-9, atol=1e-9, equal_nan=True))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(rate, min_size=1, max_size=420), method=st.sampled_from(METHODS),
       step_s=st.sampled_from([3600.0, 600.0, 60.0]), horizon=st.integers(1, 4), memory=st.sampled_from(MEMORIES))
def test_one_step_at_a_time_is_the_batch_forecast(values, method, step_s, horizon, memory):
    # Hourly steps reach two weekly seasons within 420 values: every lag of the seasonal ratios is exercised.
    series = from_values(values, step_s)
    batch = forecast_path(series, horizon * step_s, method, memory)
    online = online_path(series, horizon * step_s, method, memory)
    assert _same(batch.expected, online.expected)
    assert _same(batch.p90, online.p90)


def _wave(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = (100 + 60 * np.sin(np.arange(n) * 2 * np.pi / 24)) * rng.lognormal(0, 0.2, n)
    values[rng.random(n) < 0.05] = np.nan
    return values


@pytest.mark.parametrize("method", ["adaptive", "trend"])
def test_it_matches_the_batch_forecast_over_three_weeks_of_hourly_rates(method):
    series = from_values(_wave(21 * 24, 3), 3600.0)
    batch, online = forecast_path(series, 7200.0, method), online_path(series, 7200.0, method)
    assert np.isfinite(batch.expected[24:]).all()
    assert _same(batch.expected, online.expected) and _same(batch.p90, online.p90)


@pytest.mark.parametrize("method", ["adaptive", "trend", "seasonal"])
def test_its_state_survives_json_and_goes_on_as_if_never_stored(method):
    values = _wave(300, 5)
    kept, stored = OnlineForecast(method, 3600.0, 2), OnlineForecast(method, 3600.0, 2)
    for value in values[:200]:
        kept.update(value)
        stored.update(value)
    stored = OnlineForecast.from_dict(json.loads(json.dumps(stored.to_dict(), allow_nan=False)))
    for value in values[200:]:
        kept.update(value)
        stored.update(value)
        assert (kept.expected, kept.p90) == (stored.expected, stored.p90)


def test_its_state_stays_bounded():
    online = OnlineForecast("adaptive", 600.0, 3)
    for value in _wave(3 * 2016, 1):  # six weeks of 10-minute bins
        online.update(value)
    assert len(online.values) == online.keep == 2 * 1008 + 1  # two weekly seasons
    assert len(online.residuals) <= 3 * 144 and len(online.made) == len(online.origins) == 3


def test_it_refuses_an_unknown_method():
    with pytest.raises(ValueError, match="unknown method"):
        OnlineForecast("crystal-ball")


@pytest.mark.parametrize("method", ["adaptive", "trend"])
def test_a_pool_that_starts_silent_keeps_a_p90_on_the_scale_of_its_traffic(method):
    # A new pool: a minute without traffic, then about 5 req/s. A forecast made from the silent window
    # has no scale to err by: measured against the 1e-9 shift, its miss was a billion-fold and kept the
    # p90 there for the residual window (the decision record showed 2.4e10 req/s).
    values = np.concatenate([[0.0], 5.0 * np.random.default_rng(1).lognormal(0.0, 0.2, 240)])
    series = from_values(values, 60.0)
    online = online_path(series, 120.0, method)
    assert np.nanmax(online.p90[1:]) < 20.0  # was 3e10 from the 11th minute to the 20th
    assert _same(online.p90, forecast_path(series, 120.0, method).p90)
