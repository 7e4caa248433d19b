"""What a replay reports, identical for both modes."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scaling.sim.config import SimConfig
from scaling.sim.lifecycle import ReplicaSet
from scaling.sim.policies.base import Observation


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values_s: np.ndarray, weights: np.ndarray | None = None) -> Percentiles:
        if len(values_s) == 0:
            return cls(float("nan"), float("nan"), float("nan"))
        p50, p95, p99 = weighted_quantiles(values_s, (0.5, 0.95, 0.99), weights)
        return cls(round(p50 * 1000, 1), round(p95 * 1000, 1), round(p99 * 1000, 1))


QUANTILE_RESOLUTION = 0.001  # weighted quantiles are exact to 0.1 % (log-spaced buckets)
FEW_POINTS = 20_000  # up to this many points (a tick's window) only the buckets holding a point are summed
_FLOOR = 1e-6  # seconds: the lowest bucket
_STEP = np.log1p(QUANTILE_RESOLUTION)
_APART = 1 << 40  # added to the second set's buckets in `paired_quantiles`: far above any bucket


def quantile_buckets(values: np.ndarray) -> np.ndarray:
    """Each value's bucket on the log scale of `weighted_quantiles`."""
    return np.floor(np.log(np.maximum(values, _FLOOR) / _FLOOR) / _STEP).astype(np.int64)


def _bucket_values(positions: np.ndarray) -> list[float]:
    return [float(_FLOOR * np.exp((p + 0.5) * _STEP)) for p in positions]


def weighted_quantiles(values: np.ndarray, quantiles: tuple[float, ...], weights: np.ndarray | None = None) -> list[float]:
    if weights is None:
        return [float(q) for q in np.quantile(values, quantiles)]
    # Fluid mode weighs millions of points: bucket them on a log scale instead of sorting.
    index = quantile_buckets(values)
    if index.size <= FEW_POINTS:
        return paired_quantiles(index, None, weights, quantiles)[0]
    cumulative = np.cumsum(np.bincount(index, weights=weights))
    return _bucket_values(np.searchsorted(cumulative, np.array(quantiles) * cumulative[-1]))


def paired_quantiles(first: np.ndarray, second: np.ndarray | None, weights: np.ndarray, quantiles: tuple[float, ...]
                     ) -> tuple[list[float], list[float]]:
    """The weighted quantiles of few points given by their buckets (`quantile_buckets`), and of a second
    set with the same weights (a tick's queue times beside its TTFTs), in one pass.

    A tick's window: its 480 points span up to 20,000 buckets, so the buckets holding a point are
    numbered in order and summed alone. The sums are those of a cumulative sum over every bucket, in
    the same order (bincount adds in input order, and each set's buckets are apart from the other's;
    a cumulative sum past an empty bucket adds 0), and the first cumulative sum reaching a share is
    always a filled bucket's, so the answer is the same to the bit."""
    both = first if second is None else np.concatenate((first, second + _APART))
    ordered = np.sort(both)
    filled = np.empty(ordered.size, dtype=bool)
    filled[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=filled[1:])
    buckets = ordered[filled]
    sums = np.bincount(np.searchsorted(buckets, both), weights=weights if second is None else np.concatenate((weights, weights)))
    shares = np.array(quantiles)

    def answer(part: slice, offset: int) -> list[float]:
        cumulative = np.cumsum(sums[part])
        return _bucket_values(buckets[part][np.searchsorted(cumulative, shares * cumulative[-1])] - offset)

    if second is None:
        return answer(slice(None), 0), []
    split = int(np.searchsorted(buckets, _APART))
    return answer(slice(0, split), 0), answer(slice(split, None), _APART)


@dataclass
class SimResult:
    policy: str
    mode: str
    requests: int
    served: int
    rejected: int
    timed_out: int
    retries: int
    slo_attainment: float
    ttft_ms: Percentiles
    e2e_ms: Percentiles
    gpu_hours: float
    cost_usd: float
    max_replicas: int
    mean_ready_replicas: float
    cold_starts: int
    wall_s: float = 0.0
    e2e_mean_s: float = float("nan")  # for Little's law checks; not part of the JSON
    samples: list[Observation] = field(default_factory=list, repr=False)  # one per policy tick
    # Requests that missed the TTFT SLO (too slow, timed out or rejected) by minute of arrival; request
    # mode, and fluid mode when asked (`run_fluid_mode(..., misses_by_minute=True)`: served requests too
    # slow only). Not part of the JSON unless the replay asks.
    misses_by_minute: dict[int, int] | None = field(default=None, repr=False)

    def as_json(self) -> dict[str, object]:
        keys = (
            "policy mode requests served rejected timed_out retries slo_attainment ttft_ms e2e_ms "
            "gpu_hours cost_usd max_replicas mean_ready_replicas cold_starts wall_s"
        ).split()
        out: dict[str, object] = {}
        for key in keys:
            value = getattr(self, key)
            out[key] = vars(value) if isinstance(value, Percentiles) else value
        return out


def pool_costs(replicas: ReplicaSet, config: SimConfig, end_s: float) -> dict[str, float | int]:
    """What the pool cost after the warm-up (`config.warmup_s`, not scored)."""
    since = min(config.warmup_s, end_s)
    gpu_hours = replicas.replica_seconds(end_s, since) / 3600 * config.profile.gpus_per_replica
    return {
        "gpu_hours": round(gpu_hours, 4),
        "cost_usd": round(gpu_hours * config.profile.gpu_hour_usd, 2),
        "max_replicas": replicas.max_alive(since),
        "mean_ready_replicas": round(replicas.ready_seconds(end_s, since) / (end_s - since), 3) if end_s > since else 0.0,
        "cold_starts": replicas.cold_starts_since(since),
    }
