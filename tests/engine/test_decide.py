"""The one decide step's pieces: history bins, arriving credit, persisted state, approvals in replay."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from scaling.engine import decide, planner
from scaling.engine.decide import ApprovalModel, SeasonalCache
from scaling.engine.signals import PoolSignals, Reading


@pytest.mark.parametrize(
    ("times", "rates", "expected"),
    [
        ([15, 30, 45, 60, 75, 90, 105, 120], [1, 1, 1, 1, 2, 2, 2, 2], [1.0, 2.0]),  # bins end now: (0, 60], (60, 120]
        ([30, 90, 120], [4, math.nan, 6], [4.0, 6.0]),  # an unknown rate is no sample
        ([110, 120], [3, 5], [math.nan, 4.0]),  # a bin with no sample is a gap, not zero
        ([0, 60], [9, 7], [7.0, math.nan]),  # the sample at `since` is outside
    ],
)
def test_it_bins_rates_by_time_ending_now(times, rates, expected):
    binned = decide.binned_rates(np.array(times, float), np.array(rates, float), 0.0, 120.0, 60.0)
    np.testing.assert_array_equal(binned, np.array(expected))


@pytest.mark.parametrize(
    ("requested", "arriving", "expected"),
    [
        ([], 0, ()),
        ([100.0, 150.0], 2, (40.0, 90.0)),  # each at its own request + cold-start p95 (90 s), now 150
        ([0.0, 100.0, 150.0], 2, (40.0, 90.0)),  # the newest are the ones still starting
        ([100.0], 3, (40.0, 90.0, 90.0)),  # unknown ones as just asked for
        ([0.0], 1, (0.0,)),  # overdue: expected now
    ],
)
def test_it_credits_each_arriving_replica_at_its_request(requested, arriving, expected):
    assert decide.arriving_ready_in(requested, arriving, 150.0, 90.0) == expected


def test_old_planner_memory_still_loads():
    """A state saved before the decide step (no pre-scale target, ISO cache time) loads as it was."""
    old_state = {"hpa": {"recommendations": [[1.0, 3]]}, "last_known_at_s": 10.0, "last_good_target": 3,
                 "recommendations": [[1.0, 3]], "scale_events": [], "capacity_correction": 0.8,
                 "last_prescale_at_s": None}
    cache = {"made_at": "2026-11-30T12:00:00+00:00", "expected": 4.0, "p90": 6.0}
    state = decide.decide_state_from(old_state, cache)
    assert state.planner.capacity_correction == 0.8 and state.planner.last_good_target == 3
    assert state.seasonal == SeasonalCache(1_796_040_000.0, 4.0, 6.0)
    assert decide.seasonal_dict(state.seasonal) == cache
    assert decide.decide_state_from({}, {}) == decide.DecideState()


def test_the_live_and_the_replayed_pool_plan_differ_only_by_their_inputs():
    common = dict(capacity_rps_per_replica=5.0, min_replicas=1, max_replicas=10, slo_latency_s=1.0,
                  unloaded_latency_s=0.2, cold_start_p95_s=None)
    live = decide.pool_plan(slo_percentile=0.95, **common)
    replayed = decide.pool_plan(slo_percentile=0.99, latency_curve=((0.5, 0.4),), **common)
    assert (live.correction_max, replayed.correction_max) == (1.0, 1.5)  # a curve may raise the capacity
    assert (live.slo_signal, replayed.slo_signal) == ("ttft_p95_s", "ttft_p99_s")
    assert live.decision_delay_s == replayed.decision_delay_s == 30.0 and live.cold_start_p95_s == 90.0


class _History:
    def __init__(self, floor: int = 0) -> None:
        self.floor = floor

    def rates_since(self, since_s: float) -> tuple[np.ndarray, np.ndarray]:
        times = np.arange(0.0, 1800.0, 15.0)
        return times[times > since_s], np.full((times > since_s).sum(), 10.0)

    def requested_at(self) -> list[float]:
        return []

    def approved_floor(self, now_s: float) -> int:
        return self.floor


def _signals(rate: float, replicas: int) -> PoolSignals:
    fresh = lambda value: Reading(float(value), 0.0)  # noqa: E731
    return PoolSignals(pool="p", queue_depth=fresh(0), request_rate_rps=fresh(rate), ready_replicas=fresh(replicas),
                       desired_replicas=fresh(replicas), arriving_replicas=fresh(0))


def test_a_step_forecasts_from_the_history_and_caches_the_30_minute_forecast():
    # (a scale-up limit loose enough for the approved floor of 7 to pass from 2 in one period)
    pool = planner.PoolPlan(capacity_rps_per_replica=5.0, max_replicas=20, scale_up_percent=900.0)
    step = decide.decide(1800.0, _signals(10.0, 2), pool, decide.DecideState(), _History(floor=7))
    assert step.inputs.forecast_lead is not None and abs(step.inputs.forecast_lead.expected_rps - 10.0) < 0.5
    assert step.inputs.recent_peak_rps == 10.0 and step.inputs.approved_floor == 7
    assert step.state.seasonal.made_at_s == 1800.0 and step.decision.target_replicas == 7
    # Within 5 minutes the cached 30-minute forecast is reused.
    again = decide.decide(1815.0, _signals(10.0, 7), pool, step.state, _History())
    assert again.state.seasonal == step.state.seasonal


def _decision(target: int, current: int, binding: str = planner.REACTIVE) -> planner.Decision:
    return planner.Decision(target, current, current, 0, (), binding, (binding,), False, 0.0, False, 5.0, None,
                            planner.PlannerState())


@pytest.mark.parametrize(
    ("binding", "current", "target", "at_once"),
    [
        (planner.REACTIVE, 3, 7, 7),  # reactive, +4: within the guardrail
        (planner.REACTIVE, 3, 8, 7),  # +5: the guardrail's share now, the last one by a person
        (planner.PREDICTIVE, 3, 4, 4),  # the forecast a cold start ahead: the same guardrail
        (planner.PREDICTIVE, 3, 9, 7),
        (planner.SCHEDULED, 3, 5, 3),  # a known peak: a person
        (planner.REACTIVE, 5, 4, 4),  # the planner's scale-downs are stabilized and keep the warm floor
    ],
)
def test_replayed_approvals_follow_the_live_policy(binding, current, target, at_once):
    approvals = ApprovalModel(approval_delay_s=60.0)
    applied = approvals.apply(0.0, _decision(target, current, binding), current, 1800.0, 1, 20)
    assert applied == at_once
    if at_once != target:  # the rest waits for the person, and the same decision again asks nothing new
        assert approvals.apply(30.0, _decision(target, applied, binding), applied, 1800.0, 1, 20) == applied
        assert approvals.apply(60.0, _decision(target, applied, binding), applied, 1800.0, 1, 20) == target


def test_replayed_scale_downs_wait_for_a_person_when_the_policy_says_so():
    approvals = ApprovalModel(approval_delay_s=60.0, auto_approve_scale_down=False)
    assert approvals.apply(0.0, _decision(4, 5), 5, 1800.0, 1, 20) == 5
    assert approvals.apply(60.0, _decision(4, 5), 5, 1800.0, 1, 20) == 4


def test_a_person_answers_the_newest_proposal_at_the_first_ones_time_and_only_if_it_still_holds():
    approvals = ApprovalModel(approval_delay_s=60.0, reactive_max_step=0, auto_approve_scale_down=False)
    approvals.apply(0.0, _decision(10, 3), 3, 1800.0, 1, 20)
    approvals.apply(30.0, _decision(12, 3), 3, 1800.0, 1, 20)  # replaces it
    assert approvals.apply(60.0, _decision(12, 3), 3, 1800.0, 1, 20) == 12
    approvals.apply(70.0, _decision(8, 12), 12, 1800.0, 1, 20)  # a scale-down waits...
    assert approvals.apply(130.0, _decision(6, 6), 6, 1800.0, 1, 20) == 6  # ...and 8 is no longer down from 6


def test_default_replay_guardrail_is_the_live_default():
    from controlplane.config import ApprovalPolicy

    assert ApprovalModel().reactive_max_step == ApprovalPolicy().reactive_max_step
    assert ApprovalModel().auto_approve_scale_down == ApprovalPolicy().auto_approve_scale_down
    assert ApprovalModel().reactive_max_percent == ApprovalPolicy().reactive_max_percent


def test_a_guardrail_as_a_share_of_the_pool_approves_a_doubling_at_once():
    # +100 %: a 12-replica pool may double without a person (the HPA's own max(4 pods, 100 %)); +4 would
    # have run 16 and left 8 to a person.
    approvals = ApprovalModel(approval_delay_s=60.0, reactive_max_percent=100)
    assert approvals.apply(0.0, _decision(24, 12), 12, 1800.0, 1, 40) == 24
    assert approvals.apply(15.0, _decision(40, 24), 24, 1800.0, 1, 40) == 40
    # Below the step, the step still holds: 1 replica may add 4.
    assert ApprovalModel(reactive_max_percent=100).apply(0.0, _decision(9, 1), 1, 1800.0, 1, 40) == 5
    # The default is that rule; the step alone (null) would have run 16 and left 8 to a person.
    assert ApprovalModel().apply(0.0, _decision(24, 12), 12, 1800.0, 1, 40) == 24
    assert ApprovalModel(reactive_max_percent=None).apply(0.0, _decision(24, 12), 12, 1800.0, 1, 40) == 16


class _Recorded:
    """A history of 15-s samples, as the replay keeps it."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.rates: list[float] = []

    def rates_since(self, since_s: float) -> tuple[np.ndarray, np.ndarray]:
        times = np.array(self.times)
        keep = times > since_s
        return times[keep], np.array(self.rates)[keep]

    def requested_at(self) -> list[float]:
        return []

    def approved_floor(self, now_s: float) -> int:
        return 0


