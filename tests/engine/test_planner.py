"""The Headroom planner: table-driven cases for every rule of design.md §6."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from scaling.engine import planner as p
from scaling.engine.planner import ForecastPoint, PlanInput, PlannerState, PoolPlan, ScheduleWindow, plan
from scaling.engine.signals import PoolSignals, Reading

# The HPA's own scale-up limit (+100 % per 15 s) so that the cases can show it binding; Headroom's
# default is looser (see test_its_default_scale_up_limit_allows_10x_per_tick). Planned at full use of
# the capacity, so the cases' arithmetic is the terms' own (the default 85 %: its own test).
POOL = PoolPlan(capacity_rps_per_replica=10.0, min_replicas=2, max_replicas=40, cold_start_p95_s=90.0,
                decision_delay_s=30.0, warm_pool_fraction=0.4, scale_up_percent=100.0, capacity_utilisation=1.0)
NOW = 10_000.0


def fresh(value: float) -> Reading:
    return Reading(value, 5.0)


def signals(ready: int = 4, arriving: int = 0, desired: int | None = None, queue: float | None = 0.0,
            rate: float | None = 30.0, age_s: float = 5.0, ttft_p95: float | None = None) -> PoolSignals:
    def reading(value: float | None) -> Reading:
        return Reading(value, age_s) if value is not None else Reading()

    return PoolSignals(
        pool="chat",
        queue_depth=reading(queue),
        request_rate_rps=reading(rate),
        ready_replicas=fresh(ready),
        arriving_replicas=fresh(arriving),
        desired_replicas=fresh(ready + arriving if desired is None else desired),
        ttft_p95_s=reading(ttft_p95),
    )


def inputs(sig: PoolSignals | None = None, lead: tuple[float, float] | None = (30.0, 36.0),
           peak: tuple[float, float] | None = None, arriving_in: tuple[float, ...] = (), now: float = NOW,
           windows: tuple[ScheduleWindow, ...] = (), approved: int = 0, recent_peak: float | None = None,
           lead_peak: float | None = None) -> PlanInput:
    return PlanInput(
        now_s=now,
        signals=sig or signals(),
        arriving_ready_in_s=arriving_in,
        forecast_lead=ForecastPoint(120.0, *lead) if lead else None,
        forecast_peak=ForecastPoint(1800.0, *peak) if peak else None,
        windows=windows,
        approved_floor=approved,
        recent_peak_rps=recent_peak,
        lead_peak_rps=lead_peak,
    )


def good_state(target: int = 6, known_at: float = NOW - 15) -> PlannerState:
    # A planner that has been running: its one recommendation has left the scale-down window.
    return PlannerState(last_known_at_s=known_at, last_good_target=target, recommendations=((NOW - 400, target),))


# ---------------------------------------------------------------------------- the four terms


@pytest.mark.parametrize(
    ("case", "plan_input", "expected_target", "largest_term"),
    [
        ("steady load: the predictive p90 sets the size", inputs(lead=(30.0, 36.0)), 4, p.PREDICTIVE),
        ("a queue per ready replica above 5 scales up reactively",
         inputs(signals(ready=4, queue=80.0), lead=(30.0, 36.0)), 8, p.REACTIVE),
        ("the forecast's p90 at the lead time leads", inputs(lead=(50.0, 75.0)), 8, p.PREDICTIVE),
        ("an upper band past the peak seen lately is clipped to it",
         inputs(lead=(30.0, 400.0), lead_peak=55.0), 6, p.PREDICTIVE),
        ("the 30-minute peak does not clip the band: a surge half an hour ago is not lately",
         inputs(lead=(30.0, 400.0), recent_peak=55.0), 8, p.PREDICTIVE),  # (the scale-up limit, not the peak)
        ("no forecast: the reactive term still decides", inputs(signals(ready=4, queue=30.0), lead=None), 6, p.REACTIVE),
        ("a window starting within the lead time pre-scales by its factor",
         inputs(windows=(ScheduleWindow(NOW + 100, NOW + 3600, 0.4, expected_rps=100.0),)), 8, p.SCHEDULED),
        ("a window further out does nothing yet",
         inputs(windows=(ScheduleWindow(NOW + 600, NOW + 3600, 0.4, expected_rps=100.0),)), 4, p.PREDICTIVE),
        ("the warm floor: 40 % of the expected peak", inputs(lead=(10.0, 12.0), peak=(150.0, 180.0)), 6, p.WARM_FLOOR),
        ("an approved pre-scale is held", inputs(approved=12), 8, p.PRESCALE_HOLD),
        ("the rate arriving now leads a ramp the forecast has not caught",
         inputs(signals(rate=75.0), lead=(30.0, 36.0)), 8, p.REACTIVE_RATE),
    ],
)
def test_it_takes_the_largest_term(case, plan_input, expected_target, largest_term):
    decision = plan(plan_input, POOL, good_state())
    assert (decision.target_replicas, decision.reasons[0]) == (expected_target, largest_term), case
    assert decision.binding in {largest_term, p.RATE_LIMITED_UP}, case


def test_it_says_why_with_the_numbers_behind_each_term():
    decision = plan(inputs(signals(ready=4, queue=80.0), lead=(50.0, 75.0), peak=(60.0, 90.0)), POOL, good_state())

    predictive = decision.term(p.PREDICTIVE)
    assert predictive.replicas == 8
    assert predictive.numbers["p90_rps"] == 75.0 and predictive.numbers["lead_s"] == 120.0
    assert predictive.numbers["capacity_rps_per_replica"] == 10.0
    reactive = decision.term(p.REACTIVE)
    assert reactive.numbers["waiting_total"] == 80.0 and reactive.numbers["target_waiting_per_replica"] == 5.0
    assert decision.term(p.WARM_FLOOR).numbers["expected_peak_rps"] == 60.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.target_replicas = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("case", "rate", "margin", "expected"),
    [
        ("the current rate at the capacity", 75.0, 1.0, 8),
        ("times the margin", 75.0, 1.5, 12),
        ("margin 0 turns the term off", 75.0, 0.0, None),
        ("an unknown rate has no opinion, never zero", None, 1.0, None),
    ],
)
def test_the_request_rate_term_serves_the_rate_arriving_now(case, rate, margin, expected):
    pool = dataclasses.replace(POOL, request_rate_margin=margin)
    decision = plan(inputs(signals(rate=rate), lead=None), pool, good_state())

    term = decision.term(p.REACTIVE_RATE)
    assert term.replicas == expected, case
    if expected is not None:
        assert term.numbers["request_rate_rps"] == rate and term.numbers["capacity_rps_per_replica"] == 10.0


@pytest.mark.parametrize(
    ("case", "busy", "ready", "target", "expected"),
    [
        # 4 ready of a pool sized 4 (the rate's 30 req/s at 10 per replica asks for 3).
        ("a burst's work at the tick: ready x busy / target", 0.9, 4, 0.3, 12),
        ("a saturated GPU asks for ready / target", 1.0, 4, 0.3, 14),  # 13.3
        ("a busy share past 1 is a broken reading, counted as 1", 7.0, 4, 0.3, 14),
        ("at most the pool's maximum", 1.0, 4, 0.05, 40),
        ("under the target it asks nothing (never a scale-down)", 0.2, 4, 0.3, None),
        ("just at what the pool has: nothing", 0.3, 4, 0.3, None),
        ("an unknown busy share has no opinion, never zero", None, 4, 0.3, None),
        ("no ready replica: nothing to read a busy share from", 0.9, 0, 0.3, None),
    ],
)
def test_the_busy_share_term_asks_for_a_bursts_work_at_the_tick(case, busy, ready, target, expected):
    pool = dataclasses.replace(POOL, busy_share_target=target, busy_share_onset=0.0)  # every tick, as the HPA
    sig = dataclasses.replace(signals(ready=ready, desired=4),
                              work_share=Reading(busy, 5.0) if busy is not None else Reading())
    decision = plan(inputs(sig, lead=None), pool, good_state(target=4))

    term = decision.term(p.REACTIVE_BUSY)
    assert term.replicas == expected, case
    if expected is not None:  # it binds, within the scale-up limit (+100 % a period: 4 -> 8)
        assert decision.reasons[0] == p.REACTIVE_BUSY and decision.target_replicas == min(expected, 8), case


def minute_of_work(busy_replicas: float, ready_ago_s: tuple[float, ...] = (60.0, 45.0, 30.0, 15.0)):
    """A planner that read the same busy replicas (busy share x ready) at each of the minute's earlier ticks."""
    return dataclasses.replace(good_state(target=4), busy_replicas=tuple((NOW - ago, busy_replicas) for ago in ready_ago_s))


