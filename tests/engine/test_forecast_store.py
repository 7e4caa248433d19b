"""PlannerMemory.seasonal_forecast packed (issue 18, load): the forecasters' long series stored as base64
float64, exactly; a memory written before packing still loads; the next forecasts are the same numbers."""
from __future__ import annotations

import json
import math

import numpy as np

from scaling import forecast_store
from scaling.engine import decide

DAY_S = 86_400.0
NOW_S = 1_764_000_000.0


class History:
    """decide.PoolHistory over a daily curve at 15-s samples, with gaps (unknown bins) and noise."""

    def __init__(self, end_s: float) -> None:
        self.end_s = end_s

    def rates_since(self, since_s: float):  # noqa: ANN201
        at = np.arange(max(since_s, NOW_S - 3 * DAY_S), self.end_s, 15.0)
        rates = 20 + 15 * np.sin(2 * math.pi * at / DAY_S) + np.random.default_rng(int(since_s) % 1000).normal(0, 2, at.size)
        keep = (at // 3600) % 7 != 3  # an hour in seven never arrived
        return at[keep], rates[keep]

    def requested_at(self) -> list[float]:
        return []

    def approved_floor(self, now_s: float) -> int:
        return 0


PLAN = decide.pool_plan(capacity_rps_per_replica=4.0, min_replicas=1, max_replicas=20, slo_latency_s=1.0,
                        slo_percentile=0.95, unloaded_latency_s=0.2, cold_start_p95_s=90.0, warm_pool_fraction=0.0,
                        target_queue_per_replica=2.0)


def _state(now_s: float, state: decide.DecideState | None = None):  # noqa: ANN202
    return decide.forecasts(History(now_s), PLAN, now_s, math.nan, state or decide.decide_state_from(None, None))


def _stored(forecast: dict) -> dict:
    return json.loads(json.dumps(forecast))  # what a JSONField gives back


def test_a_packed_memory_gives_back_the_same_forecasters_and_the_same_next_forecasts() -> None:
    *_, state = _state(NOW_S)
    plain = decide.forecast_dict(state)
    assert any(v is None for v in plain["long"]["forecaster"]["values"])  # unknown bins travel as well
    stored = _stored(forecast_store.pack(plain))
    assert isinstance(stored["long"]["forecaster"]["values"], dict)
    assert forecast_store.unpack(stored) == plain
    restored = decide.decide_state_from({}, forecast_store.unpack(stored))
    # The next ticks: the restored forecasters take the next bins to the same numbers, bit for bit.
    for later_s in (NOW_S + 60, NOW_S + 660, NOW_S + 1300):
        lead_a, peak_a, recent_a, state = _state(later_s, state)
        lead_b, peak_b, recent_b, restored = _state(later_s, restored)
        assert (lead_a, peak_a) == (lead_b, peak_b) and lead_a is not None
        assert np.array_equal(recent_a, recent_b, equal_nan=True)
    assert decide.forecast_dict(state) == decide.forecast_dict(restored)


def test_a_memory_written_before_packing_loads_unchanged() -> None:
    *_, state = _state(NOW_S)
    plain = _stored(decide.forecast_dict(state))
    assert forecast_store.unpack(plain) == plain
    assert forecast_store.unpack({}) == {} and forecast_store.unpack(None) == {}
    assert forecast_store.unpack({"expected": 3.0, "lead": None, "long": None}) == {"expected": 3.0, "lead": None,
                                                                                   "long": None}


def test_packing_makes_the_memory_smaller() -> None:
    *_, state = _state(NOW_S)
    plain = decide.forecast_dict(state)
    # 3 days with gaps (a null is short in JSON); a full week without gaps packs to about 58 % (benchmarks.md).
    assert len(json.dumps(forecast_store.pack(plain))) < 0.85 * len(json.dumps(plain))