def test_the_incremental_forecasts_are_the_batch_forecasts_of_the_binned_history():
    """Ticks every 15 s for 5 hours: the lead forecaster, fed one 1-minute bin as each completes, says
    what `forecast_path` says on the whole binned history; the 30-minute one likewise on 10-minute bins."""
    from scaling.engine.forecast import forecast_path
    from scaling.engine.rate_series import from_values

    pool = planner.PoolPlan(capacity_rps_per_replica=5.0, max_replicas=20)
    rng = np.random.default_rng(4)
    history, state = _Recorded(), decide.DecideState()
    for tick in range(1, 5 * 240 + 1):
        now = tick * 15.0
        rate = float(20 + 10 * math.sin(now / 1800) + rng.normal(0, 2)) if tick % 37 else math.nan
        lead, peak, recent, state = decide.forecasts(history, pool, now, rate, state)
        history.times.append(now)
        history.rates.append(rate)
    bins = decide.binned_rates(np.array(history.times), np.array(history.rates), -3600.0, now, 60.0)
    batch = forecast_path(from_values(bins, 60.0), 120.0, decide.LEAD_METHOD, decide.LEAD_MEMORY)
    assert lead is not None and lead.expected_rps == pytest.approx(batch.expected[-1], rel=1e-9)
    assert lead.p90_rps == pytest.approx(batch.p90[-1], rel=1e-9)
    np.testing.assert_array_equal(recent, bins[-60:])
    coarse = decide.binned_rates(np.array(history.times), np.array(history.rates), now - decide.SEASONAL_HISTORY_S,
                                 now, 600.0)
    far = forecast_path(from_values(coarse, 600.0), 1800.0, decide.SEASONAL_METHOD)
    assert state.seasonal.made_at_s == now and state.seasonal.expected_rps == pytest.approx(far.expected[-1], rel=1e-9)


