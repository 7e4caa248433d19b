"""Fallback decisions: entry, the share from the overflow, hysteresis, the stepped return, no flapping."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from scaling.engine import fallback as f
from scaling.engine.fallback import (ACTIVE, INACTIVE, RESTORING, FallbackInputs, FallbackPolicy, FallbackState,
                                     decide_fallback, fallback_step)
from scaling.engine.planner import PoolPlan
from scaling.engine.signals import PoolSignals, Reading

POLICY = FallbackPolicy(entry_after_s=30.0, exit_after_s=120.0, exit_latency_ratio=0.8, in_time_s=15.0,
                        target_utilisation=1.0, min_share=0.1, return_steps=(0.5, 0.25, 0.0), return_step_hold_s=60.0)
TICK = 15.0


def inputs(now: float = 0.0, demand: float = 100.0, latency: float = 0.5, ready: int = 10, arriving: tuple = (),
           desired: int | None = None, max_replicas: int = 40, eligible: float = 1.0, queue_time: float = math.nan,
           fallback_rps: float = math.inf, queue: float = 0.0, routed: float | None = None) -> FallbackInputs:
    return FallbackInputs(now_s=now, demand_rps=demand, eligible_share=eligible, latency_s=latency,
                          queue_time_s=queue_time, slo_latency_s=1.0, ready_replicas=ready,
                          capacity_rps_per_replica=10.0, arriving_ready_at_s=arriving,
                          desired_replicas=ready + len(arriving) if desired is None else desired,
                          max_replicas=max_replicas, fallback_capacity_rps=fallback_rps, queue_depth=queue,
                          routed_share=routed)


def run(sequence: list[dict], policy: FallbackPolicy = POLICY, state: FallbackState | None = None):
    """Ticks every 15 s through `sequence` (keyword overrides of `inputs`); the decisions."""
    state = state or FallbackState()
    decisions = []
    for i, overrides in enumerate(sequence):
        decision = decide_fallback(inputs(now=i * TICK, **overrides), policy, state)
        decisions.append(decision)
        state = decision.state
    return decisions


SURGE = dict(demand=150.0, latency=2.0, arriving=(200.0,) * 5)  # 10 ready, 15 needed, arriving in 200 s


@pytest.mark.parametrize("label, sequence, phase, share", [
    ("calm pool stays on the primary", [dict()] * 5, INACTIVE, 0.0),
    ("over the SLO for less than N seconds", [SURGE] * 2, INACTIVE, 0.0),
    ("over the SLO for N seconds, capacity late: the overflow moves", [SURGE] * 3, ACTIVE, 50 / 150),
    ("over the SLO but the capacity is ready within in_time_s", [dict(SURGE, arriving=(10.0,) * 5)] * 3, INACTIVE, 0.0),
    ("queue time over the SLO counts as well", [dict(SURGE, latency=0.5, queue_time=1.5)] * 3, ACTIVE, 50 / 150),
    ("unknown latency is no reason to move", [dict(SURGE, latency=math.nan)] * 4, INACTIVE, 0.0),
    ("at the maximum with overflow: moves at once", [dict(demand=150.0, ready=10, max_replicas=10)], ACTIVE, 50 / 150),
    ("a small overflow: the minimum share", [dict(SURGE, demand=95.0, ready=9)] * 3, ACTIVE, 0.1),
    ("latency over though the estimate says the ready replicas suffice, nothing arriving: the minimum share",
     [dict(latency=2.0, demand=100.0)] * 3, ACTIVE, 0.1),
    ("latency over, one replica arriving in time: wait for it", [dict(latency=2.0, demand=100.0, arriving=(5.0,))] * 3,
     INACTIVE, 0.0),
    ("the primary's queue adds to the overflow while over the SLO", [dict(SURGE, queue=200.0)] * 3, ACTIVE,
     (50 + 20) / 150),
    ("the priority class stays: the share is of the eligible traffic",
     [dict(SURGE, eligible=0.5)] * 3, ACTIVE, 50 / 75),
    ("the fallback's ready capacity caps the share", [dict(SURGE, fallback_rps=30.0)] * 3, ACTIVE, 30 / 150),
    ("a fallback with no ready capacity takes nothing", [dict(SURGE, fallback_rps=0.0)] * 3, INACTIVE, 0.0),
    ("no class may fall back (all priority): stays", [dict(SURGE, eligible=0.0)] * 3, INACTIVE, 0.0),
    # The gateway's spill-over keeps the primary's latency fine while the fallback answers part of the route:
    # the spill sends only the requests the primary would start late, a share would send others too.
    ("the gateway spills with latency fine: no share by weight", [dict(SURGE, latency=0.5, routed=0.4)] * 3,
     INACTIVE, 0.0),
    ("the gateway spills and latency still breaks the SLO: the share moves", [dict(SURGE, routed=0.4)] * 3,
     ACTIVE, 50 / 150),
])
def test_entry(label, sequence, phase, share):
    last = run(sequence)[-1]
    assert last.phase == phase, label
    assert last.share == pytest.approx(share), label
    assert last.reasons, label


def test_entry_event_and_reasons_name_the_cause():
    decisions = run([SURGE] * 3)
    assert [d.event for d in decisions] == [None, None, f.ENTERED]
    assert "over the 1.00 s SLO for 30 s" in decisions[-1].reasons[0]
    assert "with 10 ready and 0 arriving within 15 s (15 needed for 150.0 req/s)" in decisions[-1].reasons[0]
    at_max = run([dict(demand=150.0, ready=10, max_replicas=10)])[-1]
    assert "at its maximum of 10 replicas" in at_max.reasons[0]


def test_a_spill_with_no_fallback_active_is_named_in_the_decision():
    (spilling,) = run([dict(SURGE, latency=0.5, routed=0.4)])
    assert spilling.spilled_share == pytest.approx(0.4)
    assert spilling.reasons == ("no overload; the gateway spilled 40% of the route's requests to the fallback, "
                                "request by request (15 replicas needed for 150.0 req/s, 10 ready): "
                                "no share moved by weight",)
    (quiet,) = run([dict(routed=0.005)])
    assert quiet.reasons == ("no overload",) and quiet.spilled_share == pytest.approx(0.005)


def test_share_rises_with_the_overflow_and_does_not_fall_while_active():
    decisions = run([SURGE] * 3 + [dict(SURGE, demand=200.0)] + [dict(SURGE, demand=120.0)] * 3)
    shares = [d.share for d in decisions[2:]]
    assert shares[0] == pytest.approx(50 / 150)
    assert shares[1] == pytest.approx(100 / 200)
    assert all(s == pytest.approx(0.5) for s in shares[2:])


def test_demand_is_the_recent_peak_not_one_ticks_lull():
    lull = dict(SURGE, demand=20.0)
    decisions = run([SURGE] * 3 + [lull] * 3 + [dict(SURGE, demand=200.0)] + [lull] * 5)
    assert decisions[4].share == pytest.approx(50 / 150)  # the 150 req/s of 30 s ago still counts
    assert decisions[-1].overflow_share == pytest.approx(0.0)  # 200 req/s left the 60-s window
    assert decisions[9].overflow_share == pytest.approx(100 / 200)  # 45 s after it


RECOVERED = dict(demand=150.0, latency=0.5, ready=16)  # latency below 80 % of the SLO, ready covers demand


def test_exit_after_m_seconds_calm_then_stepped_return():
    decisions = run([SURGE] * 3 + [RECOVERED] * 30)
    phases = [d.phase for d in decisions]
    events = [(i * TICK, d.event) for i, d in enumerate(decisions) if d.event]
    # active from 30 s; calm from 45 s; the return starts 120 s later; two 60-s holds; restored.
    assert events == [(30.0, f.ENTERED), (165.0, f.RETURN_STARTED), (285.0, f.RESTORED)]
    share_at = {i * TICK: d.share for i, d in enumerate(decisions)}
    assert share_at[150.0] == pytest.approx(1 / 3)
    assert share_at[165.0] == pytest.approx(1 / 6)  # 50 %
    assert share_at[225.0] == pytest.approx(1 / 12)  # 25 %
    assert share_at[285.0] == 0.0
    assert phases[-1] == INACTIVE and all(p == RESTORING for p in phases[11:19])


@pytest.mark.parametrize("label, calm_variant", [
    ("latency back under the SLO but not under the exit threshold", dict(RECOVERED, latency=0.9)),
    ("latency fine but the ready replicas do not cover the demand", dict(RECOVERED, ready=12)),
    ("latency unknown: no evidence of calm", dict(RECOVERED, latency=math.nan)),
])
def test_no_exit_without_every_exit_condition(label, calm_variant):
    decisions = run([SURGE] * 3 + [calm_variant] * 40)
    assert all(d.phase == ACTIVE for d in decisions[2:]), label


def test_overload_during_the_return_reactivates():
    decisions = run([SURGE] * 3 + [RECOVERED] * 10 + [SURGE] * 3)
    assert decisions[11].phase == RESTORING
    assert decisions[-1].phase == ACTIVE and f.REACTIVATED in [d.event for d in decisions[13:]]
    assert [d.event for d in decisions if d.event] == [f.ENTERED, f.RETURN_STARTED, f.REACTIVATED]  # at once: overflow above the share
    assert decisions[-1].share == pytest.approx(50 / 150)


def noisy_latency(seed: int, ticks: int, centre: float, spread: float) -> np.ndarray:
    return np.random.default_rng(seed).normal(centre, spread, ticks)


def test_noisy_signal_around_the_slo_does_not_flap():
    """p99 swinging ±0.3 s around the SLO every tick: readings over it rarely last 30 s; whatever it
    does, it changes phase at most a handful of times over an hour, never tick to tick."""
    latencies = noisy_latency(1, 240, 1.0, 0.3)
    decisions = run([dict(demand=105.0, latency=float(x), ready=10, arriving=(10_000.0,)) for x in latencies])
    events = [(i, d.event) for i, d in enumerate(decisions) if d.event]
    assert [e for _, e in events] == [f.ENTERED]  # one entry in an hour, no return while it stays noisy
    # Never back to the primary within the exit hysteresis after an entry (M + the stepped return).
    entered = [i for i, e in events if e in (f.ENTERED, f.REACTIVATED)]
    restored = [i for i, e in events if e == f.RESTORED]
    for start in entered:
        later = [r for r in restored if r > start]
        assert not later or (later[0] - start) * TICK >= POLICY.exit_after_s + 2 * POLICY.return_step_hold_s
    # Inside one active spell the share never goes down.
    for a, b in zip(decisions, decisions[1:]):
        if a.phase == b.phase == ACTIVE:
            assert b.share >= a.share


def test_noisy_signal_below_the_exit_threshold_returns_once():
    """After an overload, latency noise under the SLO but around the exit threshold: the return
    waits for M calm seconds in a row and happens once, with no re-entry."""
    rng = np.random.default_rng(7)
    calm = [dict(RECOVERED, latency=float(x)) for x in rng.normal(0.7, 0.1, 120)]
    decisions = run([SURGE] * 3 + calm)
    events = [d.event for d in decisions if d.event]
    assert events == [f.ENTERED, f.RETURN_STARTED, f.RESTORED]


def test_noisy_signal_below_the_slo_never_enters():
    latencies = noisy_latency(3, 240, 0.6, 0.15)
    decisions = run([dict(demand=95.0, latency=float(min(x, 0.99))) for x in latencies])
    assert all(d.phase == INACTIVE for d in decisions)


def test_priority_class_never_falls_back_by_default():
    assert not FallbackPolicy().may_fall_back(f.PRIORITY)
    assert FallbackPolicy().may_fall_back(f.STANDARD)
    assert FallbackPolicy(classes=frozenset({f.PRIORITY, f.STANDARD})).may_fall_back(f.PRIORITY)


@pytest.mark.parametrize("field_values, message", [
    (dict(return_steps=(0.5, 0.25)), "end at 0.0"),
    (dict(return_steps=(0.25, 0.5, 0.0)), "must not increase"),
    (dict(exit_latency_ratio=1.5), "exit_latency_ratio"),
    (dict(target_utilisation=0.0), "target_utilisation"),
    (dict(min_share=0.5, max_share=0.2), "min_share"),
])
def test_bad_policy_is_refused(field_values, message):
    with pytest.raises(ValueError, match=message):
        FallbackPolicy(**field_values)


def test_fallback_step_reads_the_plans_slo_signal_and_credits_arriving_at_the_cold_start():
    plan = PoolPlan(capacity_rps_per_replica=10.0, max_replicas=40, slo_latency_s=1.0, slo_signal="ttft_p99_s",
                    cold_start_p95_s=90.0)

    def signals(p99: float) -> PoolSignals:
        return PoolSignals(pool="chat", ttft_p95_s=Reading(0.5, 1.0), ttft_p99_s=Reading(p99, 1.0),
                           ready_replicas=Reading(10, 1.0), desired_replicas=Reading(15, 1.0))

    state = FallbackState()
    policy = replace(POLICY, entry_after_s=0.0)
    late = fallback_step(100.0, signals(2.0), plan, state, policy, demand_rps=150.0, eligible_share=1.0,
                         arriving_requested_at_s=(50.0,) * 5)  # ready at 140 s: later than 100 + 15
    assert late.phase == ACTIVE and late.share == pytest.approx(50 / 150)
    soon = fallback_step(100.0, signals(2.0), plan, state, policy, demand_rps=150.0, eligible_share=1.0,
                         arriving_requested_at_s=(20.0,) * 5)  # ready at 110 s: in time
    assert soon.phase == INACTIVE
    p95_only = fallback_step(100.0, signals(0.5), plan, state, policy, demand_rps=150.0, eligible_share=1.0,
                             arriving_requested_at_s=(50.0,) * 5)
    assert p95_only.phase == INACTIVE  # the plan judges by p99, which is fine here


def test_unknown_ready_replicas_move_nothing_and_a_blind_return_holds():
    """Unknown is never zero: read as none ready, the overloaded-looking primary sent the whole route away."""
    plan = PoolPlan(capacity_rps_per_replica=10.0, max_replicas=40, slo_latency_s=1.0)
    unknown_ready = PoolSignals(pool="chat", ttft_p95_s=Reading(2.0, 1.0), ready_replicas=Reading(None, 300.0))
    policy = replace(POLICY, entry_after_s=0.0)
    kwargs = dict(demand_rps=150.0, eligible_share=1.0)
    assert fallback_step(100.0, unknown_ready, plan, FallbackState(), policy, **kwargs).phase == INACTIVE
    active = FallbackState(phase=ACTIVE, share=0.4, since_s=0.0)
    held = fallback_step(100.0, unknown_ready, plan, active, policy, **kwargs)
    assert (held.phase, held.share) == (ACTIVE, 0.4) and "unknown" in held.reasons[0]
    # During the return, the SLO signal unknown holds the step where it is, and restarts its hold.
    returning = FallbackState(phase=RESTORING, share=0.25, since_s=0.0, return_from=0.5, return_step=1, step_since_s=10.0)
    blind = PoolSignals(pool="chat", ttft_p95_s=Reading(None, 300.0), ready_replicas=Reading(20, 1.0))
    step = fallback_step(100.0, blind, plan, returning, policy, **kwargs)
    assert (step.phase, step.share, step.state.step_since_s) == (RESTORING, 0.25, 100.0)
    # A breaker that says the primary fails as a whole acts on what its pods answered.
    assert fallback_step(100.0, unknown_ready, plan, FallbackState(), policy, breaker_open="every replica failing",
                         **kwargs).phase == ACTIVE


# --- circuit breakers (scaling/engine/breakers.py `fallback_picture`) ---------------------------------


def test_ejected_endpoints_that_leave_too_little_capacity_send_the_overflow_at_once() -> None:
    # 10 ready replicas serve 100 req/s; breakers ejected 4: the 6 left serve 60, latency still fine.
    decision = decide_fallback(replace(inputs(ready=10), ejected_replicas=4), POLICY, FallbackState())
    assert (decision.phase, decision.event) == (ACTIVE, f.ENTERED)
    assert decision.share == pytest.approx(0.4)
    assert "ejected 4 of 10 ready replicas" in decision.reasons[0]


def test_ejections_the_rest_can_carry_move_nothing() -> None:
    decision = decide_fallback(replace(inputs(demand=50.0, ready=10), ejected_replicas=4), POLICY, FallbackState())
    assert decision.phase == INACTIVE and decision.share == 0.0


def test_a_pool_failing_as_a_whole_sends_all_it_may_and_returns_once_it_is_not() -> None:
    failing = "circuit breakers open on all 10 endpoints of the pool"
    capped = replace(POLICY, max_share=0.7)
    entered = decide_fallback(replace(inputs(demand=50.0), breaker_open=failing, ejected_replicas=10), capped,
                              FallbackState())
    assert (entered.phase, entered.share, entered.reasons[0]) == (ACTIVE, 0.7, failing)
    # Still failing: calm latency (the fallback carries the traffic) is no reason to return.
    state = entered.state
    for tick in range(1, 12):
        decision = decide_fallback(replace(inputs(now=tick * TICK, demand=50.0, latency=0.2), breaker_open=failing,
                                           ejected_replicas=10), capped, state)
        state = decision.state
        assert decision.phase == ACTIVE and failing in decision.reasons[0]
    # The breakers close: after the calm time the return starts, and a failure during it goes back to all.
    now = 12 * TICK
    while state.phase == ACTIVE:
        decision = decide_fallback(inputs(now=now, demand=50.0, latency=0.2), capped, state)
        state, now = decision.state, now + TICK
    assert decision.event == f.RETURN_STARTED and state.phase == RESTORING
    back = decide_fallback(replace(inputs(now=now, demand=50.0, latency=0.2), breaker_open=failing), capped, state)
    assert (back.phase, back.event, back.share) == (ACTIVE, f.REACTIVATED, 0.7)


def test_the_breaker_picture() -> None:
    from scaling.engine.breakers import BreakerPicture, fallback_picture

    assert fallback_picture({"a": "open", "b": "closed", "c": "half_open"}) == BreakerPicture(1, "")
    assert fallback_picture({"a": "open", "b": "open"}).failing.startswith("circuit breakers open on all 2")
    # The pool breaker counts the ejected endpoints' failures too: with endpoints open it adds nothing.
    assert fallback_picture({"a": "open", "b": "closed"}, "open").failing == ""
    assert fallback_picture({"a": "closed"}, "open").failing == "the pool's circuit breaker is open"
    assert "system" in fallback_picture({}, "closed", "open").failing
    assert fallback_picture({}, "closed", "open", has_fallback=False).failing == ""
    assert fallback_picture({}, "closed", "open", enabled=False).failing == ""


# --- the demand the queue's growth implies (issues 13 and 16) ----------------------------------------
# The route's request rate is a rate over a window: at a surge's onset it holds a few seconds of the
# surge. The primary's queue does not lag: its growth between two ticks plus what the ready replicas
# served is the arrival rate, taken while latency is over the SLO when it is above the rate.

ONSET = replace(POLICY, entry_after_s=0.0, queue_drain_s=0.0)  # no backlog term: the demand alone sizes the share
CALM_TICK = dict(demand=10.0, ready=1, queue=0.0, latency=0.5)  # 1 replica of 10 req/s, at its base rate


def test_a_10x_onset_enters_at_the_share_the_queue_growth_implies():
    # The surge is 100 req/s (10x); the windowed rate reads 20 (2x); the queue grew 90 a second
    # (arrivals 100 less the 10 the replica served), latency's window has not seen it yet.
    calm, onset = run([CALM_TICK, dict(CALM_TICK, demand=20.0, queue=90.0 * TICK)], ONSET)
    assert calm.phase == INACTIVE and calm.state.last_queue_depth == 0.0 and calm.state.last_queue_at_s == 0.0
    assert onset.phase == ACTIVE and onset.event == f.ENTERED
    assert onset.share >= 0.85  # (100 - 10) / 100; the rate alone says (20 - 10) / 20 = 0.5
    assert onset.share == pytest.approx(0.9)
    assert "100.0 req/s arriving by the queue's growth (route rate 20.0 req/s)" in onset.reasons[-1]
    # The window keeps the measured rate: the estimate sizes this tick, and the share it set holds.
    assert max(rps for _, rps in onset.state.recent_demand) == 20.0
    held = decide_fallback(inputs(now=2 * TICK, demand=40.0, ready=1, queue=90.0 * TICK, latency=2.0), ONSET,
                           onset.state)
    assert held.phase == ACTIVE and held.share == pytest.approx(0.9)


def test_the_sandbox_surge_onset_enters_at_most_of_the_overflow():
    # The headless demo's first tick after the surge (docs/sandbox.md, at 2x, in wall seconds): one primary
    # replica of 13.57 req/s, ticks 7.5 s apart, the surge 40 req/s, the one-minute rate 6.9, a queue of 65.
    demo = FallbackPolicy(entry_after_s=0.0, exit_after_s=30.0, return_step_hold_s=15.0, max_share=0.9)

    def tick(now: float, rate: float, queue: float) -> FallbackInputs:
        return FallbackInputs(now_s=now, demand_rps=rate, eligible_share=1.0, latency_s=0.2, queue_time_s=math.nan,
                              slo_latency_s=0.5, ready_replicas=1, capacity_rps_per_replica=13.57,
                              desired_replicas=2, queue_depth=queue, arriving_ready_at_s=(now + 30.0,))

    calm = decide_fallback(tick(0.0, 4.0, 0.0), demo, FallbackState())
    onset = decide_fallback(tick(7.5, 6.9, 65.0), demo, calm.state)
    rate_only = decide_fallback(tick(7.5, 6.9, 65.0), demo, FallbackState())
    assert rate_only.share == pytest.approx(0.275, abs=0.005)  # what the demo entered at
    assert onset.phase == ACTIVE and onset.share >= 0.75  # (65 / 7.5 + 13.57) req/s arriving


def test_a_draining_queue_does_not_inflate_the_demand():
    # Over the SLO, 10 replicas (100 req/s), the queue down from 500 to 300: 86.7 req/s arrived, below the rate.
    over = dict(demand=150.0, latency=2.0, arriving=(200.0,) * 5)
    fresh = run([dict(over, queue=300.0)])[-1]
    after_drain = run([dict(over, queue=500.0), dict(over, queue=300.0)])[-1]
    assert after_drain.overflow_share == pytest.approx(fresh.overflow_share)
    assert max(rps for _, rps in after_drain.state.recent_demand) == 150.0
    assert not any("queue's growth" in reason for reason in after_drain.reasons)
    # A queue standing still is the replicas' own rate: nothing above it.
    standing = FallbackState(last_queue_depth=300.0, last_queue_at_s=0.0)
    assert f.queue_arrival_rps(inputs(now=15.0, queue=300.0), POLICY, standing) == pytest.approx(100.0)
    rate_only = decide_fallback(inputs(now=15.0, demand=100.0, latency=2.0, queue=300.0), POLICY, FallbackState())
    assert decide_fallback(inputs(now=15.0, demand=50.0, latency=2.0, queue=300.0), POLICY,
                           standing).overflow_share == pytest.approx(rate_only.overflow_share)


def test_an_unknown_queue_falls_back_to_the_rate_and_is_never_read_as_zero():
    first, unknown = run([CALM_TICK, dict(CALM_TICK, demand=20.0, queue=math.nan, latency=2.0)], ONSET)
    assert unknown.share == pytest.approx(0.5)  # the rate alone: (20 - 10) / 20
    # The last known reading stays: the next known one measures its growth from there, over 30 s: 40 req/s
    # arrived at the primary, which had half the route (the share entered at).
    assert (unknown.state.last_queue_depth, unknown.state.last_queue_at_s) == (0.0, 0.0)
    later = decide_fallback(inputs(now=30.0, demand=20.0, ready=1, queue=900.0, latency=2.0), ONSET, unknown.state)
    assert f.queue_arrival_rps(inputs(now=30.0, ready=1, queue=900.0), ONSET, unknown.state) == pytest.approx(80.0)
    assert later.share == pytest.approx((80.0 - 10.0) / 80.0)
    # No earlier reading (a fresh state), or one too old: the rate alone.
    assert math.isnan(f.queue_arrival_rps(inputs(now=15.0, ready=1, queue=900.0), ONSET, FallbackState()))
    old = FallbackState(last_queue_depth=0.0, last_queue_at_s=-100.0)
    assert math.isnan(f.queue_arrival_rps(inputs(now=15.0, ready=1, queue=900.0), ONSET, old))


def test_queue_growth_counts_only_while_over_the_slo_and_with_a_queue():
    # Latency fine and no wait: a growing but short queue is no demand estimate.
    state = FallbackState(last_queue_depth=0.0, last_queue_at_s=0.0)
    calm = decide_fallback(inputs(now=15.0, demand=50.0, queue=30.0, latency=0.2), POLICY, state)
    assert max(rps for _, rps in calm.state.recent_demand) == 50.0
    # An empty queue says the replicas were not all busy: their capacity is no measure of the arrivals.
    assert math.isnan(f.queue_arrival_rps(inputs(now=15.0, queue=0.0), POLICY, state))


def test_the_primarys_arrivals_are_scaled_to_the_route_by_what_it_took():
    # Active at 50 %: the primary got half the route. Its queue grew 20 a second over its 100 req/s: 120
    # arrived at the primary, 240 at the route.
    state = FallbackState(phase=ACTIVE, share=0.5, last_queue_depth=0.0, last_queue_at_s=0.0)
    grown = inputs(now=15.0, queue=300.0, latency=2.0)
    assert f.queue_arrival_rps(grown, POLICY, state) == pytest.approx(240.0)
    # What the route really had (an entry waiting for approval left it all on the primary) wins.
    assert f.queue_arrival_rps(replace(grown, routed_share=0.0), POLICY, state) == pytest.approx(120.0)
    # A primary that took less than half says too little about the route: an error in what its replicas
    # served would be multiplied by more than 2.
    assert math.isnan(f.queue_arrival_rps(replace(grown, routed_share=0.6), POLICY, state))


def test_a_queue_draining_slower_than_the_capacity_says_does_not_cut_an_active_share():
    # The headless demo's first try (2x, wall seconds): active at 90 %, the one primary replica kept 10 %
    # of the 40 req/s and its queue of 125 drained by 5 in 7.5 s, where its capacity at the SLO (13.57)
    # says 9.6 a second. Scaled by the primary's 10 %, that read as 129 req/s, and the fallback's 5
    # replicas (47 req/s at 85 %) capped the share at 37 %: 60 % of the surge went to the primary.
    demo = FallbackPolicy(entry_after_s=0.0, exit_after_s=30.0, return_step_hold_s=15.0, max_share=0.9)
    state = FallbackState(phase=ACTIVE, share=0.9, since_s=0.0, over_since_s=0.0, recent_demand=((0.0, 28.9),),
                          last_queue_depth=125.0, last_queue_at_s=0.0)
    later = FallbackInputs(now_s=7.5, demand_rps=20.0, eligible_share=1.0, latency_s=4.0, queue_time_s=4.0,
                           slo_latency_s=0.5, ready_replicas=1, capacity_rps_per_replica=13.57, desired_replicas=3,
                           queue_depth=120.0, fallback_capacity_rps=5 * 11.12, routed_share=0.9)
    assert math.isnan(f.queue_arrival_rps(later, demo, state))
    decision = decide_fallback(later, demo, state)
    assert decision.phase == ACTIVE and decision.share == pytest.approx(0.9)


def test_fallback_step_times_the_queue_by_its_reading_and_a_repeated_reading_adds_nothing():
    plan = PoolPlan(capacity_rps_per_replica=10.0, max_replicas=40, slo_latency_s=1.0, slo_signal="ttft_p95_s",
                    cold_start_p95_s=90.0)
    policy = replace(ONSET, demand_window_s=1.0)  # the rate of this tick alone

    def signals(queue: float, age: float) -> PoolSignals:
        return PoolSignals(pool="chat", ttft_p95_s=Reading(0.5, age), queue_depth=Reading(queue, age),
                           ready_replicas=Reading(1, age), desired_replicas=Reading(2, age))

    calm = fallback_step(0.0, signals(0.0, 0.0), plan, FallbackState(), policy, demand_rps=10.0, eligible_share=1.0)
    # Read 5 s before this tick at 15 s: 90 a second over 10 s.
    onset = fallback_step(15.0, signals(900.0, 5.0), plan, calm.state, policy, demand_rps=20.0, eligible_share=1.0)
    assert onset.state.last_queue_at_s == 10.0 and onset.share == pytest.approx(0.9)
    # The loop did not read again: the same sample, older, is no growth (and the last reading stays).
    again = fallback_step(20.0, signals(900.0, 10.0), plan,
                          replace(onset.state, phase=INACTIVE, share=0.0), policy, demand_rps=20.0, eligible_share=1.0)
    assert again.state.last_queue_at_s == 10.0 and again.share == pytest.approx(0.5)


def test_the_route_demand_adds_the_fallbacks_rate_as_old_as_the_older_and_unknown_stays_unknown() -> None:
    primary = PoolSignals(pool="chat", request_rate_rps=Reading(4.0, 10.0), queue_depth=Reading(3.0, 10.0))
    route = f.with_route_demand(primary, Reading(16.0, 25.0))
    assert route.request_rate_rps == Reading(20.0, 25.0)
    assert route.queue_depth == primary.queue_depth  # only the demand changes
    assert not f.with_route_demand(primary, Reading(None, None)).request_rate_rps.is_known
    assert not f.with_route_demand(primary, Reading(16.0, 200.0)).request_rate_rps.is_known  # a stale fallback
    assert not f.with_route_demand(replace(primary, request_rate_rps=Reading(math.nan, 5.0)),
                                   Reading(16.0, 5.0)).request_rate_rps.is_known


def test_the_answered_share_is_the_fallbacks_rate_over_both_and_unknown_stays_unknown() -> None:
    known = lambda value: Reading(value, 0.0)  # noqa: E731
    assert f.answered_share(known(5.0), known(6.0)) == 0.5455
    assert f.answered_share(known(5.0), known(0.0)) == 0.0
    assert f.answered_share(known(0.0), known(0.0)) is None  # nothing sent: no share
    assert f.answered_share(Reading(None, None), known(6.0)) is None
    assert f.answered_share(known(5.0), Reading(None, 30.0)) is None