@pytest.mark.parametrize(
    ("case", "busy", "ready", "state", "expected"),
    [
        # The minute before: 1.2 busy replicas (4 ready at 0.3). Onset at 1.5x, saturated at 0.9.
        ("an onset: 3.6 busy replicas, 3x the minute's", 0.9, 4, minute_of_work(1.2), 12),
        ("just at the onset: 1.5x", 0.45, 4, minute_of_work(1.2), 6),
        ("a rise under the onset asks nothing", 0.4, 4, minute_of_work(1.2), None),
        ("saturated, no rise: it cannot show what more waits", 0.95, 4, minute_of_work(3.8), 13),
        ("no minute behind it (a fresh planner, a restart): no onset", 0.8, 4, good_state(target=4), None),
        ("readings older than a minute are not the minute's", 0.8, 4, minute_of_work(1.2, (120.0, 90.0)), None),
        # 8 ready at 0.3 a minute ago, 4 now at 0.6: the busy share doubled, the work did not.
        ("a scale-down is not an onset", 0.6, 4, minute_of_work(2.4), None),
    ],
)
def test_the_busy_share_term_acts_only_at_an_onset(case, busy, ready, state, expected):
    """Smooth traffic (ServeGen) pays nothing for the term; a burst's tick still gets what the HPA would ask."""
    pool = dataclasses.replace(POOL, busy_share_target=0.3)
    sig = dataclasses.replace(signals(ready=ready, desired=4), work_share=fresh(busy))
    decision = plan(inputs(sig, lead=None), pool, state)

    term = decision.term(p.REACTIVE_BUSY)
    assert term.replicas == expected, case
    if expected is not None and state.busy_replicas:  # the rise the proposal's sentence reports
        assert term.numbers["busy_rise"] == pytest.approx(busy * ready / state.busy_replicas[0][1]), case
    # The tick's busy replicas join the minute; older readings leave it.
    kept = decision.state.busy_replicas
    assert kept[-1] == (NOW, pytest.approx(busy * ready)) and all(NOW - at < 60.0 for at, _ in kept), case
    assert PlannerState.from_dict(decision.state.to_dict()).busy_replicas == kept, case


def test_a_missed_busy_reading_keeps_the_minute_and_the_next_tick_still_sees_the_onset():
    """DCGM misses a scrape mid-surge: no opinion that tick, and the minute it compares with is not lost."""
    pool = dataclasses.replace(POOL, busy_share_target=0.3)
    state = minute_of_work(1.2)
    missed = plan(inputs(dataclasses.replace(signals(ready=4, desired=4), work_share=Reading()), lead=None),
                  pool, state)
    assert missed.term(p.REACTIVE_BUSY).replicas is None and missed.state.busy_replicas == state.busy_replicas

    later = plan(inputs(dataclasses.replace(signals(ready=4, desired=4), work_share=fresh(0.9)), lead=None,
                        now=NOW + 15), pool, missed.state)
    assert later.term(p.REACTIVE_BUSY).replicas == 12  # 3.6 busy replicas against the minute's 1.2


def test_the_busy_share_term_is_on_by_default_and_a_pool_may_turn_it_off():
    sig = dataclasses.replace(signals(ready=4, rate=30.0), work_share=fresh(0.97))
    on = plan(inputs(sig, lead=None), POOL, good_state(target=4))
    assert p.PoolPlan.busy_share_target == 0.3 and on.term(p.REACTIVE_BUSY).replicas == 13  # saturated: 4 x 0.97 / 0.3
    off = plan(inputs(sig, lead=None), dataclasses.replace(POOL, busy_share_target=0.0), good_state(target=4))
    assert off.term(p.REACTIVE_BUSY) is None
    assert off.target_replicas == 3  # what the rate asks (30 req/s at 10 per replica), not 13


def test_the_busy_share_term_never_reads_dcgm():
    """DCGM reads a vLLM GPU busy whenever it decodes: a pinned 0.97 must not triple a quiet pool."""
    pool = dataclasses.replace(POOL, busy_share_target=0.3)
    sig = dataclasses.replace(signals(ready=4, rate=30.0), gpu_utilization=fresh(0.97))  # no work share known
    decision = plan(inputs(sig, lead=None), pool, good_state(target=4))

    assert decision.term(p.REACTIVE_BUSY).replicas is None and decision.target_replicas == 3


def test_the_busy_share_term_gives_way_when_the_signals_fall_back():
    """Unknown load for a minute: the fallback's terms only (schedule, last good target, queue)."""
    pool = dataclasses.replace(POOL, busy_share_target=0.3)
    sig = dataclasses.replace(signals(ready=4, rate=None), work_share=fresh(1.0))
    state = dataclasses.replace(good_state(target=4, known_at=NOW - 120))
    decision = plan(inputs(sig, lead=None), pool, state)

    assert p.SIGNALS_FALLBACK in decision.reasons
    assert decision.term(p.REACTIVE_BUSY) is None and decision.target_replicas == 4


@pytest.mark.parametrize(
    ("case", "trend", "cap", "expected"),
    [
        # 75 req/s now at 10 per replica: 8 replicas without a trend. Lead time 120 s: two minutes.
        ("no trend known: the rate now", (), 1.5, 8),
        ("flat: the rate now", (70.0, 70.0), 1.5, 8),
        ("falling: the rate now", (90.0, 70.0), 1.5, 8),
        ("10 % a minute for two minutes: the rate lately x 1.21", (60.0, 66.0), 1.5, 8),  # 79.9
        ("a ramp doubling each minute: the cap, x 1.5 the rate lately", (35.0, 70.0), 1.5, 11),  # 105
        ("cap 1 turns it off", (35.0, 70.0), 1.0, 8),
        ("an unknown minute before is no trend", (math.nan, 70.0), 1.5, 8),
    ],
)
def test_on_a_ramp_the_rate_term_plans_for_the_rate_a_lead_time_ahead(case, trend, cap, expected):
    pool = dataclasses.replace(POOL, rate_trend_cap=cap)
    decision = plan(dataclasses.replace(inputs(signals(rate=75.0), lead=None), rate_trend_rps=trend), pool, good_state())

    term = decision.term(p.REACTIVE_RATE)
    assert term.replicas == expected, case
    assert 1.0 <= term.numbers["rate_growth"] <= cap or cap == 1.0, case


