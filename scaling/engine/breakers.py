"""Circuit breakers at three scopes (design.md §5, `CircuitBreaker`): endpoint, pool and system.

One state machine for all three: `closed -> open` when the failure share over a window passes the
threshold (with enough requests to judge); `open -> half_open` after a cool-down; half-open lets a
few probe requests through and closes when they succeed, opens again when more of them fail than the
threshold's share (among a few probes, any one).

- An **endpoint** breaker (default 1 % of requests failing) takes the endpoint out of the route
  while open; probes bring it back.
- A **pool** breaker (default 1 %) over the pool's endpoints together: open means the pool as a
  whole is failing (the loop alerts; a pool with a fallback may send traffic there).
- The **system** breaker (default 0.5 %) over every pool: open notifies and can send a pool to its
  fallback (`system_sends_to_fallback`).

Pure: `decide_breaker(counts, thresholds, state) -> BreakerDecision`, with reasons.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
STATES = (CLOSED, OPEN, HALF_OPEN)
ENDPOINT, POOL, SYSTEM = "endpoint", "pool", "system"


@dataclass(frozen=True)
class BreakerThresholds:
    failure_ratio: float = 0.01  # opens above this share of failed requests over the window
    window_s: float = 60.0  # the counts passed in cover this window (the caller's rate window)
    min_requests: int = 100  # fewer requests in the window: no verdict (one error in 3 is noise)
    open_for_s: float = 30.0  # cool-down before the half-open probes
    probe_requests: int = 5  # successes in half-open before closing

    def __post_init__(self) -> None:
        if not 0.0 < self.failure_ratio < 1.0:
            raise ValueError("failure_ratio must be in (0, 1)")
        if self.window_s <= 0 or self.open_for_s < 0:
            raise ValueError("window_s must be positive and open_for_s not negative")
        if self.min_requests < 1 or self.probe_requests < 1:
            raise ValueError("min_requests and probe_requests must be at least 1")


ENDPOINT_THRESHOLDS = BreakerThresholds(failure_ratio=0.01)
POOL_THRESHOLDS = BreakerThresholds(failure_ratio=0.01)
SYSTEM_THRESHOLDS = BreakerThresholds(failure_ratio=0.005, min_requests=200)

DEFAULT_THRESHOLDS = {ENDPOINT: ENDPOINT_THRESHOLDS, POOL: POOL_THRESHOLDS, SYSTEM: SYSTEM_THRESHOLDS}


@dataclass(frozen=True)
class WindowCounts:
    """Requests and failures over the thresholds' window (closed), or since the last tick (half-open probes)."""

    requests: int
    failures: int

    def __post_init__(self) -> None:
        if self.requests < 0 or not 0 <= self.failures <= self.requests:
            raise ValueError("need 0 <= failures <= requests")

    @property
    def failure_ratio(self) -> float:
        return self.failures / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class BreakerState:
    state: str = CLOSED
    since_s: float = 0.0  # the last transition
    probe_successes: int = 0


@dataclass(frozen=True)
class BreakerDecision:
    state: BreakerState
    transition: tuple[str, str] | None  # (from, to) when the state changed
    reasons: tuple[str, ...]

    @property
    def routable(self) -> bool:
        """May the scope take ordinary traffic (closed) — half-open takes probes only."""
        return self.state.state == CLOSED


