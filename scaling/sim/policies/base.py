"""The policy interface both simulation modes call: `decide(now, observation, state) -> replicas`."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

LATENCY_WINDOW_S = 60.0  # the Prometheus signals' rate window (scaling/drivers/prometheus.py)


@dataclass(frozen=True)
class Observation:
    """What a policy can see at a tick: the signals a real pool would export, measured now."""

    now: float
    ready_replicas: int
    starting_replicas: int  # requested, still loading: "arriving" capacity
    desired_replicas: int  # the current target (Deployment spec.replicas)
    queue_depth: float  # requests waiting for their prefill to start, router queue included
    running: float  # requests admitted to a batch
    utilisation: float  # mean over ready replicas of GPU busy share or batch fill, 0..1
    arrival_rate_rps: float  # requests sent (retries included) per second over the last tick
    # TTFT percentiles of the requests whose first token came in the last LATENCY_WINDOW_S, as a
    # histogram_quantile over vLLM's TTFT histogram reads them; NaN when none did (unknown).
    ttft_p95_s: float = math.nan
    ttft_p99_s: float = math.nan
    # The same requests' time waiting before their prefill started (vLLM's request_queue_time
    # histogram, the router's queue included): the part of TTFT that load causes.
    queue_time_p95_s: float = math.nan
    queue_time_p99_s: float = math.nan
    # Where `arrival_rate_rps` is a route's demand and a fallback takes a share: the rate this pool was
    # sent (the planner's capacity correction learns from it). NaN: the arrival rate is this pool's.
    served_rate_rps: float = math.nan


class Policy(Protocol):
    name: str
    tick_s: float
    # A policy that reads the TTFT percentiles sets `observes_latency = True`; request mode only
    # tracks them for such a policy (they cost a heap push per request).

    def new_state(self) -> Any:
        """Fresh per-run state; `decide` may mutate it."""
        ...

    def decide(self, now: float, observation: Observation, state: Any) -> int: ...