@pytest.mark.parametrize(
    ("case", "rate", "multiple", "expected"),
    [
        # 4 ready with 100 waiting each: the HPA rule asks for 80 (100 / 5 per replica x 4).
        ("a queue far past what the arriving rate needs orders 3x the rate's replicas", 50.0, 3.0, 15),
        ("never below the current count", 5.0, 3.0, 4),
        ("a rate that needs it all lets the queue term order it all", 400.0, 3.0, 40),
        ("multiple 0 turns the limit off", 50.0, 0.0, 40),
        ("an unknown rate leaves the queue term alone (the safety net)", None, 3.0, 40),
    ],
)
def test_the_queue_term_orders_no_more_than_a_multiple_of_the_rate_s_need(case, rate, multiple, expected):
    pool = dataclasses.replace(POOL, queue_term_rate_multiple=multiple)
    decision = plan(inputs(signals(ready=4, queue=400.0, rate=rate), lead=None), pool, good_state())

    assert decision.term(p.REACTIVE).replicas == expected, case  # 80 capped by max replicas 40 at most


@pytest.mark.parametrize(
    ("case", "queue", "rate", "arriving", "expected"),
    [
        ("scaled to zero, requests waiting, rate unknown: it activates, sized by the queue target", 12.0, None, 0, 3),
        ("scaled to zero, requests waiting long and none arriving: one replica serves them", 12.0, 0.0, 0, 1),
        ("scaled to zero, requests arriving but none waiting yet: the rate term activates", 0.0, 25.0, 0, 3),
        ("scaled to zero and idle: it stays at zero", 0.0, 0.0, 0, 0),
        ("replicas loading and a queue they will absorb: nothing more", 12.0, 0.0, 3, 3),
    ],
)
def test_it_scales_from_zero_ready_replicas(case, queue, rate, arriving, expected):
    pool = dataclasses.replace(POOL, min_replicas=0)
    decision = plan(inputs(signals(ready=0, arriving=arriving, queue=queue, rate=rate), lead=None,
                           arriving_in=(60.0,) * arriving), pool, good_state(target=0))

    assert decision.hold == (rate is None), case  # an unknown rate is unknown load: up only
    assert decision.target_replicas == expected, case


# ---------------------------------------------------------------------------- arriving replicas


@pytest.mark.parametrize(
    ("case", "ready", "arriving", "arriving_in", "queue", "expected"),
    [
        # 8 requested (4 ready + 4 loading), a queue that 8 replicas absorb: no new order.
        ("arriving replicas absorb the queue: nothing more is ordered", 4, 4, (30.0,) * 4, 40.0, 8),
        # Without the arriving ones the same queue asks for 8 more than 4.
        ("the same queue with nothing arriving orders them", 4, 0, (), 40.0, 8),
        # A queue beyond what the arriving ones absorb orders the difference only.
        ("a larger queue orders only the difference", 4, 4, (30.0,) * 4, 120.0, 16),
    ],
)
def test_it_credits_arriving_replicas(case, ready, arriving, arriving_in, queue, expected):
    # 60 req/s: enough arriving for the queue term's own answer to stand (see the next test).
    decision = plan(inputs(signals(ready=ready, arriving=arriving, queue=queue, rate=60.0), lead=(10.0, 12.0),
                           arriving_in=arriving_in), POOL, good_state())
    assert decision.target_replicas == expected, case
    assert decision.ready_replicas == ready and decision.arriving_replicas == arriving


def test_it_credits_arriving_replicas_at_their_expected_ready_time():
    decision = plan(inputs(signals(ready=4, arriving=3), arriving_in=(10.0, 60.0, 500.0)), POOL, good_state())
    # Two of the three are expected ready within the 120-s lead time; the third is late.
    assert decision.term(p.PREDICTIVE).numbers["arriving_ready_by_lead"] == 2.0
    # The load needs 4: the newest order is cancelled first (a quarter a minute at most).
    assert decision.current_replicas == 7 and decision.target_replicas == 6


# ---------------------------------------------------------------------------- unknown signals


@pytest.mark.parametrize(
    ("case", "sig", "state", "expected", "hold", "alert", "reason"),
    [
        ("queue unknown (empty answer): hold, never scale down",
         signals(ready=10, queue=None), good_state(target=10, known_at=NOW - 30), 10, True, False, p.SIGNALS_UNKNOWN),
        ("queue NaN: hold", signals(ready=10, queue=float("nan")), good_state(10, NOW - 30), 10, True, False, p.SIGNALS_UNKNOWN),
        ("queue stale (> 90 s old): hold", signals(ready=10, age_s=120.0), good_state(10, NOW - 30), 10, True, False,
         p.SIGNALS_UNKNOWN),
        ("unknown for 60 s: fall back to the last good target, up from current",
         signals(ready=4, queue=None), good_state(target=9, known_at=NOW - 60), 8, True, False, p.SIGNALS_FALLBACK),
        ("unknown for 90 s: the staleness alert fires", signals(ready=10, queue=None), good_state(10, NOW - 90), 10,
         True, True, p.STALENESS_ALERT),
        # A new pool before its first scrape: the timers start now (next test), no page at its first tick.
        ("never known since start: hold", signals(ready=6, queue=None), PlannerState(), 6, True, False,
         p.SIGNALS_UNKNOWN),
    ],
)
def test_it_never_scales_down_on_unknown_signals(case, sig, state, expected, hold, alert, reason):
    # The forecast says 2 replicas would do; unknown signals must not follow it down.
    decision = plan(inputs(sig, lead=(5.0, 6.0)), POOL, state)
    assert decision.target_replicas == expected, case
    assert decision.target_replicas >= decision.current_replicas, case
    assert (decision.hold, decision.staleness_alert) == (hold, alert), case
    assert reason in decision.reasons, case


def test_signals_never_known_alert_90_s_after_the_first_step():
    first = plan(inputs(signals(ready=6, queue=None), lead=(5.0, 6.0)), POOL, PlannerState())
    later = plan(inputs(signals(ready=6, queue=None), lead=(5.0, 6.0), now=NOW + 90), POOL, first.state)
    assert not first.staleness_alert and first.signals_unknown_for_s == 0.0
    assert later.staleness_alert and later.signals_unknown_for_s == 90.0 and p.STALENESS_ALERT in later.reasons


def test_it_falls_back_to_the_schedule_after_60_s_unknown():
    window = ScheduleWindow(NOW - 100, NOW + 3600, 0.5, expected_rps=120.0)
    decision = plan(inputs(signals(ready=6, queue=None), windows=(window,)), POOL, good_state(target=6, known_at=NOW - 75))
    assert decision.target_replicas == 12  # 6, then rate-limited toward the schedule's 18
    assert decision.term(p.SCHEDULED).replicas == 18
    assert p.SIGNALS_FALLBACK in decision.reasons


