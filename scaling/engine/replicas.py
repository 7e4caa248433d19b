"""The Kubernetes HPA (autoscaling/v2) replica calculation, reproduced as pure code.

Two halves, as in kube-controller-manager:
1. a *metric proposal* per metric (replica_calculator.go): tolerance, missing and not-ready pods,
   Resource / Pods / Object / External metrics with Utilization, Value and AverageValue targets;
   the largest proposal wins (horizontal.go computeReplicasForMetrics);
2. *normalization* (horizontal.go): stabilization windows over earlier recommendations, rate
   policies over earlier scale events, min/max replicas; without `behavior`, the legacy path
   (5-minute downscale stabilization and a scale-up cap of max(2 x current, 4)).

The history the real HPA keeps in memory (and loses on restart) is `HpaState`, a plain serialisable
value (`hpa_spec.py`) that callers persist. Headroom's own use of the core, queue depth per ready
replica, is `queue_depth.decide_on_queue_depth`. Values are milli-units (int), as Kubernetes quantities are.

Run `python -m scaling.engine.replicas CASES.json` for the conformance case format
(../shared/reference/hpa-conformance.md); the parsing lives in `hpa_cases.py`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scaling.engine.hpa_spec import (  # noqa: F401 - re-exported: callers import the HPA from here
    DEFAULT_TOLERANCE,
    DEFAULT_CPU_INITIALIZATION_PERIOD_S,
    DEFAULT_INITIAL_READINESS_DELAY_S,
    DEFAULT_DOWNSCALE_STABILIZATION_S,
    SCALE_UP_LIMIT_FACTOR,
    SCALE_UP_LIMIT_MINIMUM,
    _LONG_AGO_S,
    RUNNING,
    PENDING,
    FAILED,
    SUCCEEDED,
    HpaError,
    MetricTarget,
    MetricSpec,
    ScalingPolicy,
    ScalingRules,
    DEFAULT_SCALE_UP_RULES,
    DEFAULT_SCALE_DOWN_RULES,
    Behavior,
    HpaSpec,
    ControllerOptions,
    Pod,
    TimedRecommendation,
    ScaleEvent,
    HpaState,
    Outcome,
)


# ---------------------------------------------------------------------------- metric proposals


@dataclass(frozen=True)
class Tolerances:
    scale_down: float
    scale_up: float

    def is_within(self, usage_ratio: float) -> bool:
        return (1.0 - self.scale_down) <= usage_ratio <= (1.0 + self.scale_up)


def tolerances_for(spec: HpaSpec, options: ControllerOptions) -> Tolerances:
    down = up = options.tolerance
    if spec.behavior is not None:
        if spec.behavior.scale_down.tolerance is not None:
            down = spec.behavior.scale_down.tolerance
        if spec.behavior.scale_up.tolerance is not None:
            up = spec.behavior.scale_up.tolerance
    return Tolerances(scale_down=down, scale_up=up)


@dataclass(frozen=True)
class _PodGroups:
    ready_count: int
    unready: frozenset[str]
    missing: frozenset[str]
    metrics: dict[str, int]  # only the pods whose samples count


def _cpu_sample_is_unready(pod: Pod, options: ControllerOptions) -> bool:
    if pod.ready is None:
        return True
    started = _LONG_AGO_S if pod.started_s_ago is None else pod.started_s_ago
    transition = started if pod.ready_transition_s_ago is None else pod.ready_transition_s_ago
    if started < options.cpu_initialization_period_s:
        # Still initializing: CPU spikes while loading, so use only samples taken a full metric
        # window after the pod turned ready.
        sample_at = -pod.metric_sample_s_ago
        return (not pod.ready) or sample_at < -transition + pod.metric_window_s
    # After initialization only a pod that has never been ready is set aside.
    return (not pod.ready) and (started - transition) < options.initial_readiness_delay_s


def _group_pods(
    pods: Sequence[Pod], values: Sequence[int | None], is_cpu: bool, options: ControllerOptions
) -> _PodGroups:
    ready_count = 0
    unready: set[str] = set()
    missing: set[str] = set()
    metrics: dict[str, int] = {}
    for pod, value in zip(pods, values):
        if pod.deleting or pod.phase == FAILED:
            continue  # dropped, metrics and all
        if pod.phase == PENDING:
            unready.add(pod.name)
            continue
        if value is None:
            missing.add(pod.name)
            continue
        if is_cpu and _cpu_sample_is_unready(pod, options):
            unready.add(pod.name)
            continue
        metrics[pod.name] = value
        ready_count += 1
    return _PodGroups(ready_count, frozenset(unready), frozenset(missing), metrics)


def _go_ceil(value: float) -> int:
    return int(math.ceil(value))


def _direction_flipped(old_ratio: float, new_ratio: float) -> bool:
    return (old_ratio < 1.0 and new_ratio > 1.0) or (old_ratio > 1.0 and new_ratio < 1.0)


def _utilization_ratio(metrics: dict[str, int], requests: dict[str, int], target_percent: int) -> float:
    used = sum(metrics[name] for name in metrics if name in requests)
    requested = sum(requests[name] for name in metrics if name in requests)
    if requested == 0:
        raise HpaError("no metrics returned matched known pods")
    utilization_percent = (used * 100) // requested  # Go integer division: whole percents
    return utilization_percent / target_percent


def _plain_ratio(metrics: dict[str, int], target_milli: int) -> float:
    average_milli = sum(metrics.values()) // len(metrics)
    return average_milli / target_milli


def _pod_based_replicas(
    current_replicas: int,
    pods: Sequence[Pod],
    values: Sequence[int | None],
    tolerances: Tolerances,
    options: ControllerOptions,
    *,
    is_cpu: bool,
    target_percent: int | None = None,
    target_milli: int | None = None,
) -> int:
    """GetResourceReplicas (target_percent) or calcPlainMetricReplicas (target_milli)."""
    if not pods:
        raise HpaError("no pods returned by selector while calculating replica count")
    groups = _group_pods(pods, values, is_cpu, options)
    metrics = dict(groups.metrics)
    if not metrics:
        raise HpaError("did not receive metrics for targeted pods (pods might be unready)")

    requests: dict[str, int] = {}
    if target_percent is not None:
        for pod in pods:
            if pod.cpu_request_milli is None:
                raise HpaError(f"missing request for cpu in pod {pod.name}")
            requests[pod.name] = pod.cpu_request_milli

    def ratio_of(samples: dict[str, int]) -> float:
        if target_percent is not None:
            return _utilization_ratio(samples, requests, target_percent)
        assert target_milli is not None
        return _plain_ratio(samples, target_milli)

    usage_ratio = ratio_of(metrics)
    scale_up_with_unready = bool(groups.unready) and usage_ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        if tolerances.is_within(usage_ratio):
            return current_replicas
        return _go_ceil(usage_ratio * groups.ready_count)

    # Be conservative with what we cannot see: missing pods damp a scale-down (counted at the
    # target, or 100 % of request) and a scale-up (counted at 0); unready pods damp a scale-up.
    if groups.missing:
        if usage_ratio < 1.0:
            for name in groups.missing:
                if target_percent is not None:
                    metrics[name] = requests[name] * max(100, target_percent) // 100
                else:
                    assert target_milli is not None
                    metrics[name] = target_milli
        elif usage_ratio > 1.0:
            for name in groups.missing:
                metrics[name] = 0
    if scale_up_with_unready:
        for name in groups.unready:
            metrics[name] = 0

    new_ratio = ratio_of(metrics)
    if tolerances.is_within(new_ratio) or _direction_flipped(usage_ratio, new_ratio):
        return current_replicas
    new_replicas = _go_ceil(new_ratio * len(metrics))
    if (new_ratio < 1.0 and new_replicas > current_replicas) or (new_ratio > 1.0 and new_replicas < current_replicas):
        return current_replicas
    return new_replicas


def _ready_pod_count(pods: Sequence[Pod]) -> int:
    if not pods:
        raise HpaError("unable to calculate ready pods: no pods returned by selector while calculating replica count")
    return sum(1 for pod in pods if pod.phase == RUNNING and pod.ready)


def _usage_ratio_replicas(current_replicas: int, usage_ratio: float, pods: Sequence[Pod], tolerances: Tolerances) -> int:
    """Object/External Value targets: the ratio times the *ready* pods."""
    if current_replicas == 0:
        return _go_ceil(usage_ratio)  # scale from zero ignores tolerance and pods
    if tolerances.is_within(usage_ratio):
        return current_replicas
    return _go_ceil(usage_ratio * _ready_pod_count(pods))


def _per_pod_replicas(current_replicas: int, usage_milli: int, target_average_milli: int, tolerances: Tolerances) -> int:
    """Object/External AverageValue targets: the total divided by the per-pod target."""
    if current_replicas == 0:
        return _go_ceil(usage_milli / target_average_milli)
    usage_ratio = usage_milli / (target_average_milli * current_replicas)
    if tolerances.is_within(usage_ratio):
        return current_replicas
    return _go_ceil(usage_milli / target_average_milli)


@dataclass(frozen=True)
class MetricObservation:
    """What was read for one metric: per-pod values (Resource, Pods) or object values."""

    pod_values: tuple[int | None, ...] = ()
    object_values: tuple[int, ...] | None = None  # None: the metric could not be read


def _positive(value: int | None, what: str) -> int:
    if value is None or value <= 0:
        raise HpaError(f"invalid metric target: {what} must be set and positive")
    return value


def metric_proposal(
    metric: MetricSpec,
    observation: MetricObservation,
    current_replicas: int,
    pods: Sequence[Pod],
    tolerances: Tolerances,
    options: ControllerOptions,
) -> int:
    """One metric's replica proposal (horizontal.go computeReplicasForMetric)."""
    target = metric.target
    values = list(observation.pod_values) + [None] * (len(pods) - len(observation.pod_values))
    if metric.type == "Resource":
        is_cpu = metric.resource_name == "cpu"
        if target.type == "Utilization":
            if not is_cpu:
                raise HpaError(f"missing request for {metric.resource_name}")
            percent = _positive(target.average_utilization, "averageUtilization")
            return _pod_based_replicas(current_replicas, pods, values, tolerances, options, is_cpu=True, target_percent=percent)
        if target.type == "AverageValue":
            milli = _positive(target.average_value_milli, "averageValue")
            return _pod_based_replicas(current_replicas, pods, values, tolerances, options, is_cpu=is_cpu, target_milli=milli)
        raise HpaError("invalid resource metric source: neither a utilization target nor a value target was set")
    if metric.type == "Pods":
        if target.type != "AverageValue":
            raise HpaError("invalid pods metric source: only an AverageValue target is supported")
        milli = _positive(target.average_value_milli, "averageValue")
        return _pod_based_replicas(current_replicas, pods, values, tolerances, options, is_cpu=False, target_milli=milli)
    if metric.type in ("Object", "External"):
        if observation.object_values is None or not observation.object_values:
            raise HpaError(f"unable to get {metric.type.lower()} metric: no value returned")
        usage_milli = sum(observation.object_values)
        if target.type == "Value":
            milli = _positive(target.value_milli, "value")
            return _usage_ratio_replicas(current_replicas, usage_milli / milli, pods, tolerances)
        if target.type == "AverageValue":
            milli = _positive(target.average_value_milli, "averageValue")
            return _per_pod_replicas(current_replicas, usage_milli, milli, tolerances)
        raise HpaError(f"invalid {metric.type.lower()} metric source: neither a value target nor an average value target was set")
    raise HpaError(f'unknown metric source type "{metric.type}"')


