"""How `PlannerMemory.seasonal_forecast` is stored: the decide step's dict with its long float series packed.

The forecasters' bins (`values`: 8 days of 10-minute bins) and residuals are most of a pool's memory, and
the loop rewrites it every tick. As JSON numbers they take about 19 characters each; packed as base64 of
little-endian float64 they take 10.7, exactly (NaN and every bit kept, so forecasts are the same numbers).
`unpack` reads both forms: memories written before packing load unchanged.
"""
from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

PACKED_SERIES = ("values", "residuals")  # OnlineForecast.to_dict's long lists
PACKED_KEY = "f64"  # {"f64": "<base64>"} in place of a list


def _pack_series(values: list[float | None]) -> dict[str, str]:
    array = np.array([math.nan if v is None else float(v) for v in values], dtype="<f8")
    return {PACKED_KEY: base64.b64encode(array.tobytes()).decode("ascii")}


def _unpack_series(stored: Any) -> Any:
    if isinstance(stored, dict) and isinstance(stored.get(PACKED_KEY), str):
        array = np.frombuffer(base64.b64decode(stored[PACKED_KEY], validate=True), dtype="<f8")
        return [None if math.isnan(v) else v for v in array.tolist()]  # as `_json_floats` wrote them
    return stored


def _map_forecasters(forecast: dict[str, Any], convert) -> dict[str, Any]:  # noqa: ANN001
    out = dict(forecast)
    for name in ("lead", "long"):
        binned = forecast.get(name)
        if isinstance(binned, dict) and isinstance(binned.get("forecaster"), dict):
            forecaster = dict(binned["forecaster"])
            for key in PACKED_SERIES:
                if key in forecaster:
                    forecaster[key] = convert(forecaster[key])
            out[name] = binned | {"forecaster": forecaster}
    return out


def pack(forecast: dict[str, Any]) -> dict[str, Any]:
    """`decide.forecast_dict(...)` as stored."""
    return _map_forecasters(forecast, lambda v: _pack_series(v) if isinstance(v, list) else v)


def unpack(stored: dict[str, Any] | None) -> dict[str, Any]:
    """What `decide.decide_state_from` reads, from a stored memory in either form."""
    return _map_forecasters(stored or {}, _unpack_series)