@pytest.mark.parametrize(
    ("case", "sig", "state", "expected_term", "expected_target"),
    [
        # The window's factor (+40 %) on the 100 req/s recent peak: 14 replicas of 10 req/s.
        ("signals known, no forecast: the window applies to the recent peak", signals(ready=6), good_state(), 14, 12),
        ("signals unknown for 75 s, no forecast: the fallback still has the schedule",
         signals(ready=6, queue=None), good_state(target=6, known_at=NOW - 75), 14, 12),
    ],
)
def test_a_scheduled_window_works_without_a_forecast(case, sig, state, expected_term, expected_target):
    window = ScheduleWindow(NOW - 100, NOW + 3600, 0.4)  # no expected rate of its own
    decision = plan(inputs(sig, lead=None, windows=(window,), recent_peak=100.0), POOL, state)
    term = decision.term(p.SCHEDULED)
    assert term.replicas == expected_term and term.numbers["from_recent_peak"] == 1.0, case
    assert decision.target_replicas == expected_target, case  # +100 % a tick toward it


def test_a_scheduled_window_prefers_the_forecast_peak_to_the_recent_peak():
    window = ScheduleWindow(NOW - 100, NOW + 3600, 0.4)
    decision = plan(inputs(lead=(50.0, 60.0), windows=(window,), recent_peak=100.0), POOL, good_state())
    assert decision.term(p.SCHEDULED).replicas == 7  # 50 x 1.4 / 10
    assert decision.term(p.SCHEDULED).numbers["from_recent_peak"] == 0.0


def test_it_keeps_the_last_good_target_across_unknown_ticks():
    state = good_state(target=9, known_at=NOW - 200)
    for tick in range(3):
        decision = plan(inputs(signals(ready=9, queue=None), now=NOW + 15 * tick), POOL, state)
        state = decision.state
        assert decision.target_replicas == 9 and decision.staleness_alert
    assert state.last_good_target == 9


def test_a_pool_at_zero_replicas_is_not_a_staleness_alert():
    # Scaled to zero: no vLLM replica exports a queue, so its absence is expected, not stale.
    pool = dataclasses.replace(POOL, min_replicas=0)
    state = PlannerState(last_known_at_s=NOW - 3600, last_good_target=0, recommendations=((NOW - 3600, 0),))
    for tick in range(3):
        decision = plan(inputs(signals(ready=0, queue=None, rate=None), lead=None, now=NOW + 15 * tick), pool, state)
        state = decision.state
        assert not decision.staleness_alert and decision.signals_unknown_for_s == 0.0
        assert decision.target_replicas == 0 and decision.hold
        assert p.NO_QUEUE_SOURCE in decision.reasons and p.SIGNALS_FALLBACK not in decision.reasons
    # A queue read in front of vLLM (the route's gateway) activates it as before.
    woken = plan(inputs(signals(ready=0, queue=12.0, rate=None), lead=None, now=NOW + 60), pool, state)
    assert woken.target_replicas == 3 and p.REACTIVE in woken.reasons  # held only against scaling down (rate unknown)
    # Once replicas are ready their queue must come: unknown from then on is stale again.
    up = plan(inputs(signals(ready=3, queue=None), lead=None, now=NOW + 300), pool, woken.state)
    assert up.signals_unknown_for_s == 270.0 and up.staleness_alert  # the load was last known at NOW + 30 (no rate since)


def test_it_holds_when_even_the_replica_counts_are_unknown():
    sig = dataclasses.replace(signals(queue=None), ready_replicas=Reading(), desired_replicas=Reading())
    decision = plan(inputs(sig), POOL, good_state(target=7, known_at=NOW - 120))
    assert decision.target_replicas == 7 and decision.current_replicas is None
    assert p.REPLICAS_UNKNOWN in decision.reasons and decision.staleness_alert


# ---------------------------------------------------------------------------- guardrails


@pytest.mark.parametrize(
    ("case", "pool", "plan_input", "state", "expected", "reason"),
    [
        ("max replicas caps", dataclasses.replace(POOL, max_replicas=10), inputs(signals(ready=8), lead=(200.0, 250.0)),
         good_state(), 10, p.CAPPED_MAX),
        ("scale-up at most max(+4, +100 %) per 15 s", POOL, inputs(signals(ready=3), lead=(200.0, 250.0)), good_state(),
         7, p.RATE_LIMITED_UP),
        ("min replicas is a floor", dataclasses.replace(POOL, min_replicas=5),
         inputs(signals(ready=6, rate=0.0), lead=(0.0, 0.0)),
         PlannerState(last_known_at_s=NOW - 15, recommendations=((NOW - 400, 6),)), 5, None),
        ("scale-down waits for the window's highest target", POOL, inputs(signals(ready=10), lead=(10.0, 12.0)),
         PlannerState(last_known_at_s=NOW - 15, recommendations=((NOW - 200, 10),)), 10, p.STABILIZED_DOWN),
        ("after the window, at most a quarter a minute", POOL, inputs(signals(ready=12), lead=(10.0, 12.0)),
         PlannerState(last_known_at_s=NOW - 15, recommendations=((NOW - 400, 12),)), 9, p.RATE_LIMITED_DOWN),
    ],
)
def test_it_applies_the_guardrails(case, pool, plan_input, state, expected, reason):
    decision = plan(plan_input, pool, state)
    assert decision.target_replicas == expected, case
    assert reason is None or reason in decision.reasons, case
    assert decision.term(p.WARM_FLOOR).replicas >= pool.min_replicas, case


def test_a_fresh_state_does_not_scale_down_on_its_first_tick():
    # The HPA seeds a new autoscaler's history with the current count (recordInitialRecommendation),
    # so the scale-down window holds it: a planner that just started has not seen the load that
    # set the current count.
    sig = signals(ready=10, rate=5.0)
    first = plan(inputs(sig, lead=None), POOL, PlannerState())
    assert first.target_replicas == 10 and p.STABILIZED_DOWN in first.reasons
    later = plan(inputs(sig, lead=None, now=NOW + 240), POOL, first.state)
    assert later.target_replicas == 10
    after_window = plan(inputs(sig, lead=None, now=NOW + 301), POOL, later.state)
    assert after_window.target_replicas < 10


def test_a_fresh_state_still_scales_up_on_its_first_tick():
    decision = plan(inputs(signals(ready=2, rate=60.0), lead=None), POOL, PlannerState())
    assert decision.target_replicas == 6  # the load needs 6 (within max(+4, +100 %) a tick)


def test_a_pool_below_its_minimum_keeps_its_queue_term():
    pool = dataclasses.replace(POOL, min_replicas=6)
    # 3 ready, below the minimum of 6, with 30 waiting on each: the queue asks for 18, not just 6.
    decision = plan(inputs(signals(ready=3, queue=90.0, rate=60.0), lead=None), pool, good_state())
    assert decision.term(p.REACTIVE).replicas == 18


def test_its_default_scale_up_limit_is_the_hpa_s_and_a_pool_may_loosen_it():
    pool = PoolPlan(capacity_rps_per_replica=10.0, max_replicas=200)
    # 2 ready, a queue that asks for 100 and a rate that needs 60: max(+4 pods, +100 %) a period, as the HPA.
    decision = plan(inputs(signals(ready=2, queue=1000.0, rate=600.0), lead=None), pool, good_state())
    assert decision.target_replicas == 6 and p.RATE_LIMITED_UP in decision.reasons
    # A pool's override of 900 % (the default until session 12): 10x a period.
    loose = plan(inputs(signals(ready=2, queue=1000.0, rate=600.0), lead=None),
                 dataclasses.replace(pool, scale_up_percent=900.0), good_state())
    assert loose.target_replicas == 20


