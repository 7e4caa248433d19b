"""Request-rate series for forecasting, and small readers for the shared trace formats.

A series is evenly spaced (`step_s`), in requests per second, with a `valid` mask: windows flagged
as collection gaps (or suspiciously low next to one) are not data and are neither learned from nor
scored. Readers: the ServeGen aggregate CSV (600-s windows, with `collection_gap`/`suspect_low`)
and the Azure LLM inference request logs (one row per request, binned to `step_s`).
"""
from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMATS = ("auto", "servegen", "azure", "rates")


class SeriesError(ValueError):
    """A trace that cannot be read as a rate series."""


@dataclass(frozen=True)
class RateSeries:
    step_s: float
    rates_rps: np.ndarray  # float, NaN where not valid
    valid: np.ndarray  # bool
    start_s: float = 0.0

    def __len__(self) -> int:
        return len(self.rates_rps)

    def times_s(self) -> np.ndarray:
        return self.start_s + self.step_s * np.arange(len(self))


def from_values(values: list[float] | np.ndarray, step_s: float, valid: np.ndarray | None = None) -> RateSeries:
    rates = np.asarray(values, dtype=float).copy()
    mask = np.isfinite(rates) if valid is None else (np.asarray(valid, dtype=bool) & np.isfinite(rates))
    rates[~mask] = np.nan
    return RateSeries(step_s=float(step_s), rates_rps=rates, valid=mask)


def _header(path: Path) -> list[str]:
    with path.open(newline="") as handle:
        return next(csv.reader(handle), [])


def detect_format(path: Path) -> str:
    header = [h.strip() for h in _header(path)]
    if "total_rate_rps" in header and "window_start_s" in header:
        return "servegen"
    if header[:1] == ["TIMESTAMP"]:
        return "azure"
    if header[:2] == ["t_s", "rate_rps"]:
        return "rates"
    raise SeriesError(f"{path.name}: unknown format (header {','.join(header)[:80]!r}); pass --format")


def read_servegen_aggregate(path: Path) -> RateSeries:
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise SeriesError(f"{path.name}: no rows")
    try:
        starts = np.array([float(r["window_start_s"]) for r in rows])
        step = float(rows[0]["window_len_s"])
        rates = np.array([float(r["total_rate_rps"]) for r in rows])
        flagged = np.array([r.get("collection_gap", "0") == "1" or r.get("suspect_low", "0") == "1" for r in rows])
    except (KeyError, ValueError) as error:
        raise SeriesError(f"{path.name}: not a ServeGen aggregate CSV ({error})") from error
    if step <= 0:
        raise SeriesError(f"{path.name}: window_len_s must be positive")
    # Place rows on a regular grid; windows that are absent count as gaps.
    index = np.rint((starts - starts[0]) / step).astype(int)
    values = np.full(index.max() + 1, np.nan)
    valid = np.zeros(index.max() + 1, dtype=bool)
    values[index] = rates
    valid[index] = ~flagged
    values[~valid] = np.nan
    return RateSeries(step_s=step, rates_rps=values, valid=valid, start_s=float(starts[0]))


def _azure_seconds(stamp: str) -> float:
    # 7 fractional digits, which datetime.fromisoformat rejects before 3.11: parse seconds as a float.
    day, clock = stamp.strip().split(" ")
    hours, minutes, seconds = clock.split(":")
    midnight = dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc).timestamp()
    return midnight + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def read_azure_trace(path: Path, step_s: float) -> RateSeries:
    if step_s <= 0:
        raise SeriesError("--step-s must be positive")
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        next(reader, None)
        try:
            arrivals = np.array([_azure_seconds(row[0]) for row in reader if row])
        except (ValueError, IndexError) as error:
            raise SeriesError(f"{path.name}: not an Azure LLM inference trace ({error})") from error
    if arrivals.size == 0:
        raise SeriesError(f"{path.name}: no requests")
    offsets = arrivals - arrivals.min()
    complete_bins = int(offsets.max() // step_s)  # the trailing partial bin is dropped
    if complete_bins < 1:
        raise SeriesError(f"{path.name}: shorter than one {step_s:g}-s step")
    counts = np.bincount((offsets // step_s).astype(int), minlength=complete_bins + 1)[:complete_bins]
    return from_values(counts / step_s, step_s)


def read_rates_csv(path: Path) -> RateSeries:
    """`t_s,rate_rps[,valid]` at a fixed step."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    try:
        times = np.array([float(r["t_s"]) for r in rows])
        rates = np.array([float(r["rate_rps"]) for r in rows])
        valid = np.array([r.get("valid", "1") != "0" for r in rows])
    except (KeyError, ValueError) as error:
        raise SeriesError(f"{path.name}: not a t_s,rate_rps CSV ({error})") from error
    if len(times) < 2:
        raise SeriesError(f"{path.name}: needs at least two rows")
    series = from_values(rates, float(times[1] - times[0]), valid)
    return RateSeries(series.step_s, series.rates_rps, series.valid, float(times[0]))


def read_series(path: Path, fmt: str = "auto", step_s: float | None = None) -> RateSeries:
    if not path.is_file():
        raise SeriesError(f"no such file: {path}")
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "servegen":
        return read_servegen_aggregate(path)
    if fmt == "azure":
        return read_azure_trace(path, 60.0 if step_s is None else step_s)
    if fmt == "rates":
        return read_rates_csv(path)
    raise SeriesError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


def resample(series: RateSeries, step_s: float) -> RateSeries:
    """Coarser steps, a whole multiple of the current one: the mean rate, valid only if every part was."""
    factor = step_s / series.step_s
    if factor < 1 or abs(factor - round(factor)) > 1e-9:
        raise SeriesError(f"--step-s {step_s:g} must be a whole multiple of the trace's {series.step_s:g}-s step")
    k = int(round(factor))
    blocks = len(series) // k
    if blocks < 1:
        raise SeriesError(f"the trace is shorter than one {step_s:g}-s step")
    rates = series.rates_rps[: blocks * k].reshape(blocks, k)
    valid = series.valid[: blocks * k].reshape(blocks, k).all(axis=1)
    with np.errstate(invalid="ignore"):
        means = np.where(valid, np.nanmean(np.where(np.isfinite(rates), rates, 0.0), axis=1), np.nan)
    return RateSeries(step_s=float(step_s), rates_rps=means, valid=valid, start_s=series.start_s)
