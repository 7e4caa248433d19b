"""Property tests of the HPA replica core (`replicas.py`) and Headroom's use of it (`queue_depth.py`).

For any spec, history and recommendation: the answer is within [min, max] replicas (0 only when the
workload was scaled to zero by hand); a usage ratio inside the tolerance band changes nothing; a
scale-down never goes below the highest recommendation inside the stabilization window (nor the current
count); a scale-up never passes the rate policies' limit; the state round-trips through JSON.
"""
from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scaling.engine.queue_depth import QueueDepthPolicy, decide_on_queue_depth
from scaling.engine.replicas import (
    ControllerOptions,
    HpaSpec,
    HpaState,
    MetricObservation,
    MetricSpec,
    MetricTarget,
    Pod,
    ScaleEvent,
    ScalingPolicy,
    ScalingRules,
    Behavior,
    TimedRecommendation,
    decide,
    metrics_recommendation,
    scale_up_limit,
    tolerances_for,
)

FAST = settings(max_examples=150, derandomize=True, database=None, deadline=None)
NOW = 10_000.0

policies = st.lists(st.builds(ScalingPolicy, st.sampled_from(["Pods", "Percent"]), st.integers(1, 200),
                              st.sampled_from([15, 60, 300])), min_size=1, max_size=3).map(tuple)
rules = st.builds(ScalingRules, st.one_of(st.none(), st.sampled_from([0, 60, 300])),
                  st.sampled_from(["Max", "Min", "Disabled"]), policies,
                  st.one_of(st.none(), st.sampled_from([0.0, 0.05, 0.3])))
behaviors = st.one_of(st.none(), st.builds(Behavior, rules, rules))


@st.composite
def specs(draw) -> HpaSpec:
    low = draw(st.integers(0, 10))
    return HpaSpec(max_replicas=draw(st.integers(max(low, 1), 100)), min_replicas=low,
                   metrics=(MetricSpec("Pods", MetricTarget("AverageValue", average_value_milli=5000)),),
                   behavior=draw(behaviors))


ago = st.floats(0.0, 600.0)
states = st.builds(
    HpaState,
    st.lists(st.builds(lambda a, r: TimedRecommendation(NOW - a, r), ago, st.integers(0, 150)), max_size=6).map(tuple),
    st.lists(st.builds(lambda a, c: ScaleEvent(NOW - a, c), ago, st.integers(1, 20)), max_size=3).map(tuple),
    st.lists(st.builds(lambda a, c: ScaleEvent(NOW - a, c), ago, st.integers(1, 20)), max_size=3).map(tuple),
)
options = st.builds(ControllerOptions, tolerance=st.sampled_from([0.0, 0.1, 0.25]),
                    downscale_stabilization_s=st.sampled_from([0, 60, 300]))


def down_window(spec: HpaSpec, opts: ControllerOptions) -> float:
    if spec.behavior is None or spec.behavior.scale_down.stabilization_window_s is None:
        return opts.downscale_stabilization_s
    return spec.behavior.scale_down.stabilization_window_s


@FAST
@given(spec=specs(), current=st.integers(0, 150), recommendation=st.integers(0, 300), state=states, opts=options)
def test_the_answer_is_within_bounds_and_a_scale_down_respects_the_window(spec, current, recommendation, state, opts):
    outcome = decide(spec, current, state, NOW, recommendation=recommendation, options=opts)
    desired = outcome.desired_replicas
    if current == 0 and spec.min_replicas != 0:
        assert (desired, outcome.reason) == (0, "ScalingDisabled")  # scaled to zero by hand: hands off
        return
    assert spec.min_replicas <= desired <= spec.max_replicas
    if not spec.min_replicas <= current <= spec.max_replicas:
        return  # outside the bounds the HPA moves to the nearer bound without reading the metric
    if recommendation < current:
        window = down_window(spec, opts)
        highest = max([recommendation] + [r.replicas for r in state.recommendations if NOW - r.at_s < window])
        assert desired >= min(current, highest, spec.max_replicas)
        if spec.behavior is not None:
            assert desired <= current  # with behavior, a recommendation below the count never scales up
    if spec.behavior is not None and desired > current:
        assert desired <= max(scale_up_limit(current, spec.behavior.scale_up, state, NOW), current)
        assert desired <= max(recommendation, current)
    # The new state is what a restarted controller reads back.
    assert HpaState.from_dict(json.loads(json.dumps(outcome.state.to_dict()))) == outcome.state


@FAST
@given(current=st.integers(1, 60), values=st.lists(st.integers(0, 20_000), min_size=1, max_size=20),
       target_milli=st.integers(100, 10_000), tolerance=st.sampled_from([0.0, 0.1, 0.25]))
def test_a_usage_ratio_inside_the_tolerance_band_changes_nothing(current, values, target_milli, tolerance):
    spec = HpaSpec(max_replicas=1000, metrics=(MetricSpec("Pods", MetricTarget("AverageValue",
                                                                             average_value_milli=target_milli)),))
    pods = [Pod(f"p{i}") for i in range(len(values))]
    opts = ControllerOptions(tolerance=tolerance)
    proposal = metrics_recommendation(spec, current, pods, [MetricObservation(tuple(values))], opts)
    ratio = (sum(values) // len(values)) / target_milli  # the HPA's integer average, in milli-units
    if tolerances_for(spec, opts).is_within(ratio):
        assert proposal == current
    else:
        assert proposal == math.ceil(ratio * len(values))  # the ratio times the pods that reported


queue_values = st.one_of(st.none(), st.just(math.nan), st.just(math.inf), st.floats(-5.0, 500.0))


@FAST
@given(waiting=st.lists(queue_values, max_size=12), arriving=st.integers(0, 8), current=st.integers(0, 80),
       low=st.integers(0, 5), high=st.integers(5, 64), state=states)
def test_the_queue_depth_core_holds_on_an_unknown_queue_and_keeps_its_bounds(waiting, arriving, current, low, high,
                                                                              state):
    policy = QueueDepthPolicy(min_replicas=low, max_replicas=high)
    decision = decide_on_queue_depth(waiting, arriving, current, state, NOW, policy)
    if not any(v is not None and math.isfinite(v) for v in waiting):
        # Unknown is never zero: no answer, nothing remembered.
        assert decision.desired_replicas is None and decision.metric_recommendation is None
        assert decision.state == state
        return
    if current == 0 and low != 0:
        assert decision.desired_replicas == 0
    else:
        assert low <= decision.desired_replicas <= high
    assert decision.metric_recommendation is None or decision.metric_recommendation >= 0