def test_it_counts_earlier_scale_ups_against_the_rate_limit():
    state = good_state()
    first = plan(inputs(signals(ready=3), lead=(200.0, 250.0)), POOL, state)
    assert first.target_replicas == 7
    accepted = p.record_scale_event(first.state, NOW, first.target_replicas - 3)  # the cluster took +4 at once
    second = plan(inputs(signals(ready=3, arriving=4), lead=(200.0, 250.0), arriving_in=(80.0,) * 4, now=NOW + 5),
                  POOL, accepted)
    assert second.target_replicas == 7  # the 15-s budget (from 3: +4) is spent
    third = plan(inputs(signals(ready=3, arriving=4), lead=(200.0, 250.0), arriving_in=(70.0,) * 4, now=NOW + 15),
                 POOL, second.state)
    assert third.target_replicas == 14


def test_a_scale_up_waiting_for_approval_does_not_flip_the_next_target():
    # Nothing was accepted by the cluster: the next ticks ask for the same change, not 4, 40, 4, ...
    pool = PoolPlan(capacity_rps_per_replica=10.0, max_replicas=64, capacity_utilisation=1.0)
    state, targets = good_state(), []
    for tick in range(4):
        decision = plan(inputs(signals(ready=4, desired=4, rate=390.0), lead=None, now=NOW + 15 * tick), pool, state)
        state, _ = decision.state, targets.append(decision.target_replicas)
    assert targets == [8, 8, 8, 8]  # 4 ready: max(+4, +100 %) a period


def test_it_takes_no_current_count_from_ready_replicas_alone():
    # The Kubernetes read failed (desired unknown) while Prometheus sees 4 ready replicas.
    unknown_desired = dataclasses.replace(signals(ready=4, queue=40.0, rate=200.0), desired_replicas=Reading())
    decision = plan(inputs(unknown_desired, lead=None), POOL, good_state())
    assert decision.current_replicas is None and p.REPLICAS_UNKNOWN in decision.reasons


# ---------------------------------------------------------------------------- pre-scale rule