def decide_breaker(now_s: float, counts: WindowCounts, thresholds: BreakerThresholds,
                   state: BreakerState) -> BreakerDecision:
    if state.state == CLOSED:
        if counts.requests < thresholds.min_requests:
            return BreakerDecision(state, None, (f"{counts.requests} requests in the window, fewer than "
                                                 f"{thresholds.min_requests}: no verdict",))
        ratio = counts.failure_ratio
        if ratio > thresholds.failure_ratio:
            reason = (f"{counts.failures} of {counts.requests} requests failed ({ratio:.2%}) over "
                      f"{thresholds.window_s:.0f} s, above {thresholds.failure_ratio:.2%}")
            return _to(state, OPEN, now_s, reason)
        return BreakerDecision(state, None, (f"{ratio:.2%} failing, at most {thresholds.failure_ratio:.2%}",))

    if state.state == OPEN:
        waited = now_s - state.since_s
        if waited >= thresholds.open_for_s - 1e-9:
            return _to(state, HALF_OPEN, now_s, f"open for {waited:.0f} s: probing")
        return BreakerDecision(state, None, (f"open, probing in {thresholds.open_for_s - waited:.0f} s",))

    # HALF_OPEN: `counts` are the probes since the last tick. They open the breaker again above the
    # threshold's share, as a closed window would; among a few probes that is any failure. A pool is judged
    # on all its pods' requests, and its ordinary errors (0.1 % under a 1 % threshold) would read, as "any
    # failure", as still failing at every tick: it would never close.
    if counts.failures and counts.failure_ratio > thresholds.failure_ratio:
        return _to(state, OPEN, now_s, f"{counts.failures} of {counts.requests} probes failed "
                                       f"({counts.failure_ratio:.2%}, above {thresholds.failure_ratio:.2%})")
    successes = state.probe_successes + counts.requests - counts.failures
    if successes >= thresholds.probe_requests:
        return _to(state, CLOSED, now_s, f"{successes} probes succeeded")
    new = replace(state, probe_successes=successes)
    return BreakerDecision(new, None, (f"{successes} of {thresholds.probe_requests} probes succeeded",))


def _to(state: BreakerState, target: str, now_s: float, reason: str) -> BreakerDecision:
    return BreakerDecision(BreakerState(target, now_s, 0), (state.state, target), (reason,))


def routable_endpoints(breakers: dict[str, BreakerState]) -> list[str]:
    """The endpoints a route keeps (closed breakers); half-open ones get probes only.

    Ejecting every endpoint would turn an error rate into an outage: when all are open, all stay in.
    """
    kept = sorted(name for name, state in breakers.items() if state.state == CLOSED)
    return kept or sorted(breakers)


def system_sends_to_fallback(system: BreakerState, has_fallback: bool, enabled: bool = True) -> bool:
    """Whether the open system breaker moves a pool's fallback-eligible traffic to its fallback."""
    return enabled and has_fallback and system.state == OPEN


@dataclass(frozen=True)
class BreakerPicture:
    """What a pool's breakers say to its fallback decision (scaling/engine/fallback.py)."""

    ejected: int  # endpoints whose breaker is open: they serve nothing
    failing: str  # why the pool as a whole is failing, "" when it is not


def fallback_picture(endpoints: dict[str, str], pool_state: str | None = None, system_state: str | None = None,
                     *, has_fallback: bool = True, enabled: bool = True) -> BreakerPicture:
    """A pool's endpoint breakers' states (endpoint -> state), its pool breaker's and the system breaker's,
    read for the fallback: open endpoints take no traffic (ejected; when all are open they stay in the
    route but still fail), and all endpoints open, the pool breaker open with no endpoint open, or the
    system breaker open (`system_sends_to_fallback`) mean the pool as a whole is failing."""
    opened = sorted(name for name, state in endpoints.items() if state == OPEN)
    if endpoints and len(opened) == len(endpoints):
        failing = f"circuit breakers open on all {len(endpoints)} endpoints of the pool"
    elif pool_state == OPEN and not opened:
        # Failures spread over endpoints none of which could be judged alone. When endpoints are open,
        # the pool breaker counts their failures too: the ejections say more (what is left serves).
        failing = "the pool's circuit breaker is open"
    elif system_state is not None and system_sends_to_fallback(BreakerState(system_state), has_fallback, enabled):
        failing = "the system circuit breaker is open (errors across every pool)"
    else:
        failing = ""
    return BreakerPicture(len(opened), failing)
