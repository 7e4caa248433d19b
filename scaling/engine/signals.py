"""A pool's signals as plain values, each carrying its age.

An empty answer, an error, NaN or a sample older than 90 s is **unknown**: `UNKNOWN`, a value of
its own that is never 0 and never compares equal to a number. Reading an unknown signal as zero
is the classic autoscaler failure that scales production down at peak.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields, replace

STALE_AFTER_S = 90.0


class Unknown(enum.Enum):
    UNKNOWN = "unknown"

    def __bool__(self) -> bool:
        # `if signal.value:` must not quietly treat unknown as "no load"; make the caller choose.
        raise TypeError("an unknown signal has no truth value; test it with is_known()")


UNKNOWN = Unknown.UNKNOWN


# No signal Headroom reads (a rate, a queue, seconds of latency, tokens a second, a share) reaches this
# for one pool: past it a series is broken (a counter reset read as a rate, a unit mistake), and read as
# unknown. One such sample, kept in the history, would otherwise hold a pool at its maximum for the
# forecast's memory, or overflow the forecast's squared errors for the days it is kept.
MAX_PLAUSIBLE_READING = 1e9


def plausible(value: float) -> bool:
    return math.isfinite(value) and abs(value) <= MAX_PLAUSIBLE_READING


@dataclass(frozen=True)
class Reading:
    """One sample: its value (None when missing) and how old it is in seconds (None when not known)."""

    value: float | None = None
    age_s: float | None = None

    @property
    def is_known(self) -> bool:
        return (
            self.value is not None
            and plausible(self.value)
            and self.age_s is not None
            and 0.0 <= self.age_s <= STALE_AFTER_S
        )

    @property
    def is_stale(self) -> bool:
        return self.age_s is not None and self.age_s > STALE_AFTER_S

    @property
    def known(self) -> float | Unknown:
        """The value, or UNKNOWN when missing, NaN/infinite, stale or of unknown age."""
        return float(self.value) if self.is_known else UNKNOWN  # type: ignore[arg-type]

    def aged(self, seconds: float) -> Reading:
        """The same sample looked at `seconds` later."""
        return self if self.age_s is None else replace(self, age_s=self.age_s + seconds)


MISSING = Reading()


def sample(value: float | None, sampled_at_s: float | None, now_s: float) -> Reading:
    """A reading from an absolute sample time."""
    return Reading(value=value, age_s=None if sampled_at_s is None else now_s - sampled_at_s)


def is_unknown(reading: Reading) -> bool:
    return not reading.is_known


def all_known(*readings: Reading) -> bool:
    return all(r.is_known for r in readings)


def known_values(readings: tuple[Reading, ...] | list[Reading]) -> list[float]:
    return [float(r.value) for r in readings if r.is_known]  # type: ignore[arg-type]


@dataclass(frozen=True)
class PoolSignals:
    """Everything Headroom reads about one pool at one tick (see design.md §6)."""

    pool: str
    queue_depth: Reading = MISSING  # vllm:num_requests_waiting, summed over ready replicas
    running_requests: Reading = MISSING
    kv_cache_usage: Reading = MISSING  # 0..1
    e2e_p95_s: Reading = MISSING
    e2e_p99_s: Reading = MISSING
    ttft_p95_s: Reading = MISSING
    ttft_p99_s: Reading = MISSING
    queue_time_p95_s: Reading = MISSING
    queue_time_p99_s: Reading = MISSING
    request_rate_rps: Reading = MISSING
    prompt_tokens_rate: Reading = MISSING
    prompt_tokens_tick_rate: Reading = MISSING  # over the last scrape interval (irate), not the window
    generation_tokens_rate: Reading = MISSING
    error_rate: Reading = MISSING  # 0..1
    prefix_cache_hit_rate: Reading = MISSING
    gpu_utilization: Reading = MISSING  # 0..1
    # 0..1, the share of the pool's serving capacity in use at the tick (`work_share`); the busy share term's.
    work_share: Reading = MISSING
    ready_replicas: Reading = MISSING
    # vLLM engines a ready replica runs (its `engine` label's values: `--data-parallel-size` on one pod);
    # each has its own `--max-num-seqs` and GPUs, so the work share counts engines, not pods.
    engines_per_replica: Reading = MISSING
    arriving_replicas: Reading = MISSING  # requested, still starting
    desired_replicas: Reading = MISSING
    waiting_per_ready_replica: tuple[Reading, ...] = ()

    def readings(self) -> dict[str, Reading]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Reading)}

    def reading(self, name: str) -> Reading | None:
        """The reading called `name`; None when no such signal (cheaper than `readings()` for one)."""
        value = getattr(self, name, None)
        return value if isinstance(value, Reading) else None

    def unknown_signals(self) -> list[str]:
        return [name for name, reading in self.readings().items() if not reading.is_known]

    def oldest_age_s(self) -> float | Unknown:
        """The age of the oldest known signal, UNKNOWN when none is known."""
        ages = [r.age_s for r in self.readings().values() if r.is_known and r.age_s is not None]
        return max(ages) if ages else UNKNOWN

    def aged(self, seconds: float) -> PoolSignals:
        changes: dict[str, object] = {name: reading.aged(seconds) for name, reading in self.readings().items()}
        changes["waiting_per_ready_replica"] = tuple(r.aged(seconds) for r in self.waiting_per_ready_replica)
        return replace(self, **changes)  # type: ignore[arg-type]

    def waiting_values(self) -> list[float | None]:
        """Per-ready-replica queue for the HPA core: None where a replica's value is unknown."""
        return [float(r.value) if r.is_known else None for r in self.waiting_per_ready_replica]  # type: ignore[arg-type]


def work_share(signals: PoolSignals, batch_slots: int | None, prefill_tokens_per_s: float | None) -> Reading:
    """The share of the pool's serving capacity in use at the tick: the batch fill (running requests over
    the ready replicas' `--max-num-seqs`, per engine: a data-parallel pod runs several) or the prefill share
    (prompt tokens computed over the last scrape interval over what the ready replicas' engines prefill a
    second), whichever is higher, at most 1.

    What the replay's busy share is (`scaling/sim`), read from vLLM: unlike DCGM's busy share, a replica
    decoding one sequence reads nearly idle. Unknown without ready replicas or without either part (a pool
    that set neither field, or series that went missing); its age is the oldest part's."""
    ready = signals.ready_replicas
    if not ready.is_known or float(ready.value) < 1:  # type: ignore[arg-type]
        return MISSING
    per_replica = signals.engines_per_replica
    engines = float(ready.value) * (max(1.0, float(per_replica.value)) if per_replica.is_known else 1.0)  # type: ignore[arg-type]
    parts: list[tuple[float, float]] = []  # (share, age)
    if batch_slots and signals.running_requests.is_known:
        running = signals.running_requests
        parts.append((float(running.value) / (engines * batch_slots), float(running.age_s)))  # type: ignore[arg-type]
    if prefill_tokens_per_s and signals.prompt_tokens_tick_rate.is_known:
        tokens = signals.prompt_tokens_tick_rate
        parts.append((float(tokens.value) / (engines * prefill_tokens_per_s), float(tokens.age_s)))  # type: ignore[arg-type]
    if not parts:
        return MISSING
    share = min(1.0, max(0.0, max(part for part, _ in parts)))
    return Reading(share, max(max(age for _, age in parts), float(ready.age_s)))  # type: ignore[arg-type]