@pytest.mark.parametrize(
    ("case", "rate", "peak", "expected_target"),
    [
        ("3x the current load within 30 min: the peak's need + 50 %", 40.0, (120.0, 150.0), 18),
        ("5x: a larger proposal, capped by max replicas", 40.0, (400.0, 460.0), 40),
        ("2.9x: no proposal", 40.0, (116.0, 150.0), None),
        ("an idle pool is compared with its min capacity, not ~0", 0.5, (30.0, 40.0), None),
    ],
)
def test_it_proposes_a_pre_scale_at_3x_within_30_minutes(case, rate, peak, expected_target):
    decision = plan(inputs(signals(ready=2, rate=rate), lead=(rate, rate), peak=peak), POOL, good_state())
    proposal = decision.prescale
    assert (proposal.target_replicas if proposal else None) == expected_target, case
    if proposal:
        assert proposal.ratio >= 3.0 and proposal.horizon_s == 1800.0
        assert proposal.warm_pool_replicas == -(-peak[0] // 10.0)
        assert p.PRESCALE in decision.reasons


@pytest.mark.parametrize(
    ("case", "lead", "peak", "recent_peak"),
    [
        # code surge 10:5 (bench/headroom_suite.py) minute 24: a 15-s lull inside a surge of 50-70 req/s
        # made a 41-replica pre-scale that held 41 replicas for the 30 minutes after the surge ended.
        ("a lull inside a burst: the peak is the lead-time forecast's level", (68.0, 90.0), (68.0, 90.0), 50.0),
        ("after a burst: the long forecast echoes what the pool served minutes ago", (10.0, 20.0), (80.0, 120.0), 90.0),
    ],
)
def test_it_makes_no_pre_scale_for_a_burst_the_pool_is_in_or_just_had(case, lead, peak, recent_peak):
    decision = plan(inputs(signals(ready=2, rate=5.7), lead=lead, peak=peak, recent_peak=recent_peak), POOL,
                    good_state(2))
    assert decision.prescale is None, case
    # The same long forecast with a quiet past and a quiet next two minutes is a peak to warm up for.
    quiet = plan(inputs(signals(ready=2, rate=5.7), lead=(6.0, 8.0), peak=peak, recent_peak=8.0), POOL,
                 good_state(2))
    assert quiet.prescale is not None and quiet.prescale.forecast_peak_rps == peak[0], case


def test_a_pre_scale_proposal_is_not_made_again_every_tick():
    sig = signals(ready=2, rate=40.0)
    first = plan(inputs(sig, lead=(40.0, 40.0), peak=(120.0, 150.0)), POOL, good_state())
    assert first.prescale.target_replicas == 18
    # Made (and then approved or rejected): the next ticks inside the cooldown propose nothing.
    again = plan(inputs(sig, lead=(40.0, 40.0), peak=(120.0, 150.0), now=NOW + 15), POOL, first.state)
    assert again.prescale is None and p.PRESCALE_COOLDOWN in again.reasons
    # A forecast that asks for more than the last proposal plus its buffer is news.
    larger = plan(inputs(sig, lead=(40.0, 40.0), peak=(300.0, 350.0), now=NOW + 30), POOL, again.state)
    assert larger.prescale.target_replicas == 40
    # After the cooldown the same forecast is proposed again.
    later = plan(inputs(sig, lead=(40.0, 40.0), peak=(300.0, 350.0), now=NOW + 30 + POOL.prescale_cooldown_s),
                 POOL, larger.state)
    assert later.prescale is not None
    restored = PlannerState.from_dict(json.loads(json.dumps(larger.state.to_dict())))
    assert restored == larger.state and restored.last_prescale_target == 40


def test_an_old_saved_state_still_loads():
    old = {"hpa": {}, "last_known_at_s": NOW - 15, "last_good_target": 6, "recommendations": [[NOW - 30, 6]],
           "scale_events": [], "capacity_correction": 0.9, "last_prescale_at_s": None}
    state = PlannerState.from_dict(old)
    assert state.last_prescale_target is None and state.capacity_correction == 0.9


def test_it_makes_no_proposal_on_unknown_load():
    decision = plan(inputs(signals(ready=2, rate=None), peak=(300.0, 400.0)), POOL, good_state())
    assert decision.prescale is None


# ---------------------------------------------------------------------------- latency correction


@pytest.mark.parametrize(
    ("case", "rate", "ttft_p95", "direction"),
    [
        ("slower than the profile expects at this load: capacity goes down", 60.0, 2.0, -1),
        ("faster than expected under real load: capacity goes up", 60.0, 0.3, 1),
        ("light load says nothing", 10.0, 0.1, 0),
        ("over the SLO even at light load: capacity goes down", 10.0, 3.0, -1),
        ("overloaded past the stated capacity: the latency is the queue's, nothing is learned", 120.0, 5.0, 0),
    ],
)
def test_it_corrects_capacity_by_observed_latency(case, rate, ttft_p95, direction):
    state = dataclasses.replace(good_state(), ready_since=(8, NOW - 400))  # the 8 replicas served the whole latency window
    decision = plan(inputs(signals(ready=8, rate=rate, ttft_p95=ttft_p95)), POOL, state)
    change = decision.capacity_per_replica_rps - POOL.capacity_rps_per_replica
    assert (change > 0) - (change < 0) == direction, case
    assert POOL.correction_min * 10 <= decision.capacity_per_replica_rps <= POOL.correction_max * 10


def test_it_learns_nothing_from_latency_served_by_fewer_replicas_than_are_ready_now():
    # A surge: 4 replicas ran a backlog for a minute, 4 more just became ready. The window's TTFT (2 s) is
    # the backlog's, served by 4; divided by the 8 ready now it reads as half the capacity per replica.
    state = dataclasses.replace(good_state(), ready_since=(4, NOW - 400))
    slow = inputs(signals(ready=8, rate=60.0, ttft_p95=2.0))
    decision = plan(slow, POOL, state)
    assert decision.capacity_per_replica_rps == pytest.approx(POOL.capacity_rps_per_replica)
    assert decision.state.ready_since == (8, NOW)
    # Once the 8 have served a whole latency window (60 s, the queries' rate window), latency counts again.
    later = plan(dataclasses.replace(slow, now_s=NOW + 45), POOL, decision.state)
    assert later.capacity_per_replica_rps == pytest.approx(POOL.capacity_rps_per_replica)
    held = plan(dataclasses.replace(slow, now_s=NOW + 60), POOL, later.state)
    assert held.capacity_per_replica_rps < POOL.capacity_rps_per_replica
    assert PlannerState.from_dict(held.state.to_dict()).ready_since == (8, NOW)  # survives a restart


def _linear_latency(share: float) -> float:
    return 0.2 + 0.8 * share


def _steep_latency(share: float) -> float:
    # Flat while the batch has room, then a queue's knee: 0.2 s unloaded, the SLO (1 s) at capacity.
    return 0.2 + 0.8 * (share / (1.1 - share)) / 10.0


# The steep pool's profile states its shape, as a load test at the stated capacity would measure it.
STEEP_CURVE = tuple((share, _steep_latency(share)) for share in (0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95))


@pytest.mark.parametrize("truth", [0.8, 1.0, 1.2])
@pytest.mark.parametrize(("shape", "curve"), [(_linear_latency, ()), (_steep_latency, STEEP_CURVE)],
                         ids=["linear", "steep-near-saturation"])
def test_the_capacity_correction_converges_to_the_true_capacity(truth, shape, curve):
    # 10 ready replicas stated at 10 req/s each that really serve `truth` x 10; the load swings
    # between 55 % and 95 % of the true capacity over an hour; the latency has 10 % noise.
    pool = dataclasses.replace(POOL, latency_curve=curve, slo_latency_s=1.0, unloaded_latency_s=0.2)
    rng = np.random.default_rng(7)
    state, corrections = PlannerState(), []
    for tick in range(2000):
        share = 0.75 + 0.2 * math.sin(2 * math.pi * tick / 240) + rng.uniform(-0.05, 0.05)
        latency = shape(share) * math.exp(rng.normal(0.0, 0.1))
        sig = signals(ready=10, rate=share * truth * 10.0 * 10, ttft_p95=latency)
        state = plan(inputs(sig, lead=None, now=NOW + 15 * tick), pool, state).state
        corrections.append(state.capacity_correction)
    settled = float(np.mean(corrections[-500:]))  # the last two hours
    assert abs(settled / truth - 1) < 0.05, (truth, settled)


def test_a_correction_at_its_floor_rises_again_when_latency_says_so():
    # A burst taught the correction 0.5; the pool was then sized on half its stated capacity, so it
    # runs at 45 % of that (90 % of what it believes in). Latency there is what the stated capacity
    # predicts at 45 %: the pool has more capacity than believed, and the correction comes back up.
    # (Gated on the stated capacity's load, it stayed at its floor for good.)
    state = dataclasses.replace(good_state(), capacity_correction=POOL.correction_min)
    for tick in range(200):
        sig = signals(ready=10, rate=0.45 * 10.0 * 10, ttft_p95=p.expected_latency_s(POOL, 0.45))
        state = plan(inputs(sig, lead=None, now=NOW + 15 * tick), POOL, state).state
    assert state.capacity_correction > 0.9, state.capacity_correction


def test_the_pool_is_planned_at_its_capacity_utilisation():
    # 60 req/s forecast at 10 req/s a replica: 6 replicas at full use, 8 at 80 %.
    for utilisation, expected in ((1.0, 6), (0.8, 8)):
        pool = dataclasses.replace(POOL, capacity_utilisation=utilisation)
        decision = plan(inputs(signals(ready=6, rate=40.0), lead=(50.0, 60.0)), pool, good_state(target=6))
        assert decision.target_replicas == expected, (utilisation, decision.reasons)
        assert decision.capacity_per_replica_rps == pytest.approx(10.0 * utilisation)


# ---------------------------------------------------------------------------- replicas only where they help


def _prefill_bound(queue_time: float) -> PoolSignals:
    """10 replicas at 60 % of their stated capacity; the p95 TTFT is 1.4 s, over the 1-s SLO."""
    return dataclasses.replace(signals(ready=10, rate=0.6 * 10.0 * 10), ttft_p95_s=fresh(1.4),
                               queue_time_p95_s=fresh(queue_time))


def test_latency_that_load_does_not_explain_teaches_the_correction_nothing():
    # Long prompts: slow first tokens while nothing waits (queue time 20 ms). More replicas cannot
    # fix a prefill, so the believed capacity stays and the target does not grow.
    state = good_state()
    for tick in range(40):
        decision = plan(inputs(_prefill_bound(0.02), lead=None, now=NOW + 15 * tick), POOL, state)
        state = decision.state
    assert state.capacity_correction == pytest.approx(1.0)
    assert decision.target_replicas <= 10
    # The same latency with requests waiting half a second before their prefill is a capacity shortfall.
    state = good_state()
    for tick in range(40):
        state = plan(inputs(_prefill_bound(0.5), lead=None, now=NOW + 15 * tick), POOL, state).state
    assert state.capacity_correction < 0.8
    # So is a full KV cache (admissions wait for blocks), even before the queue time shows it.
    state = good_state()
    for tick in range(40):
        sig = dataclasses.replace(_prefill_bound(0.02), kv_cache_usage=fresh(0.97))
        state = plan(inputs(sig, lead=None, now=NOW + 15 * tick), POOL, state).state
    assert state.capacity_correction < 0.8


def test_the_profiles_latency_at_capacity_can_be_above_the_slo():
    # A pool whose load test measured 1.5 s at its stated capacity (prompts alone miss 1 s): at 60 %
    # load 1.2 s is what the profile expects, so the correction holds.
    pool = dataclasses.replace(POOL, capacity_latency_s=1.5, unloaded_latency_s=0.9)
    assert p.expected_latency_s(pool, 1.0) == 1.5 and p.expected_latency_s(pool, 0.5) == pytest.approx(1.2)
    state = good_state()
    for tick in range(40):
        sig = dataclasses.replace(signals(ready=10, rate=0.5 * 10.0 * 10), ttft_p95_s=fresh(1.2))
        state = plan(inputs(sig, lead=None, now=NOW + 15 * tick), pool, state).state
    assert state.capacity_correction == pytest.approx(1.0, abs=0.02)


# ---------------------------------------------------------------------------- state


def test_its_state_survives_a_round_trip_through_json():
    decision = plan(inputs(signals(ready=4, queue=80.0)), POOL, good_state())
    state = decision.state
    restored = PlannerState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored == state
    again = plan(inputs(signals(ready=8), now=NOW + 15), POOL, restored)
    assert again == plan(inputs(signals(ready=8), now=NOW + 15), POOL, state)


def test_it_imports_nothing_from_django_or_celery():
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(p.__file__).read_text())
    modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in modules if m.split(".")[0] in {"django", "celery", "controlplane"}]