def metrics_recommendation(
    spec: HpaSpec,
    current_replicas: int,
    pods: Sequence[Pod],
    observations: Sequence[MetricObservation],
    options: ControllerOptions = ControllerOptions(),
) -> int:
    """The largest proposal over all metrics; an error when all fail, or some fail and the rest would scale down."""
    if not spec.metrics:
        raise HpaError("no metrics specified")
    tolerances = tolerances_for(spec, options)
    best = 0
    first_error: HpaError | None = None
    invalid = 0
    for index, metric in enumerate(spec.metrics):
        observation = observations[index] if index < len(observations) else MetricObservation()
        try:
            proposal = metric_proposal(metric, observation, current_replicas, pods, tolerances, options)
        except HpaError as error:
            invalid += 1
            first_error = first_error or error
            continue
        best = max(best, proposal)
    if invalid >= len(spec.metrics) or (invalid > 0 and best < current_replicas):
        assert first_error is not None
        raise first_error
    return best


# ---------------------------------------------------------------------------- normalization


def _within(at_s: float, now_s: float, window_s: float) -> bool:
    # Strictly inside the window: an entry exactly `window` old has left it, as in the Go tests.
    return now_s - at_s < window_s


def _stabilize_legacy(state: HpaState, desired: int, now_s: float, window_s: float) -> tuple[int, HpaState]:
    highest = desired
    for rec in state.recommendations:
        if _within(rec.at_s, now_s, window_s):
            highest = max(highest, rec.replicas)
    kept = tuple(r for r in state.recommendations if _within(r.at_s, now_s, window_s))
    return highest, replace(state, recommendations=kept + (TimedRecommendation(now_s, desired),))


