"""Run configuration shared by both simulation modes."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from scaling.sim.profiles import DEFAULT_PROFILE, PoolProfile, get_profile


@dataclass(frozen=True)
class ColdStart:
    """Requested -> Ready time of one replica: a lognormal through p50 and p95 (fixed when equal)."""

    p50_s: float = 60.0
    p95_s: float = 90.0

    @property
    def sigma(self) -> float:
        return math.log(self.p95_s / self.p50_s) / 1.6448536 if self.p95_s > self.p50_s else 0.0


@dataclass(frozen=True)
class ClientConfig:
    """Client behaviour. Timeout is on the whole response; retries back off exponentially with jitter."""

    timeout_s: float | None = None
    max_retries: int = 0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    backoff_jitter: float = 0.5  # each delay is scaled by a uniform factor in [1 - jitter, 1 + jitter]

    def backoff_s(self, attempt: int) -> float:
        """Mean delay before retry number `attempt` (1-based)."""
        return min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))


@dataclass(frozen=True)
class SimConfig:
    profile: PoolProfile = field(default_factory=lambda: get_profile(DEFAULT_PROFILE))
    cold_start: ColdStart = ColdStart()
    slo_ttft_s: float = 1.0
    slo_objective: float = 0.99  # share of offered requests that must meet the TTFT target
    min_replicas: int = 1
    max_replicas: int = 100
    queue_limit: int | None = None  # pool-wide waiting requests before the router answers 503
    client: ClientConfig = ClientConfig()
    tick_s: float | None = None  # policy tick; None takes the policy's own default
    fluid_step_s: float = 1.0
    seed: int = 0
    # The replay's first seconds are a warm-up: every policy sees them (as history, with the pool it
    # asks for) and none of it is scored, so a causal policy meets the trace from a running pool.
    warmup_s: float = 0.0

    @classmethod
    def for_profile(cls, profile: PoolProfile, **overrides: object) -> SimConfig:
        cold_start = ColdStart(profile.cold_start_p50_s, profile.cold_start_p95_s)
        return cls(**{"profile": profile, "cold_start": cold_start, **overrides})  # type: ignore[arg-type]


def effective_slots(profile: PoolProfile, mean_sequence_tokens: float) -> int:
    """Concurrent sequences one replica holds: max_num_seqs, or fewer when the KV cache fills first."""
    kv_limited = int(profile.kv_cache_tokens // max(1.0, mean_sequence_tokens))
    return max(1, min(profile.max_num_seqs, kv_limited))