def test_a_history_that_stopped_arriving_is_no_forecast_until_it_arrives_again():
    pool = planner.PoolPlan(capacity_rps_per_replica=5.0, max_replicas=20)
    history, state = _Recorded(), decide.DecideState()
    for tick in range(1, 200):
        now = tick * 15.0
        rate = 10.0 if now <= 1800 or now > 2400 else math.nan  # the rate query fails for ten minutes
        lead, peak, _, state = decide.forecasts(history, pool, now, rate, state)
        history.times.append(now)
        history.rates.append(rate)
        stopped_for = now - 1800.0
        if 1800 < now <= 2400:
            assert (lead is None and peak is None) == (stopped_for > decide.HISTORY_MAX_AGE_S), now
        if now >= 2400 + 120:
            assert lead is not None and lead.expected_rps == pytest.approx(10.0, rel=0.05), now


def test_the_forecasters_state_is_kept_with_the_pool_and_loads_as_it_was():
    pool = planner.PoolPlan(capacity_rps_per_replica=5.0, max_replicas=20)
    history, state = _Recorded(), decide.DecideState()
    for tick in range(1, 400):
        history.times.append(tick * 15.0)
        history.rates.append(10.0 + tick % 7)
    lead, peak, _, state = decide.forecasts(history, pool, 400 * 15.0, 12.0, state)
    stored = decide.forecast_dict(state)
    loaded = decide.decide_state_from({}, json.loads(json.dumps(stored, allow_nan=False)))
    assert loaded.seasonal == state.seasonal and loaded.newest_rate_s == state.newest_rate_s
    assert (loaded.lead.end_s, loaded.long.end_s) == (state.lead.end_s, state.long.end_s)
    # A minute later both feed the same new bin to the same forecasters (the states advance in place).
    from_stored = decide.forecasts(history, pool, 6060.0, 12.0, loaded)[:2]
    kept = decide.forecasts(history, pool, 6060.0, 12.0, state)[:2]
    assert from_stored == kept and kept[0] is not None