def _down_window(behavior: Behavior, options: ControllerOptions) -> int:
    window = behavior.scale_down.stabilization_window_s
    return options.downscale_stabilization_s if window is None else window


def _stabilize_with_behavior(
    state: HpaState, desired: int, current: int, behavior: Behavior, options: ControllerOptions, now_s: float
) -> tuple[int, HpaState]:
    up_window = behavior.scale_up.stabilization_window_s or 0
    down_window = _down_window(behavior, options)
    up_limit = desired  # lowest recent recommendation: scale up only as far as all of them agree
    down_limit = desired  # highest recent recommendation: scale down only as far as all agree
    for rec in state.recommendations:  # (`_within` written out: this runs every tick of every replay)
        age = now_s - rec.at_s
        if age < up_window and rec.replicas < up_limit:
            up_limit = rec.replicas
        if age < down_window and rec.replicas > down_limit:
            down_limit = rec.replicas
    stabilized = min(max(current, up_limit), down_limit)
    horizon = max(up_window, down_window)
    kept = tuple(r for r in state.recommendations if now_s - r.at_s < horizon)
    return stabilized, replace(state, recommendations=kept + (TimedRecommendation(now_s, desired),))


def _change_in_period(events: Sequence[ScaleEvent], period_s: int, now_s: float) -> int:
    return sum(e.replica_change for e in events if _within(e.at_s, now_s, period_s))