# ---------------------------------------------------------------------------- the lead-time forecast's trend


def _trend_case(values: list[float], horizon: int) -> float:
    from scaling.engine.forecast import damped_trend

    return float(damped_trend(np.asarray(values, dtype=float), horizon)[-1])


@pytest.mark.parametrize(
    ("case", "values", "horizon", "low", "high"),
    [
        ("flat: the level, no trend", [5.0] * 30, 2, 5.0, 5.0),
        ("a ramp of +1 a step: ahead of the last rate, short of the undamped line",
         [float(v) for v in range(60)], 2, 59.5, 61.0),
        ("the damping bounds its reach: at most phi / (1 - phi) = 9 slopes past the level however far",
         [float(v) for v in range(60)], 1000, 62.0, 59.0 + 9.0),
        ("a fall is extrapolated but never below zero", [float(v) for v in range(40, 0, -4)], 30, 0.0, 0.0),
        ("a gap carries the state: the same forecast as without the gap",
         [float(v) for v in range(20)] + [math.nan], 2, _trend_case([float(v) for v in range(20)], 2) * 0.999,
         _trend_case([float(v) for v in range(20)], 2) * 1.001),
        ("one value: persistence", [7.0], 4, 7.0, 7.0),
    ],
)
def test_the_trend_forecast_extrapolates_a_damped_slope(case, values, horizon, low, high):
    assert low <= _trend_case(values, horizon) <= high, case


def test_the_trend_forecast_is_causal_and_calibrated():
    from scaling.engine.forecast import METHODS, forecast, forecast_path
    from scaling.engine.rate_series import from_values

    assert "trend" in METHODS
    rng = np.random.default_rng(0)
    values = np.concatenate([np.full(40, 10.0), np.linspace(10, 50, 20)]) + rng.normal(0, 1, 60)
    whole = forecast_path(from_values(values, 60.0), 120.0, "trend")
    cut = forecast_path(from_values(values[:45], 60.0), 120.0, "trend")
    assert np.allclose(whole.expected[:45], cut.expected) and np.allclose(whole.p90[:45], cut.p90)
    made = forecast(from_values(values, 60.0), 120.0, "trend")
    assert made.p90_rps >= made.expected_rps > values[-1]  # a ramp: ahead of the last rate


@pytest.mark.parametrize(
    ("case", "values", "low", "high"),
    [
        ("on/off traffic (a burst every third minute): heavy smoothing, near the mean level of 30",
         [0.0, 0.0, 90.0] * 20, 20.0, 40.0),
        ("a clean ramp of +1 a step: its own errors pick a close-tracking slope (the next two steps: 61)",
         [float(v) for v in range(60)], 60.0, 61.5),
        ("flat: the level", [12.0] * 40, 12.0 - 1e-9, 12.0 + 1e-9),
    ],
)
def test_the_trend_method_chooses_its_constants_by_its_own_errors(case, values, low, high):
    from scaling.engine.forecast import forecast
    from scaling.engine.rate_series import from_values

    made = forecast(from_values(np.asarray(values), 60.0), 120.0, "trend")
    assert low <= made.expected_rps <= high, (case, made.expected_rps)


# ---------------------------------------------------------------------------- unknown load, staleness timers


def test_busy_replicas_with_a_failing_rate_query_do_not_drain():
    # Ten busy replicas, nothing waiting, the rate query failing: unknown load, not zero load.
    state, targets, alerts = good_state(target=10), [], []
    for tick in range(30):  # 7.5 minutes
        decision = plan(inputs(signals(ready=10, queue=0.0, rate=None), lead=None, now=NOW + 15 * tick), POOL, state)
        state = decision.state
        targets.append(decision.target_replicas)
        alerts.append(decision.staleness_alert)
    assert set(targets) == {10} and p.RATE_UNKNOWN in decision.reasons
    assert alerts[-1] and not alerts[0]  # the staleness alert is raised once it lasts


def test_the_queue_still_scales_up_while_the_rate_is_unknown():
    decision = plan(inputs(signals(ready=4, queue=80.0, rate=None), lead=None), POOL, good_state(target=4))
    assert decision.target_replicas > 4 and decision.hold


@pytest.mark.parametrize(
    ("seconds_after_last_tick", "hold", "fallback", "alert"),
    [(10, True, False, False), (45, True, True, False), (75, True, True, True)],
)
def test_the_staleness_timers_run_from_the_last_fresh_sample(seconds_after_last_tick, hold, fallback, alert):
    # The last good tick read samples already 20 s old; then the reads fail.
    known = plan(inputs(signals(ready=4, age_s=20.0), lead=None), POOL, good_state())
    later = plan(inputs(signals(ready=4, queue=None, rate=None), lead=None, now=NOW + seconds_after_last_tick),
                 POOL, known.state)
    assert later.signals_unknown_for_s == pytest.approx(seconds_after_last_tick + 20.0)
    assert (later.hold, p.SIGNALS_FALLBACK in later.reasons, later.staleness_alert) == (hold, fallback, alert)


@pytest.mark.parametrize(
    ("case", "series", "expected"),
    [
        # 4 ready, 2 export an empty queue: the 2 silent ones count at target, (0 + 0 + 5 + 5) / 4 = 2.5
        # per replica asks for 2 (the HPA's rule), not for the minimum that dropping them would give.
        ("silent replicas count at target on a scale-down", (0.0, 0.0), 2),
        # 4 ready, 2 export 20 waiting each: the silent ones count as empty, 40 / 4 = 10 per replica.
        ("silent replicas count as empty on a scale-up", (20.0, 20.0), 8),
    ],
)
def test_replicas_without_a_series_are_missing_not_dropped(case, series, expected):
    sig = dataclasses.replace(signals(ready=4, queue=None), waiting_per_ready_replica=tuple(fresh(v) for v in series))
    decision = plan(inputs(sig, lead=None), POOL, good_state(target=4))
    assert decision.term(p.REACTIVE).replicas == expected, case