def test_a_pool_whose_lead_time_changed_gets_a_forecaster_for_the_new_one():
    history, state = _Recorded(), decide.DecideState()
    for tick in range(1, 200):
        history.times.append(tick * 15.0)
        history.rates.append(10.0)
    quick = planner.PoolPlan(capacity_rps_per_replica=5.0, cold_start_p95_s=90.0)  # lead 2 minutes
    slow = planner.PoolPlan(capacity_rps_per_replica=5.0, cold_start_p95_s=270.0)  # a measured cold start: 5 minutes
    _, _, _, state = decide.forecasts(history, quick, 3000.0, 10.0, state)
    assert state.lead.forecaster.horizon == 2
    lead, _, _, state = decide.forecasts(history, slow, 3015.0, 10.0, state)
    assert state.lead.forecaster.horizon == round(slow.lead_s / 60) and lead.horizon_s == slow.lead_s


def _predictive_replicas_around_a_surge(pool: planner.PoolPlan) -> dict[int, int]:
    """The predictive term's replicas at each minute of 100 minutes of on/off traffic (a third of the
    minutes silent, the others about 5 req/s) with a 10x surge in minutes 60-70, decided every 15 s
    by the decide step with the pool at its target."""
    rng = np.random.default_rng(7)
    base = np.where(rng.random(100) < 1 / 3, 0.0, 5.0 * rng.lognormal(0.0, 0.5, 100))
    history, state, replicas = _Recorded(), decide.DecideState(), 1
    by_minute = {}
    for tick in range(1, 100 * 4):
        now = tick * 15.0
        minute = int(now // 60.0)
        rate = float(base[minute] * (10.0 if 60 <= minute < 70 else 1.0))
        signals = PoolSignals(pool="p", queue_depth=Reading(0.0, now), request_rate_rps=Reading(rate, now),
                              ready_replicas=Reading(float(replicas), now), desired_replicas=Reading(float(replicas), now),
                              arriving_replicas=Reading(0.0, now))
        step = decide.decide(now, signals, pool, state, history)
        state = step.state
        history.times.append(now)
        history.rates.append(rate)
        replicas = step.decision.target_replicas or replicas
        if tick % 4 == 0:
            by_minute[minute] = step.decision.term(planner.PREDICTIVE).replicas
    return by_minute


def test_a_surge_that_ended_stops_sizing_the_pool_once_it_is_past_the_lead_peak_window():
    """On on/off traffic the lead-time band stays as wide as the surge's errors for as long as the
    forecaster remembers them; only the peak seen lately caps it. Capped by the 30-minute peak (until
    session 12) the predictive term kept asking for the surge's size for half an hour after it."""
    pool = planner.PoolPlan(capacity_rps_per_replica=5.0, max_replicas=100)
    by_minute = _predictive_replicas_around_a_surge(pool)
    before = max(by_minute[m] for m in range(30, 60))
    in_surge = max(by_minute[m] for m in range(60, 72))
    assert in_surge > 3 * before
    settled = 80  # ten minutes after the surge
    assert max(by_minute[m] for m in range(settled, 100)) <= before
    # A 30-minute window (the old cap) still sizes for the surge there.
    old = _predictive_replicas_around_a_surge(dataclasses.replace(pool, lead_peak_window_s=1800.0))
    assert max(old[m] for m in range(settled, 100)) > 2 * before


def _rate_term_on(rates_by_minute: list[float], pool: planner.PoolPlan) -> list[planner.Term]:
    """The rate term at the last tick of each minute, decided every 15 s by the decide step."""
    history, state, terms = _Recorded(), decide.DecideState(), []
    for tick in range(1, len(rates_by_minute) * 4):
        now = tick * 15.0
        rate = rates_by_minute[int(now // 60.0)]
        step = decide.decide(now, _signals(rate, 4), pool, state, history)
        state = step.state
        history.times.append(now)
        history.rates.append(rate)
        if tick % 4 == 3:
            terms.append(step.decision.term(planner.REACTIVE_RATE))
    return terms


def test_on_a_ramp_the_decide_step_orders_for_the_rate_a_lead_time_ahead():
    """A replica asked for now serves a lead time (two minutes) from now. Ten flat minutes at 10 req/s,
    then the rate doubles each minute: the rate term plans for 1.5x the rate lately (the cap here), where
    sized for the rate already arrived it would be a doubling behind when its replicas are ready."""
    pool = planner.PoolPlan(capacity_rps_per_replica=10.0, max_replicas=100, capacity_utilisation=1.0,
                            rate_trend_cap=1.5)
    rates = [10.0] * 10 + [20.0, 40.0, 80.0]
    terms = _rate_term_on(rates, pool)
    assert [t.replicas for t in terms[:10]] == [1] * 10  # flat: the rate now
    assert [t.numbers["rate_growth"] for t in terms[:10]] == [1.0] * 10
    assert [t.replicas for t in terms[10:]] == [3, 6, 12]  # 1.5 x 20, 40, 80 req/s
    off = _rate_term_on(rates, dataclasses.replace(pool, rate_trend_cap=1.0))
    assert [t.replicas for t in off[10:]] == [2, 4, 8]


@pytest.mark.parametrize("broken", [
    {"capacity_correction": None}, {"recommendations": None}, {"hpa": None}, {"ready_since": [3]},
    {"scale_events": [["soon", 2]]},
])
def test_a_stored_state_that_does_not_load_starts_afresh_and_the_pool_is_still_planned(broken, caplog):
    """Edited by hand or cut short: before, the pool's every tick failed until someone mended the row."""
    stored = {"last_known_at_s": 10.0, "last_good_target": 3, **broken}
    state = decide.decide_state_from(stored, {"made_at": "2026-11-30T12:00:00+00:00", "expected": 4.0, "p90": 6.0})
    assert state == decide.DecideState() and "does not load" in caplog.text
    step = decide.decide(1800.0, _signals(30.0, 3), planner.PoolPlan(capacity_rps_per_replica=5.0, max_replicas=10),
                         state, _History())
    assert step.decision.target_replicas is not None and step.decision.target_replicas >= 3  # its first tick holds


@pytest.mark.parametrize("correction", [math.nan, 0.0, 7.0])
def test_a_stored_correction_that_is_no_number_in_the_bounds_is_brought_within_them(correction):
    state = decide.decide_state_from({"capacity_correction": correction}, {})
    plan = planner.PoolPlan(capacity_rps_per_replica=5.0, max_replicas=10)
    step = decide.decide(1800.0, _signals(30.0, 3), plan, state, _History())
    assert plan.correction_min <= step.state.planner.capacity_correction <= plan.correction_max