def _period_start_replicas(current: int, state: HpaState, period_s: int, now_s: float) -> int:
    added = _change_in_period(state.scale_up_events, period_s, now_s)
    removed = _change_in_period(state.scale_down_events, period_s, now_s)
    return current - added + removed


def scale_up_limit(current: int, rules: ScalingRules, state: HpaState, now_s: float) -> int:
    if rules.select_policy == "Disabled":
        return current
    proposals = []
    for policy in rules.policies:
        start = _period_start_replicas(current, state, policy.period_s, now_s)
        if policy.type == "Pods":
            proposals.append(start + policy.value)
        else:  # rounded up, or a small percentage could never add a pod
            proposals.append(_go_ceil(start * (1 + policy.value / 100)))
    if not proposals:
        return current
    return min(proposals) if rules.select_policy == "Min" else max(proposals)


def scale_down_limit(current: int, rules: ScalingRules, state: HpaState, now_s: float) -> int:
    if rules.select_policy == "Disabled":
        return current
    proposals = []
    for policy in rules.policies:
        start = _period_start_replicas(current, state, policy.period_s, now_s)
        if policy.type == "Pods":
            proposals.append(start - policy.value)
        else:
            proposals.append(int(start * (1 - policy.value / 100)))  # Go int32(): truncation
    if not proposals:
        return current
    return max(proposals) if rules.select_policy == "Min" else min(proposals)