def test_under_a_fallback_the_correction_learns_from_the_rate_the_pool_carried_not_the_routes_demand():
    # 10 replicas stated at 10 req/s, exactly right. The route's demand is 90 req/s but a fallback takes
    # two thirds: the pool carries 30 req/s, and its latency is the profile's at 30 % load. Read against
    # the demand (90 % load) that latency looks far too fast, and the correction would climb.
    carried = 0.3 * 10.0 * 10
    state = good_state()
    for tick in range(40):
        sig = signals(ready=10, rate=90.0, ttft_p95=p.expected_latency_s(POOL, 0.3))
        served = dataclasses.replace(inputs(sig, lead=None, now=NOW + 15 * tick), served_rate=fresh(carried))
        decision = plan(served, POOL, state)
        state = decision.state
    assert state.capacity_correction == pytest.approx(1.0, abs=0.02)
    assert decision.target_replicas >= 9  # planned for the demand (90 req/s at 10 a replica), not the 30 carried
    misread = good_state()
    for tick in range(40):
        sig = signals(ready=10, rate=90.0, ttft_p95=p.expected_latency_s(POOL, 0.3))
        misread = plan(inputs(sig, lead=None, now=NOW + 15 * tick), POOL, misread).state
    assert misread.capacity_correction > 1.1  # what the loop learned before it passed the carried rate


# ---------------------------------------------------------------------------- a reviewer's scenarios


@pytest.mark.parametrize("before", [3.5e-18, 1e-300])
def test_a_surge_out_of_an_idle_minute_on_a_slow_pool_is_planned_not_a_crash(before):
    # An idle pool's rate query leaves a float residue (three terms that cancel); a surge a minute later,
    # raised to the power of a 20-minute cold start, is past a float's range: the growth is capped instead.
    pool = dataclasses.replace(POOL, cold_start_p95_s=1200.0)
    decision = plan(dataclasses.replace(inputs(signals(ready=4, rate=300.0), lead=None), rate_trend_rps=(before, 300.0)),
                    pool, good_state(target=4))
    assert p.rate_growth((before, 300.0), pool) == pool.rate_trend_cap
    assert decision.term(p.REACTIVE_RATE).numbers["rate_growth"] == pool.rate_trend_cap
    assert decision.target_replicas == 8  # +100 % a tick toward 300 x 2.25 / 10


@pytest.mark.parametrize(
    ("case", "window", "lead", "recent_peak", "replicas", "source"),
    [
        ("its own expected rate first", ScheduleWindow(NOW - 100, NOW + 3600, 0.4, 100.0, last_peak_rps=200.0),
         (50.0, 60.0), 80.0, 14, None),
        ("then the forecast's peak", ScheduleWindow(NOW - 100, NOW + 3600, 0.4, last_peak_rps=200.0),
         (50.0, 60.0), 80.0, 7, None),
        # Signals lost for 45 minutes: no forecast (history stopped) and no recent peak (its 30 minutes are empty).
        ("no forecast: the same window a week ago", ScheduleWindow(NOW - 100, NOW + 3600, 0.4, last_peak_rps=200.0),
         None, None, 28, "from_last_occurrence"),
        ("then the recent peak", ScheduleWindow(NOW - 100, NOW + 3600, 0.4), None, 80.0, 12, "from_recent_peak"),
        ("a week-old peak that is no rate is skipped", ScheduleWindow(NOW - 100, NOW + 3600, 0.4, last_peak_rps=math.nan),
         None, 80.0, 12, "from_recent_peak"),
    ],
)
def test_a_scheduled_windows_rate_comes_from_the_best_source_there_is(case, window, lead, recent_peak, replicas, source):
    decision = plan(inputs(windows=(window,), lead=lead, recent_peak=recent_peak), POOL, good_state())
    term = decision.term(p.SCHEDULED)
    assert term.replicas == replicas, case
    assert {name for name in ("from_last_occurrence", "from_recent_peak") if term.numbers[name]} == \
        ({source} if source else set()), case


def test_a_window_still_pre_scales_after_a_long_outage():
    # Prometheus went down 45 minutes ago, before the 09:00 window: the fallback has the schedule, sized
    # on that window's peak a week ago, not the pool's last good target alone.
    window = ScheduleWindow(NOW + 60, NOW + 3600, 0.4, last_peak_rps=200.0)
    state = good_state(target=6, known_at=NOW - 2700)
    decision = plan(inputs(signals(ready=6, queue=None, rate=None), lead=None, windows=(window,)), POOL, state)
    assert p.SIGNALS_FALLBACK in decision.reasons and decision.reasons[0] == p.SCHEDULED
    assert decision.term(p.SCHEDULED).replicas == 28 and decision.target_replicas == 12  # +100 % a tick


def test_a_clock_stepped_back_neither_freezes_scale_ups_nor_silences_the_staleness_alert():
    # A worker whose clock ran 10 minutes ahead recorded a +4 scale event; the ticking worker's clock is right.
    ahead = p.record_scale_event(good_state(target=8), NOW + 600, 4)
    surge = inputs(signals(ready=8, rate=300.0, queue=400.0), lead=None)
    first = plan(surge, POOL, ahead)
    assert first.target_replicas == 8  # the +4 counts as made now: 4 + 4 is this period's limit
    # A period later the limit is the current count's again (it stayed in force for the 10 minutes before).
    assert plan(dataclasses.replace(surge, now_s=NOW + 15), POOL, first.state).target_replicas == 16
    # Signals last known "in the future", then lost: the alert runs from now, and fires 90 s later.
    known_later = dataclasses.replace(good_state(target=4), last_known_at_s=NOW + 300)
    lost = plan(inputs(signals(ready=4, queue=None, rate=None), lead=None), POOL, known_later)
    assert lost.signals_unknown_for_s == 0.0 and lost.state.last_known_at_s == NOW
    later = plan(inputs(signals(ready=4, queue=None, rate=None), lead=None, now=NOW + 90), POOL, lost.state)
    assert later.staleness_alert


def test_a_known_rate_still_adds_replicas_while_the_queue_is_unknown():
    # vLLM's queue series stopped (a scrape target down) while the gateway's rate is read: 150 req/s on 5
    # replicas. The HPA scales up on the metrics it can still read; the hold keeps it from scaling down.
    state = good_state(target=5, known_at=NOW - 120)
    surge = plan(inputs(signals(ready=5, queue=None, rate=150.0), lead=None), POOL, state)
    assert p.SIGNALS_FALLBACK in surge.reasons and surge.reasons[0] == p.REACTIVE_RATE
    assert surge.target_replicas == 10  # toward 15, +100 % a tick
    quiet = plan(inputs(signals(ready=5, queue=None, rate=5.0), lead=None), POOL, state)
    assert quiet.target_replicas == 5  # the rate says 1; unknown load never scales down


def test_the_busy_share_onset_is_seen_where_the_cluster_reads_rates_over_15_s():
    pool = dataclasses.replace(POOL, busy_share_target=0.3, latency_window_s=15.0)
    state = minute_of_work(1.2, (45.0, 30.0, 15.0))
    sig = dataclasses.replace(signals(ready=4, desired=4), work_share=fresh(0.8))  # 3.2 busy against 1.2: an onset
    assert plan(inputs(sig, lead=None), pool, state).term(p.REACTIVE_BUSY).replicas == 11


def test_a_correction_outside_the_pools_bounds_now_is_brought_within_them():
    # Learned 2.4 under an override of correction_max 3; the override is gone (1.0): sized on 1.0 at once.
    pool = dataclasses.replace(POOL, correction_max=1.0)
    state = dataclasses.replace(good_state(target=8), capacity_correction=2.4)
    decision = plan(inputs(signals(ready=8, rate=200.0), lead=None), pool, state)
    assert decision.capacity_per_replica_rps == pytest.approx(10.0)
    assert decision.term(p.REACTIVE_RATE).replicas == 20 and decision.state.capacity_correction == 1.0
