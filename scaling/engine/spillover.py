"""Per-request spill-over to the fallback pool: the gateway's rule beside the route's share.

The fallback step (`fallback.py`) sets, once a tick, the share of the eligible traffic that goes to
the fallback pool. A burst inside a tick queues on the primary all the same, and a surge's first
seconds come before any tick can see it. Spill-over is what a queue-aware gateway does per request,
as inference gateways fall back on a per-request timeout: an eligible request that the primary would
start more than `after_s` late goes to the fallback instead, whatever the route's weights say, with
no fallback active too (the fallback pool stands by warm). Headroom sees what spilled (the fallback
pool's request rate): it counts it as the primary's demand and names it in the fallback's decision
(`fallback.py`). It moves a share by weight only when the spill is not enough (the primary's latency
still over its SLO): a share would also send requests the primary serves in time to the smaller model. The replay's
route mode (`scaling/sim/route_mode.py`) and the sandbox gateway (`sandbox/gateway.py`) both decide
with `spills()`.

How late the primary would start a request differs by who asks: the replay knows each replica's
schedule (when its next batch slot and its prefill are free); a gateway sees what a replica exports
(waiting and running requests) and estimates the wait from its completion rate
(`queued_start_wait_s`). At a full batch the two agree on average.
"""
from __future__ import annotations

import math


def spill_after_s(wait_share: float, slo_ttft_s: float) -> float:
    """The start delay past which a request spills: a share of the TTFT SLO (the replay's
    `--fallback-spillover F`), leaving the rest of the SLO for the prefill and the first token."""
    if not wait_share > 0.0:
        raise ValueError("the spill-over's wait share must be positive")
    if not slo_ttft_s > 0.0:
        raise ValueError("the TTFT SLO must be positive")
    return wait_share * slo_ttft_s


def spills(*, eligible: bool, start_wait_s: float, after_s: float | None) -> bool:
    """Whether a request the route left on the primary goes to the fallback instead.

    Only for a class that may fall back, and only when the primary would start it later than
    `after_s` (None: spill-over off). No ready primary replica is an infinite wait."""
    return after_s is not None and eligible and start_wait_s > after_s


def queued_start_wait_s(waiting: int, running: int, slots: int, completions_per_s: float) -> float:
    """A gateway's estimate of how long a replica would keep a new request waiting, from its counts.

    A free batch slot and no queue: it starts at once. Otherwise it waits for the requests queued
    ahead of it and for one slot to free: (waiting + 1) completions at the replica's full-batch rate.
    A replica with a queue but free slots (its KV cache is full) waits the same way."""
    if waiting < 0 or running < 0 or slots < 1:
        raise ValueError("waiting and running must be 0 or more, slots at least 1")
    if waiting == 0 and running < slots:
        return 0.0
    if not completions_per_s > 0.0:
        return math.inf
    return (waiting + 1) / completions_per_s
