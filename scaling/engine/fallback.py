"""Fallback to a smaller model under overload (design.md §5, `FallbackActivation`).

While a pool's latency is over its SLO and the capacity it needs cannot be ready in time (or the
pool is at its maximum), the part of the traffic its ready replicas cannot serve goes to the
pool's fallback pool, a smaller model. The share is sized from that overflow, never fixed. Once
latency has stayed below the exit thresholds (lower than the entry ones: hysteresis) for a while
*and* the primary's ready capacity covers the demand, the traffic comes back in steps, each held
before the next. A priority class never falls back unless configured to.

Pure: `decide_fallback(inputs, policy, state) -> FallbackDecision`, a frozen dataclass in and out
with the reasons, like the planner. `fallback_step()` builds the inputs from the pool's
`PoolSignals` and `PoolPlan`: the one step the live loop and the replay (`scaling/sim/route_mode.py`)
both call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from scaling.engine.planner import PoolPlan
from scaling.engine.signals import PoolSignals, Reading

INACTIVE, ACTIVE, RESTORING = "inactive", "active", "restoring"
PHASES = (INACTIVE, ACTIVE, RESTORING)
# Events a decision can carry (each is an event, a notification and an audit record live).
ENTERED, RETURN_STARTED, REACTIVATED, RESTORED = "entered", "return_started", "reactivated", "restored"

PRIORITY, STANDARD = "priority", "standard"
# With no fallback active, a spill-over of at least this share of the route is named in the decision.
SPILL_SHOWN_FROM = 0.01


@dataclass(frozen=True)
class FallbackPolicy:
    """Per pool; every threshold is a parameter (defaults fitted on the code trace, docs/engine.md)."""

    entry_after_s: float = 15.0  # N: latency over the SLO this long before traffic moves (one tick; fitted)
    exit_after_s: float = 180.0  # M: below the exit thresholds this long before the return begins
    exit_latency_ratio: float = 0.8  # exit threshold = this x the SLO (entry is at the SLO): hysteresis
    in_time_s: float = 15.0  # arriving replicas ready later than this are not in time
    target_utilisation: float = 0.85  # the primary keeps this share of its ready capacity's load
    min_share: float = 0.1  # entering on latency alone (no computed overflow) diverts at least this
    # The primary's queue is part of the overflow while latency is over the SLO: the waiting
    # requests' worth of traffic is diverted as well, spread over this many seconds.
    queue_drain_s: float = 10.0
    # Demand is the highest route rate of the last this many seconds: one tick's rate swings with
    # the bursts, and a share sized on a lull would send the next burst to the primary.
    demand_window_s: float = 60.0
    # Within this many seconds two queue readings give an arrival rate (queue growth plus what the
    # ready replicas served); a longer gap averages an onset away.
    queue_growth_max_gap_s: float = 60.0
    # The primary's share of the route below which its queue says too little about the route's demand:
    # the route's rate is the primary's over its share, which multiplies any error in what the replicas
    # served (their capacity at the SLO, not a measure) by 1 / share (at 10 %, a 2 req/s error is 20).
    queue_growth_min_primary_share: float = 0.5
    max_share: float = 1.0  # of the traffic that may fall back
    return_steps: tuple[float, ...] = (0.5, 0.25, 0.0)  # the share at return start times these, in turn
    return_step_hold_s: float = 60.0
    classes: frozenset[str] = frozenset({STANDARD})  # request classes that may fall back

    def __post_init__(self) -> None:
        if not self.return_steps or self.return_steps[-1] != 0.0:
            raise ValueError("return_steps must end at 0.0 (all traffic back on the primary)")
        if any(b > a for a, b in zip(self.return_steps, self.return_steps[1:])) or self.return_steps[0] > 1.0:
            raise ValueError("return_steps must not increase and start at most at 1.0")
        if not 0.0 < self.exit_latency_ratio <= 1.0:
            raise ValueError("exit_latency_ratio must be in (0, 1]")
        if not 0.0 < self.target_utilisation <= 1.0:
            raise ValueError("target_utilisation must be in (0, 1]")
        if not 0.0 <= self.min_share <= self.max_share <= 1.0:
            raise ValueError("need 0 <= min_share <= max_share <= 1")

    @property
    def return_time_s(self) -> float:
        """The hysteresis: the least time from the overload's end to all traffic back on the primary
        (the demand window forgets the peak, M calm seconds, then a hold per return step)."""
        return self.demand_window_s + self.exit_after_s + (len(self.return_steps) - 1) * self.return_step_hold_s

    def may_fall_back(self, request_class: str) -> bool:
        return request_class in self.classes


@dataclass(frozen=True)
class FallbackInputs:
    """What one decision reads. Latencies are NaN when unknown ("no data" is neither over nor below)."""

    now_s: float
    demand_rps: float  # the route's request rate: both pools (what the primary would get alone)
    eligible_share: float  # of that demand, the share in classes that may fall back
    latency_s: float  # the primary's SLO latency signal (TTFT percentile)
    queue_time_s: float  # the primary's queue-time p95
    slo_latency_s: float
    ready_replicas: int
    capacity_rps_per_replica: float  # at the SLO (the pool profile's)
    arriving_ready_at_s: tuple[float, ...] = ()  # expected ready time of each replica still starting
    queue_depth: float = 0.0  # requests waiting on the primary (NaN: unknown, read as none)
    desired_replicas: int = 0
    max_replicas: int = 1_000_000
    fallback_capacity_rps: float = math.inf  # what the fallback pool's ready replicas serve at its SLO
    # Circuit breakers (scaling/engine/breakers.py): ready replicas whose endpoint breaker is open serve
    # nothing; `breaker_open` says why the primary as a whole is failing (all its endpoints or its pool
    # breaker open, or the system breaker), "" when it is not.
    ejected_replicas: int = 0
    breaker_open: str = ""
    queue_read_at_s: float | None = None  # when `queue_depth` was read (None: now)
    # The share of the route's traffic the fallback took since the last tick (None: the state's share
    # of the eligible traffic, as decided; the live loop passes what is on the route). While no fallback
    # is active it is the gateway's per-request spill-over (`spillover.py`).
    routed_share: float | None = None


@dataclass(frozen=True)
class FallbackState:
    phase: str = INACTIVE
    share: float = 0.0  # of the eligible traffic, sent to the fallback pool
    since_s: float | None = None  # the phase's start
    over_since_s: float | None = None  # latency over the SLO without a break since
    calm_since_s: float | None = None  # the exit conditions have held since
    return_from: float = 0.0  # the share when the return began
    return_step: int = 0  # index into return_steps
    step_since_s: float | None = None
    recent_demand: tuple[tuple[float, float], ...] = ()  # (time, route rate) inside demand_window_s
    # The primary's last known queue depth and when it was read: its growth to the next reading is an
    # arrival rate that does not lag (`queue_arrival_rps`).
    last_queue_depth: float | None = None
    last_queue_at_s: float | None = None


@dataclass(frozen=True)
class FallbackDecision:
    share: float  # of the eligible traffic, to the fallback pool
    phase: str
    reasons: tuple[str, ...]
    state: FallbackState
    event: str | None = None  # ENTERED, RETURN_STARTED, REACTIVATED, RESTORED or None
    overflow_share: float = 0.0  # the share the overflow alone asks for (for display)
    spilled_share: float = 0.0  # with no fallback active, of the route, what the gateway spilled (for display)


def _known(value: float) -> bool:
    return value is not None and math.isfinite(value)


def queue_wait_s(inputs: FallbackInputs) -> float:
    """How long the primary's waiting requests take to start at its ready capacity: a queue time
    known at once (the queue-time histogram and the TTFT percentile lag by their window)."""
    capacity = inputs.ready_replicas * inputs.capacity_rps_per_replica
    if not _known(inputs.queue_depth):
        return math.nan
    return inputs.queue_depth / capacity if capacity > 0 else (math.inf if inputs.queue_depth > 0 else 0.0)


def _over(inputs: FallbackInputs) -> bool:
    slo = inputs.slo_latency_s
    return any(_known(v) and v > slo for v in (inputs.latency_s, inputs.queue_time_s)) or queue_wait_s(inputs) > slo


def _calm(inputs: FallbackInputs, policy: FallbackPolicy) -> bool:
    """Latency known and below the exit threshold (the queue time too, where known)."""
    limit = policy.exit_latency_ratio * inputs.slo_latency_s
    if not _known(inputs.latency_s) or inputs.latency_s >= limit:
        return False
    return not _known(inputs.queue_time_s) or inputs.queue_time_s < limit


def overflow_share(inputs: FallbackInputs, policy: FallbackPolicy) -> float:
    """The share of the eligible traffic above what the primary's ready replicas serve at the SLO,
    at the target utilisation (plus the primary's queue while latency is over the SLO), at most
    what the fallback's ready capacity takes."""
    eligible = inputs.demand_rps * inputs.eligible_share
    if eligible <= 0.0:
        return 0.0
    ready_rps = inputs.ready_replicas * inputs.capacity_rps_per_replica * policy.target_utilisation
    backlog_rps = 0.0
    if _over(inputs) and _known(inputs.queue_depth) and policy.queue_drain_s > 0:
        backlog_rps = max(0.0, inputs.queue_depth) / policy.queue_drain_s
    share = (inputs.demand_rps + backlog_rps - ready_rps) / eligible
    return min(max(share, 0.0), policy.max_share, _fallback_limit(inputs, policy))


def queue_arrival_rps(inputs: FallbackInputs, policy: FallbackPolicy, state: FallbackState) -> float:
    """The route's arrival rate implied by the primary's queue since the last reading: the queue's
    growth per second plus what the ready replicas served meanwhile (their capacity at the SLO: a
    standing queue keeps them busy), over the primary's share of the route. The route's request rate
    is a rate over a window and lags a surge's onset by up to that window; the queue does not.

    NaN (unknown) without two known readings close enough in time, without a queue now (idle
    replicas serve less than their capacity: the growth says nothing), or when the primary took too
    little of the route for its queue to speak for it."""
    at = inputs.queue_read_at_s if inputs.queue_read_at_s is not None else inputs.now_s
    if not _known(inputs.queue_depth) or state.last_queue_depth is None or state.last_queue_at_s is None:
        return math.nan
    elapsed = at - state.last_queue_at_s
    if not 0.0 < elapsed <= policy.queue_growth_max_gap_s or inputs.queue_depth <= 0.0:
        return math.nan
    routed = inputs.routed_share if inputs.routed_share is not None else state.share * inputs.eligible_share
    primary_share = 1.0 - min(max(routed, 0.0), 1.0)
    if primary_share < policy.queue_growth_min_primary_share:
        return math.nan
    served_rps = inputs.ready_replicas * inputs.capacity_rps_per_replica
    arrivals = (inputs.queue_depth - state.last_queue_depth) / elapsed + served_rps
    return max(0.0, arrivals) / primary_share


def _remember_queue(inputs: FallbackInputs, state: FallbackState) -> FallbackState:
    """Keep the latest known queue reading (an unknown one keeps the last known: never read as 0)."""
    if not _known(inputs.queue_depth):
        return state
    at = inputs.queue_read_at_s if inputs.queue_read_at_s is not None else inputs.now_s
    if state.last_queue_at_s is not None and at <= state.last_queue_at_s:
        return state  # the same reading again (or an older one): it still measures from the last
    return replace(state, last_queue_depth=float(inputs.queue_depth), last_queue_at_s=at)


def _fallback_limit(inputs: FallbackInputs, policy: FallbackPolicy) -> float:
    eligible = inputs.demand_rps * inputs.eligible_share
    if eligible <= 0.0 or math.isinf(inputs.fallback_capacity_rps):
        return 1.0
    return min(1.0, inputs.fallback_capacity_rps * policy.target_utilisation / eligible)


def _needed_replicas(inputs: FallbackInputs, policy: FallbackPolicy) -> float:
    return inputs.demand_rps / (inputs.capacity_rps_per_replica * policy.target_utilisation)


def decide_fallback(inputs: FallbackInputs, policy: FallbackPolicy, state: FallbackState) -> FallbackDecision:
    now = inputs.now_s
    ejected = min(max(0, inputs.ejected_replicas), inputs.ready_replicas)
    # An ejected endpoint takes no traffic: every capacity figure below counts the routable ones only.
    inputs = replace(inputs, ready_replicas=inputs.ready_replicas - ejected)
    recent = tuple((at, rps) for at, rps in state.recent_demand if at > now - policy.demand_window_s + 1e-9)
    rate_rps = inputs.demand_rps
    # While latency is over the SLO the demand is the larger of the route's rate and the arrival rate
    # the queue's growth implies: the rate is over a window and holds only part of a surge's onset.
    # The estimate is this tick's alone (the window keeps measured rates): it sizes the entry and the
    # share's rise, which then holds, and an estimate too high for one tick does not cap the share by
    # the fallback's capacity for a minute.
    queue_rps = queue_arrival_rps(inputs, policy, state) if _over(inputs) else math.nan
    if math.isfinite(rate_rps):
        recent += ((now, rate_rps),)
    state = _remember_queue(inputs, replace(state, recent_demand=recent))
    inputs = replace(inputs, demand_rps=max([rps for _, rps in recent] + [queue_rps if math.isfinite(queue_rps) else 0.0]))
    demand_text = (f"; {queue_rps:.1f} req/s arriving by the queue's growth (route rate "
                   f"{rate_rps:.1f} req/s)" if math.isfinite(queue_rps) and not queue_rps <= rate_rps else "")
    over = _over(inputs)
    over_since = (state.over_since_s if state.over_since_s is not None else now) if over else None
    sustained = over_since is not None and now - over_since >= policy.entry_after_s - 1e-9
    needed = _needed_replicas(inputs, policy)
    in_time = sum(1 for at in inputs.arriving_ready_at_s if at <= now + policy.in_time_s)
    # Latency over the SLO says the ready replicas are short whatever the estimate says; relief
    # is in time only when replicas that cover the estimated shortfall (at least one) are ready soon.
    capacity_in_time = in_time >= max(1.0, needed - inputs.ready_replicas)
    at_max = inputs.desired_replicas >= inputs.max_replicas and needed > inputs.max_replicas
    overflow = overflow_share(inputs, policy)
    limit = min(policy.max_share, _fallback_limit(inputs, policy))
    latency_text = _latency_text(inputs)
    state = replace(state, over_since_s=over_since)

    if state.phase == INACTIVE:
        reasons: list[str] = []
        spilled = inputs.routed_share if inputs.routed_share is not None and _known(inputs.routed_share) else 0.0
        if at_max and overflow > 0.0:
            reasons.append(f"at its maximum of {inputs.max_replicas} replicas, the demand of "
                           f"{inputs.demand_rps:.1f} req/s needs {math.ceil(needed)}")
        elif sustained and not capacity_in_time:
            reasons.append(f"{latency_text} over the {inputs.slo_latency_s:.2f} s SLO for {now - over_since:.0f} s"
                           f" with {inputs.ready_replicas} ready and {in_time} arriving within "
                           f"{policy.in_time_s:.0f} s ({math.ceil(needed)} needed for {inputs.demand_rps:.1f} req/s)")
        elif inputs.breaker_open:
            reasons.append(inputs.breaker_open)
        elif ejected and overflow > 0.0:
            reasons.append(f"circuit breakers ejected {ejected} of {ejected + inputs.ready_replicas} ready replicas: "
                           f"the {inputs.ready_replicas} left serve less than the demand of "
                           f"{inputs.demand_rps:.1f} req/s ({math.ceil(needed)} needed)")
        if reasons and inputs.eligible_share <= 0.0:
            return FallbackDecision(0.0, INACTIVE, ("overloaded, but no request class may fall back",),
                                    replace(state, calm_since_s=None), None, overflow)
        if not reasons or limit <= 0.0:
            why = "no overload" if not over else (
                f"{latency_text} over the SLO for {now - over_since:.0f} s of {policy.entry_after_s:.0f} s"
                if not sustained else "capacity arrives in time")
            if reasons and limit <= 0.0:
                why = "the fallback pool has no ready capacity"
            if spilled >= SPILL_SHOWN_FROM:
                # The gateway's per-request spill-over sends only the requests the primary would start late;
                # a share by weight would also send requests it serves in time to the smaller model.
                why += (f"; the gateway spilled {spilled:.0%} of the route's requests to the fallback, request by "
                        f"request ({math.ceil(needed)} replicas needed for {inputs.demand_rps:.1f} req/s, "
                        f"{inputs.ready_replicas} ready): no share moved by weight")
            return FallbackDecision(0.0, INACTIVE, (why,), replace(state, calm_since_s=None), None, overflow,
                                    spilled_share=spilled)
        # A primary failing as a whole sends all it may; otherwise the overflow decides.
        share = limit if inputs.breaker_open else min(max(overflow, policy.min_share), limit)
        reasons.append(f"diverting {share:.0%} of the fallback-eligible traffic (overflow {overflow:.0%}{demand_text})")
        new = replace(state, phase=ACTIVE, share=share, since_s=now, calm_since_s=None, return_step=0, step_since_s=None)
        return FallbackDecision(share, ACTIVE, tuple(reasons), new, ENTERED, overflow)

    ready_covers = inputs.ready_replicas >= needed and not inputs.breaker_open
    calm = _calm(inputs, policy) and ready_covers
    calm_since = (state.calm_since_s if state.calm_since_s is not None else now) if calm else None
    state = replace(state, calm_since_s=calm_since)

    if state.phase == ACTIVE:
        # The share rises with the overflow at once and never falls while active: it comes down only
        # through the stepped return, so a noisy signal cannot make it flap.
        share = limit if inputs.breaker_open else min(max(state.share, overflow), limit)
        if calm_since is not None and now - calm_since >= policy.exit_after_s - 1e-9:
            share = state.share * policy.return_steps[0]
            reason = (f"{latency_text} below {policy.exit_latency_ratio:.0%} of the SLO for {now - calm_since:.0f} s "
                      f"and {inputs.ready_replicas} ready replicas cover the demand: returning, "
                      f"{state.share:.0%} -> {share:.0%}")
            new = replace(state, phase=RESTORING, share=share, since_s=now, return_from=state.share, return_step=0,
                          step_since_s=now)
            if share <= 0.0:
                return _restored(new, now, reason, overflow)
            return FallbackDecision(share, RESTORING, (reason,), new, RETURN_STARTED, overflow)
        if calm_since is not None:
            reason = f"calm for {now - calm_since:.0f} s of {policy.exit_after_s:.0f} s before the return"
        elif inputs.breaker_open:
            reason = inputs.breaker_open
        elif not ready_covers:
            reason = f"{inputs.ready_replicas} ready replicas, {math.ceil(needed)} needed"
        else:
            reason = f"{latency_text} not below {policy.exit_latency_ratio:.0%} of the SLO"
        return FallbackDecision(share, ACTIVE, (f"active at {share:.0%}: {reason}",), replace(state, share=share),
                                None, overflow)

    # RESTORING: a sustained overload, or demand past the ready replicas again, sends it back to
    # active; otherwise it steps down after each hold.
    if sustained or overflow > state.share or inputs.breaker_open:
        share = limit if inputs.breaker_open else min(max(state.share, overflow, policy.min_share), limit)
        reason = (f"{inputs.breaker_open} during the return: back to {share:.0%}" if inputs.breaker_open else
                  f"{latency_text} over the SLO again during the return: back to {share:.0%}" if sustained else
                  f"the overflow ({overflow:.0%}) is above the returning share again: back to {share:.0%}")
        new = replace(state, phase=ACTIVE, share=share, since_s=now, calm_since_s=None, step_since_s=None)
        return FallbackDecision(share, ACTIVE, (reason,), new, REACTIVATED, overflow)
    step_since = state.step_since_s if state.step_since_s is not None else now
    if now - step_since >= policy.return_step_hold_s - 1e-9:
        step = state.return_step + 1
        share = state.return_from * policy.return_steps[step]
        new = replace(state, share=share, return_step=step, step_since_s=now)
        if step == len(policy.return_steps) - 1:
            return _restored(new, now, f"return step {step + 1} of {len(policy.return_steps)}", overflow)
        return FallbackDecision(share, RESTORING, (f"return step {step + 1} of {len(policy.return_steps)}: "
                                                   f"{share:.0%}",), new, None, overflow)
    return FallbackDecision(state.share, RESTORING, (f"holding {state.share:.0%} for "
                                                     f"{policy.return_step_hold_s - (now - step_since):.0f} s more",),
                            state, None, overflow)


def _restored(state: FallbackState, now: float, reason: str, overflow: float) -> FallbackDecision:
    new = FallbackState(phase=INACTIVE, since_s=now, over_since_s=state.over_since_s,
                        recent_demand=state.recent_demand, last_queue_depth=state.last_queue_depth,
                        last_queue_at_s=state.last_queue_at_s)
    return FallbackDecision(0.0, INACTIVE, (f"{reason}: all traffic back on the primary",), new, RESTORED, overflow)


def _latency_text(inputs: FallbackInputs) -> str:
    parts = []
    wait = queue_wait_s(inputs)
    if _known(wait) and wait > inputs.slo_latency_s:
        parts.append(f"queue of {inputs.queue_depth:.0f} ({wait:.2f} s to start)")
    if _known(inputs.latency_s):
        parts.append(f"TTFT {inputs.latency_s:.2f} s")
    if _known(inputs.queue_time_s):
        parts.append(f"queue time {inputs.queue_time_s:.2f} s")
    return " / ".join(parts) if parts else "latency unknown"


# ---------------------------------------------------------------------------- the one step


def _value(reading: Reading) -> float:
    return float(reading.value) if reading.is_known else math.nan  # type: ignore[arg-type]


def _read_at(now_s: float, reading: Reading) -> float | None:
    return now_s - reading.age_s if reading.is_known and reading.age_s is not None else None


def fallback_step(
    now_s: float,
    signals: PoolSignals,
    plan: PoolPlan,
    state: FallbackState,
    policy: FallbackPolicy,
    *,
    demand_rps: float,
    eligible_share: float,
    arriving_requested_at_s: tuple[float, ...] = (),
    fallback_capacity_rps: float = math.inf,
    ejected_replicas: int = 0,
    breaker_open: str = "",
    routed_share: float | None = None,
) -> FallbackDecision:
    """The fallback decision for one tick, from what the loop and the replay both have.

    `demand_rps` is the route's request rate (both pools): the primary's own rate falls while
    traffic is diverted and is no measure of the demand (the primary's queue growth, read with its
    age, adds a demand that does not lag: `queue_arrival_rps`). Arriving replicas are expected ready one
    p95 cold start after they were requested, as the planner credits them.
    """
    if not breaker_open and (blind := _blind(signals, plan, state)):
        # Unknown is never zero: unknown ready replicas read as none would send the whole route to the fallback,
        # and a return stepped down blind could bring the traffic home onto a primary still overloaded.
        held = replace(state, calm_since_s=None,
                       step_since_s=now_s if state.phase == RESTORING else state.step_since_s)
        return FallbackDecision(state.share if state.phase != INACTIVE else 0.0, state.phase,
                                (f"{blind}: nothing moves until it is known again",), held)
    ready = _value(signals.ready_replicas)
    desired = _value(signals.desired_replicas)
    return decide_fallback(
        FallbackInputs(
            now_s=now_s,
            demand_rps=max(0.0, demand_rps),
            eligible_share=min(1.0, max(0.0, eligible_share)),
            latency_s=_value(getattr(signals, plan.slo_signal)),
            queue_time_s=_value(signals.queue_time_p95_s),
            slo_latency_s=plan.slo_latency_s,
            ready_replicas=int(ready) if math.isfinite(ready) else 0,
            capacity_rps_per_replica=plan.capacity_rps_per_replica,
            arriving_ready_at_s=tuple(at + plan.cold_start_p95_s for at in arriving_requested_at_s),
            desired_replicas=int(desired) if math.isfinite(desired) else 0,
            queue_depth=_value(signals.queue_depth),
            queue_read_at_s=_read_at(now_s, signals.queue_depth),
            routed_share=routed_share,
            max_replicas=plan.max_replicas,
            fallback_capacity_rps=fallback_capacity_rps,
            ejected_replicas=ejected_replicas,
            breaker_open=breaker_open,
        ),
        policy,
        state,
    )


def _blind(signals: PoolSignals, plan: PoolPlan, state: FallbackState) -> str:
    """Why the primary's picture is too incomplete to move its traffic ('' when it is not). A failing breaker is
    not blind: it acts on what the pods answered."""
    if not signals.ready_replicas.is_known:
        return "the primary's ready replicas are unknown (no recent read of its Deployment)"
    if state.phase == RESTORING and not getattr(signals, plan.slo_signal).is_known:
        return f"the primary's {plan.slo_signal} is unknown during the return"
    return ""


def with_route_demand(primary: PoolSignals, fallback_rate: Reading) -> PoolSignals:
    """The primary's signals with the route's request rate while part of its traffic goes to the fallback.

    The planner must size the primary for the demand, not for what is left of it while the fallback
    carries the rest (the replay's route mode gives the primary's policy the route's rate too): the
    primary's own rate plus the fallback's, as old as the older of the two. Either one unknown makes
    the demand unknown, which the planner holds on, rather than the primary's part alone read as all.
    """
    own = primary.request_rate_rps
    if not (own.is_known and fallback_rate.is_known):
        return replace(primary, request_rate_rps=Reading(None, own.age_s))
    return replace(primary, request_rate_rps=Reading(float(own.value) + float(fallback_rate.value),  # type: ignore[arg-type]
                                                     max(own.age_s or 0.0, fallback_rate.age_s or 0.0)))


def answered_share(primary_rate: Reading, fallback_rate: Reading) -> float | None:
    """The share of the route's requests the fallback pool answered: its rate over both pools', rounded
    (the weights' share and the gateway's spill-over together). None with either rate unknown or
    nothing sent."""
    if not (primary_rate.is_known and fallback_rate.is_known):
        return None
    fallback = max(0.0, float(fallback_rate.value))  # type: ignore[arg-type]
    total = max(0.0, float(primary_rate.value)) + fallback  # type: ignore[arg-type]
    return round(fallback / total, 4) if total > 0 else None
