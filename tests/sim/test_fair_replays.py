"""Issue 12 item 9, fair replays: the clairvoyant is a true bound, the baselines are tuned, ServeGen's burstiness counts."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench.tune_baselines import choose
from scaling.engine import planner
from scaling.engine.decide import ApprovalModel
from scaling.sim.config import SimConfig
from scaling.sim.fluid_mode import run_fluid_mode
from scaling.sim.policies import (
    BEST_ATTAINMENT_TOLERANCE,
    TUNED_HPA_TARGET_UTILISATION,
    TUNED_KEDA_TARGET_QUEUE,
    PolicyContext,
    bound_at,
    build_policy,
    clairvoyant,
)
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.request_mode import run_request_mode
from scaling.sim.transforms import long_prompts, surge
from scaling.sim.workload import RateTrace, Trace
from tests.sim.helpers import poisson_trace

CONFIG = SimConfig(warmup_s=300.0, max_replicas=24)


def _context(workload, config=CONFIG) -> PolicyContext:
    return PolicyContext(workload, config, lambda policy: run_request_mode(workload, config, policy))


def _surging() -> Trace:
    return surge(poisson_trace(6.0, 1800.0, prompt=1500, seed=3), 5.0, 5.0, 900.0, seed=3)


def test_where_no_pool_size_meets_the_slo_the_clairvoyant_reaches_the_best_attainment_without_running_the_maximum():
    # Prompts so long that the p99 prefill alone is over the 1-s SLO: no number of replicas meets 99 %.
    trace = long_prompts(poisson_trace(3.0, 1500.0, seed=2), 4000.0, 0.6, seed=2)
    context = _context(trace)
    at_max = run_request_mode(trace, CONFIG, StaticPolicy(CONFIG.max_replicas))
    assert at_max.slo_attainment < CONFIG.slo_objective
    policy, score = clairvoyant(context)
    assert score.slo_attainment >= at_max.slo_attainment - 0.0005
    # The old search ran the maximum (24 replicas) everywhere; the bound runs a fraction of it.
    assert score.gpu_hours < 0.5 * at_max.gpu_hours
    assert int(policy.target_by_bin.max()) < CONFIG.max_replicas
    # `static` is sized the same way: the smallest pool reaching what any size reaches.
    static = build_policy("static", context)
    assert static.replicas < CONFIG.max_replicas


def test_the_clairvoyant_at_a_lower_attainment_is_cheaper_and_reaches_it():
    context = _context(_surging())
    _, at_objective = clairvoyant(context)
    _, lower = clairvoyant(context, 0.95)
    assert at_objective.slo_attainment >= CONFIG.slo_objective
    assert lower.slo_attainment >= 0.95 and lower.gpu_hours < at_objective.gpu_hours


@pytest.mark.parametrize("name", ["keda-queue", "hpa-util", "static"])
def test_no_causal_policy_beats_the_clairvoyant_at_its_own_attainment(name):
    workload = _surging()
    context = _context(workload)
    result = run_request_mode(workload, CONFIG, build_policy(name, context))
    bound = bound_at(context, result.slo_attainment)
    assert bound.slo_attainment >= result.slo_attainment
    assert bound.gpu_hours <= result.gpu_hours


def test_the_bound_holds_where_prefill_bound_bursts_favour_holding_a_level(traces_dir):
    # The suite's long-prompt case at seed offset 10: a plan sized on each second's work chases
    # bursts one lead time ahead, and the tuned hpa-util, holding a level, beat it (25.33 against
    # 34.24 GPU-hours at 0.9685). Plans sized on 10-s work are in the family now (22.62).
    from bench.headroom_suite import workload_for

    workload = workload_for(traces_dir, "AzureLLMInferenceTrace_conv.csv", 1.0, "10:5", None, 10, (4000.0, 0.6))
    config = SimConfig.for_profile(SimConfig().profile, warmup_s=600.0)
    context = _context(workload, config)
    result = run_request_mode(workload, config, build_policy("hpa-util", context))
    bound = bound_at(context, result.slo_attainment)  # out of reach: within the plateau's last decimal
    assert bound.slo_attainment >= result.slo_attainment - BEST_ATTAINMENT_TOLERANCE
    assert bound.gpu_hours <= result.gpu_hours


def test_where_no_pool_size_meets_the_objective_the_bound_check_allows_the_plateaus_last_decimal(traces_dir):
    # The suite's long-prompt case: attainment is a plateau whose fourth decimal is a few requests
    # that any change of plan moves either way. Searched at headroom's exact 0.9804, the bound cost
    # 45.30 GPU-hours, where headroom spent 37.31 and plans at 29.4 reach 0.9802. And a bound searched
    # only under the smallest static pool reaching the attainment (82 replicas) cost 45.30 at 0.9803,
    # where the clairvoyant's own cap (94) finds 23.68: the search tries both.
    from bench.headroom_suite import workload_for
    from scaling.sim.policies.headroom import HeadroomPolicy, pool_plan_for

    workload = workload_for(traces_dir, "AzureLLMInferenceTrace_conv.csv", 1.0, "10:5", None, 0, (4000.0, 0.6))
    config = SimConfig.for_profile(SimConfig().profile, warmup_s=600.0)
    context = _context(workload, config)
    result = run_request_mode(workload, config, HeadroomPolicy(pool_plan_for(config, workload)))
    assert context.attainment_target() < config.slo_objective
    bound = bound_at(context, result.slo_attainment)
    assert bound.slo_attainment >= result.slo_attainment - BEST_ATTAINMENT_TOLERANCE
    assert bound.gpu_hours <= result.gpu_hours
    # A lower target never costs more than the clairvoyant's own (0.9823 at 43.43 GPU-hours).
    _, own = clairvoyant(context)
    assert result.slo_attainment <= own.slo_attainment and bound.gpu_hours <= own.gpu_hours


def test_the_headroom_policy_does_not_beat_the_clairvoyant_at_its_own_attainment():
    from scaling.sim.policies.headroom import HeadroomPolicy

    workload = _surging()
    context = _context(workload)
    pool = planner.PoolPlan(capacity_rps_per_replica=8.0, max_replicas=CONFIG.max_replicas, cold_start_p95_s=90.0)
    result = run_request_mode(workload, CONFIG, HeadroomPolicy(pool))
    bound = bound_at(context, result.slo_attainment)
    assert bound.slo_attainment >= result.slo_attainment and bound.gpu_hours <= result.gpu_hours


def test_the_registry_builds_the_baselines_with_their_tuned_thresholds():
    context = _context(poisson_trace(2.0, 600.0))
    assert build_policy("keda-queue", context).target_queue_per_replica == TUNED_KEDA_TARGET_QUEUE != 5.0
    assert build_policy("hpa-util", context).target_utilisation == TUNED_HPA_TARGET_UTILISATION != 0.8


def test_tuning_takes_the_cheapest_setting_meeting_the_objective_else_the_highest_attainment():
    meeting = {0.3: [(0.991, 5.0)], 0.2: [(0.997, 7.0)], 0.5: [(0.90, 3.0)]}
    assert choose(meeting, 0.99)[0] == 0.3
    none_meets = {1.0: [(0.80, 9.0)], 0.25: [(0.84, 9.2)], 5.0: [(0.76, 8.0)]}
    assert choose(none_meets, 0.99)[0] == 0.25


def _rate_file(cv: float) -> RateTrace:
    windows = 12
    return RateTrace("servegen-like", np.arange(windows) * 300.0, 300.0, np.full(windows, 40.0), cv=np.full(windows, cv))


def test_fluid_mode_honours_each_windows_burstiness():
    smooth, bursty = _rate_file(1.0), _rate_file(3.0)
    assert smooth.bins(1.0).arrival_scv == pytest.approx(np.ones(3600))
    assert bursty.bins(1.0).arrival_scv == pytest.approx(np.full(3600, 9.0))
    config = SimConfig()
    calm = run_fluid_mode(smooth, config, StaticPolicy(5))
    rough = run_fluid_mode(bursty, config, StaticPolicy(5))
    # Same rates, same pool: the bursty windows wait longer before their first token (the old
    # staircase gave both the same 448 ms p99).
    assert rough.ttft_ms.p99 > 1.5 * calm.ttft_ms.p99
    # Request mode draws the same windows as Gamma arrivals with that CV: it agrees within 40 %.
    calm_requests = run_request_mode(smooth.to_requests(0), config, StaticPolicy(5))
    rough_requests = run_request_mode(bursty.to_requests(0), config, StaticPolicy(5))
    assert rough_requests.ttft_ms.p99 > 1.5 * calm_requests.ttft_ms.p99
    assert 0.6 < rough.ttft_ms.p99 / rough_requests.ttft_ms.p99 < 1.4


def test_a_window_without_a_cv_is_poisson():
    trace = dataclasses.replace(_rate_file(1.0), cv=None)
    assert trace.bins(1.0).arrival_scv is None


def _decision(binding: str, current: int, target: int) -> planner.Decision:
    return planner.Decision(target, current, current, 0, (), binding, (binding,), False, 0.0, False, 1.0, None,
                            planner.PlannerState())


def test_forecast_bound_scale_ups_run_the_guardrails_share_at_once_as_production_does():
    approvals = ApprovalModel(approval_delay_s=60.0, reactive_max_percent=None)  # the step alone
    assert approvals.apply(0.0, _decision(planner.PREDICTIVE, 4, 7), 4, 1800.0, 1, 50) == 7
    # Beyond the guardrail (4 replicas) its share runs at once, the rest after the person's answer.
    assert approvals.apply(15.0, _decision(planner.PREDICTIVE, 7, 20), 7, 1800.0, 1, 50) == 11
    assert approvals.apply(45.0, _decision(planner.PREDICTIVE, 11, 20), 11, 1800.0, 1, 50) == 11
    assert approvals.apply(75.0, _decision(planner.PREDICTIVE, 11, 20), 11, 1800.0, 1, 50) == 20


def test_a_replayed_pre_scale_floor_lasts_until_its_forecast_peak_as_the_loops_floor_until():
    prescale = planner.PreScaleProposal(12, 2.0, 9.0, 4.5, 8, horizon_s=600.0)
    decision = dataclasses.replace(_decision(planner.PREDICTIVE, 3, 4), prescale=prescale)
    approvals = ApprovalModel(approval_delay_s=60.0)
    assert approvals.apply(0.0, decision, 3, 1800.0, 1, 50) == 3
    assert approvals.apply(60.0, _decision(planner.REACTIVE, 3, 3), 3, 1800.0, 1, 50) == 12
    # The loop's floor_until is now + the peak's horizon (600 s), not the 30-minute pre-scale horizon.
    assert approvals.approved_floor(599.0) == 12 and approvals.approved_floor(601.0) == 0
    # A forecast-bound change with no pre-scale proposal runs at once and holds no floor.
    plain = ApprovalModel(approval_delay_s=60.0)
    assert plain.apply(0.0, _decision(planner.PREDICTIVE, 3, 6), 3, 1800.0, 1, 50) == 6
    assert plain.approved_floor(1.0) == 0


def test_the_clairvoyant_search_finds_a_cheaper_plan_past_a_dip_in_attainment():
    """Attainment falls as the plan's utilisation bound u rises, but not monotonically: near a high
    target a few requests more or less miss where a bin's replicas change. A bisection from (0, 1)
    stopped below the first dip (u 0.45 here) and missed u 0.7; on the suite's conv x4 surge 3:15 that
    made the bound 13.15 GPU-hours at 0.9976, where the cheaper plans reach it at 8.97 and headroom
    beat the 'bound' at 11.87."""
    from scaling.sim.policies import _best_of

    @dataclasses.dataclass(frozen=True)
    class Plan:
        utilisation: float

    @dataclasses.dataclass(frozen=True)
    class Score:
        slo_attainment: float
        gpu_hours: float

    class Demand:
        def plan(self, utilisation, lookahead_s, min_replicas, cap, tick_s):
            return Plan(utilisation)

    def evaluate(plan: Plan) -> Score:
        u = plan.utilisation
        reaches = u <= 0.45 or 0.65 <= u <= 0.75
        return Score(0.999 if reaches else 0.98, 10.0 / max(u, 0.1))

    context = PolicyContext(poisson_trace(1.0, 60.0), CONFIG, evaluate)  # type: ignore[arg-type]
    plan, score = _best_of(context, Demand(), [105.0], 0.995, 10, 15.0, None)  # type: ignore[arg-type]
    assert score.slo_attainment >= 0.995
    assert 0.7 <= plan.utilisation <= 0.75  # the cheapest plan reaching the goal, not the first dip's