def _rate_limit_with_behavior(
    current: int, desired: int, spec: HpaSpec, behavior: Behavior, state: HpaState, now_s: float
) -> tuple[int, str]:
    if desired > current:
        limit = max(scale_up_limit(current, behavior.scale_up, state, now_s), current)
        if spec.max_replicas > limit:
            return (limit, "ScaleUpLimit") if desired > limit else (desired, "DesiredWithinRange")
        return (spec.max_replicas, "TooManyReplicas") if desired > spec.max_replicas else (desired, "DesiredWithinRange")
    if desired < current:
        limit = min(scale_down_limit(current, behavior.scale_down, state, now_s), current)
        if spec.min_replicas < limit:
            return (limit, "ScaleDownLimit") if desired < limit else (desired, "DesiredWithinRange")
        return (spec.min_replicas, "TooFewReplicas") if desired < spec.min_replicas else (desired, "DesiredWithinRange")
    return desired, "DesiredWithinRange"


def _rate_limit_legacy(current: int, desired: int, spec: HpaSpec) -> tuple[int, str]:
    # Caps a burst of bogus usage reports (kubernetes issue 32304).
    cap = int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))
    maximum, reason = (cap, "ScaleUpLimit") if spec.max_replicas > cap else (spec.max_replicas, "TooManyReplicas")
    if desired < spec.min_replicas:
        return spec.min_replicas, "TooFewReplicas"
    if desired > maximum:
        return maximum, reason
    return desired, "DesiredWithinRange"


def _prune_events(events: tuple[ScaleEvent, ...], rules: ScalingRules, now_s: float) -> tuple[ScaleEvent, ...]:
    longest = max((p.period_s for p in rules.policies), default=0)
    return tuple(e for e in events if _within(e.at_s, now_s, longest))


def record_scale_event(state: HpaState, behavior: Behavior | None, previous: int, new: int, now_s: float) -> HpaState:
    """Remember a scale change so rate policies count it (only kept when a behavior is set, as in Kubernetes)."""
    if behavior is None or new == previous:
        return state
    if new > previous:
        events = _prune_events(state.scale_up_events, behavior.scale_up, now_s)
        return replace(state, scale_up_events=events + (ScaleEvent(now_s, new - previous),))
    events = _prune_events(state.scale_down_events, behavior.scale_down, now_s)
    return replace(state, scale_down_events=events + (ScaleEvent(now_s, previous - new),))


def normalize(
    spec: HpaSpec,
    current_replicas: int,
    recommendation: int,
    state: HpaState,
    now_s: float,
    options: ControllerOptions = ControllerOptions(),
) -> tuple[int, str, HpaState]:
    """Stabilize a metric recommendation, then apply rate limits and min/max."""
    if spec.behavior is None:
        stabilized, state = _stabilize_legacy(state, recommendation, now_s, options.downscale_stabilization_s)
        desired, reason = _rate_limit_legacy(current_replicas, stabilized, spec)
    else:
        stabilized, state = _stabilize_with_behavior(state, recommendation, current_replicas, spec.behavior, options, now_s)
        desired, reason = _rate_limit_with_behavior(current_replicas, stabilized, spec, spec.behavior, state, now_s)
    return desired, reason, state


def decide(
    spec: HpaSpec,
    current_replicas: int,
    state: HpaState,
    now_s: float,
    *,
    recommendation: int | None = None,
    pods: Sequence[Pod] = (),
    observations: Sequence[MetricObservation] = (),
    options: ControllerOptions = ControllerOptions(),
) -> Outcome:
    """One HPA reconcile: the desired replicas and the state to persist (raises HpaError)."""
    if current_replicas == 0 and spec.min_replicas != 0:
        return Outcome(0, state, "ScalingDisabled")  # scaled to zero by hand: autoscaling is off
    if current_replicas > spec.max_replicas:
        desired, reason = spec.max_replicas, "TooManyReplicas"
    elif current_replicas < spec.min_replicas:
        desired, reason = spec.min_replicas, "TooFewReplicas"
    else:
        if recommendation is None:
            recommendation = metrics_recommendation(spec, current_replicas, pods, observations, options)
        desired, reason, state = normalize(spec, current_replicas, recommendation, state, now_s, options)
    state = record_scale_event(state, spec.behavior, current_replicas, desired, now_s)
    return Outcome(desired, state, reason, recommendation)


if __name__ == "__main__":
    from scaling.engine.hpa_cases import main

    raise SystemExit(main())
