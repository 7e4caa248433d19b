"""The HPA conformance case format (../shared/reference/hpa-conformance.md) on top of `replicas`.

`python -m scaling.engine.replicas CASES.json` prints one `{"name", "replicas"}` or
`{"name", "error"}` per case, in order, and never stops on a case it cannot read.

Optional extensions (absent in the shared format, used by the Kubernetes-derived cases):
- top level: `tolerance`, `cpuInitializationPeriodSeconds`, `delayOfInitialReadinessStatusSeconds`,
  `downscaleStabilizationWindowSeconds` (kube-controller-manager flags);
- per pod: `startedSecondsAgo`, `readyTransitionSecondsAgo`, `metricSampleSecondsAgo`,
  `metricWindowSeconds` (the CPU initialization-period rules), `ready: null` (no Ready condition).
Unknown keys such as `source` and `note` are ignored.
"""
from __future__ import annotations

import json
import math
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from scaling.engine.replicas import (
    DEFAULT_CPU_INITIALIZATION_PERIOD_S,
    DEFAULT_DOWNSCALE_STABILIZATION_S,
    DEFAULT_INITIAL_READINESS_DELAY_S,
    DEFAULT_SCALE_DOWN_RULES,
    DEFAULT_SCALE_UP_RULES,
    DEFAULT_TOLERANCE,
    Behavior,
    ControllerOptions,
    HpaError,
    HpaSpec,
    HpaState,
    MetricObservation,
    MetricSpec,
    MetricTarget,
    Pod,
    ScaleEvent,
    ScalingPolicy,
    ScalingRules,
    TimedRecommendation,
    decide,
)


class CaseError(ValueError):
    """The case cannot be read."""


_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}


def to_milli(quantity: Any) -> int:
    """A Kubernetes quantity (number or string like "500m", "1.5k", "2Gi") in milli-units, rounded up."""
    if isinstance(quantity, bool) or quantity is None:
        raise CaseError(f"not a quantity: {quantity!r}")
    if isinstance(quantity, (int, float)):
        if isinstance(quantity, float) and not math.isfinite(quantity):
            raise CaseError(f"not a quantity: {quantity!r}")
        number, multiplier = Decimal(str(quantity)), Decimal(1)
    elif isinstance(quantity, str):
        text = quantity.strip()
        suffix = next((s for s in sorted(_SUFFIXES, key=len, reverse=True) if s and text.endswith(s)), "")
        try:
            number = Decimal(text[: len(text) - len(suffix)] if suffix else text)
        except InvalidOperation as error:
            raise CaseError(f"not a quantity: {quantity!r}") from error
        multiplier = _SUFFIXES[suffix]
    else:
        raise CaseError(f"not a quantity: {quantity!r}")
    return int((number * multiplier * 1000).to_integral_value(rounding="ROUND_CEILING"))


def _target(raw: dict[str, Any]) -> MetricTarget:
    kind = raw.get("type")
    if kind == "Utilization":
        return MetricTarget(kind, average_utilization=int(raw["averageUtilization"]))
    if kind == "Value":
        return MetricTarget(kind, value_milli=to_milli(raw["value"]))
    if kind == "AverageValue":
        return MetricTarget(kind, average_value_milli=to_milli(raw["averageValue"]))
    raise CaseError(f"unknown target type {kind!r}")


def _metric(raw: dict[str, Any]) -> MetricSpec:
    kind = raw.get("type")
    source = {
        "Resource": "resource", "ContainerResource": "containerResource",
        "Pods": "pods", "Object": "object", "External": "external",
    }.get(kind or "")
    if source is None:
        # Kubernetes answers an invalid-source error for this metric alone, so keep it and let it fail.
        return MetricSpec(str(kind), MetricTarget("Unknown"))
    body = raw.get(source) or {}
    target = _target(body.get("target") or {})
    # A ContainerResource metric is a Resource metric whose per-pod values are one container's.
    is_resource = kind in ("Resource", "ContainerResource")
    return MetricSpec("Resource" if is_resource else kind, target, resource_name=str(body.get("name", "")) if is_resource else "")


def _rules(raw: dict[str, Any] | None, default: ScalingRules) -> ScalingRules:
    if raw is None:
        return default
    policies = raw.get("policies")
    return ScalingRules(
        stabilization_window_s=(
            default.stabilization_window_s if raw.get("stabilizationWindowSeconds") is None else int(raw["stabilizationWindowSeconds"])
        ),
        select_policy=str(raw.get("selectPolicy") or default.select_policy),
        policies=default.policies if policies is None else tuple(
            ScalingPolicy(str(p["type"]), int(p["value"]), int(p["periodSeconds"])) for p in policies
        ),
        tolerance=None if raw.get("tolerance") is None else float(to_milli(raw["tolerance"])) / 1000,
    )


def _behavior(raw: dict[str, Any] | None) -> Behavior | None:
    if raw is None:
        return None
    # The API server fills every unset field with its default.
    return Behavior(
        scale_up=_rules(raw.get("scaleUp"), DEFAULT_SCALE_UP_RULES),
        scale_down=_rules(raw.get("scaleDown"), DEFAULT_SCALE_DOWN_RULES),
    )


def _pod(raw: dict[str, Any], index: int) -> Pod:
    def optional_float(key: str) -> float | None:
        return None if raw.get(key) is None else float(raw[key])

    ready = raw.get("ready", True)
    return Pod(
        name=str(raw.get("name", f"pod-{index}")),
        phase=str(raw.get("phase", "Running")),
        ready=None if ready is None else bool(ready),
        deleting=bool(raw.get("deleting", False)),
        cpu_request_milli=None if raw.get("cpuRequestMilli") is None else _milli_cpu(raw["cpuRequestMilli"]),
        started_s_ago=optional_float("startedSecondsAgo"),
        ready_transition_s_ago=optional_float("readyTransitionSecondsAgo"),
        metric_sample_s_ago=float(raw.get("metricSampleSecondsAgo", 0.0)),
        metric_window_s=float(raw.get("metricWindowSeconds", 60.0)),
    )


def _pod_value_milli(metric: MetricSpec, value: Any) -> int | None:
    if value is None:
        return None
    if metric.type == "Resource" and metric.resource_name == "cpu":
        return _milli_cpu(value)
    return to_milli(value)


def _milli_cpu(value: Any) -> int:
    """Numbers are milli-CPU already; strings are quantities ("600m", "0.6")."""
    if isinstance(value, str):
        return to_milli(value)
    return to_milli(value) // 1000 if float(value).is_integer() else math.ceil(float(value))


def _observations(case: dict[str, Any], spec: HpaSpec, raw_pods: list[dict[str, Any]]) -> list[MetricObservation]:
    object_values = case.get("objectValues") or []
    observations = []
    for index, metric in enumerate(spec.metrics):
        if metric.type in ("Object", "External"):
            raw = object_values[index] if index < len(object_values) else None
            if raw is None:
                observations.append(MetricObservation(object_values=None))
            else:
                items = raw if isinstance(raw, list) else [raw]
                observations.append(MetricObservation(object_values=tuple(to_milli(v) for v in items)))
            continue
        values = []
        for pod in raw_pods:
            pod_metrics = pod.get("metrics") or []
            values.append(_pod_value_milli(metric, pod_metrics[index] if index < len(pod_metrics) else None))
        observations.append(MetricObservation(pod_values=tuple(values)))
    return observations


def _state(history: dict[str, Any] | None) -> HpaState:
    if not history:
        return HpaState()
    recommendations = tuple(
        TimedRecommendation(-float(r["secondsAgo"]), int(r["replicas"])) for r in history.get("recommendations", [])
    )
    up, down = [], []
    for event in history.get("scaleEvents", []):
        change = int(event["replicaChange"])
        (up if change > 0 else down).append(ScaleEvent(-float(event["secondsAgo"]), abs(change)))
    return HpaState(recommendations, tuple(up), tuple(down))


def evaluate_case(case: dict[str, Any]) -> int:
    """The replica count Kubernetes would set for one case (raises HpaError or CaseError)."""
    if not isinstance(case, dict):
        raise CaseError("a case must be a JSON object")
    raw_spec = case.get("spec") or {}
    spec = HpaSpec(
        max_replicas=int(raw_spec["maxReplicas"]),
        min_replicas=1 if raw_spec.get("minReplicas") is None else int(raw_spec["minReplicas"]),
        metrics=tuple(_metric(m) for m in raw_spec.get("metrics") or []),
        behavior=_behavior(raw_spec.get("behavior")),
    )
    options = ControllerOptions(
        tolerance=float(case.get("tolerance", DEFAULT_TOLERANCE)),
        cpu_initialization_period_s=float(case.get("cpuInitializationPeriodSeconds", DEFAULT_CPU_INITIALIZATION_PERIOD_S)),
        initial_readiness_delay_s=float(case.get("delayOfInitialReadinessStatusSeconds", DEFAULT_INITIAL_READINESS_DELAY_S)),
        downscale_stabilization_s=int(case.get("downscaleStabilizationWindowSeconds", DEFAULT_DOWNSCALE_STABILIZATION_S)),
    )
    current = int(case["currentReplicas"])
    state = _state(case.get("history"))
    if case.get("recommendation") is not None:
        outcome = decide(spec, current, state, 0.0, recommendation=int(case["recommendation"]), options=options)
    else:
        raw_pods = case.get("pods") or []
        pods = [_pod(raw, i) for i, raw in enumerate(raw_pods)]
        observations = _observations(case, spec, raw_pods)
        outcome = decide(spec, current, state, 0.0, pods=pods, observations=observations, options=options)
    return outcome.desired_replicas


def run_case(case: Any) -> dict[str, Any]:
    name = case.get("name") if isinstance(case, dict) else None
    try:
        return {"name": name, "replicas": evaluate_case(case)}
    except HpaError as error:
        return {"name": name, "error": str(error)}
    except Exception as error:  # noqa: BLE001 - a case we cannot read must not stop the others
        return {"name": name, "error": f"invalid case: {type(error).__name__}: {error}"}


def run_cases(cases: list[Any]) -> list[dict[str, Any]]:
    return [run_case(case) for case in cases]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m scaling.engine.replicas CASES.json", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        cases = json.loads(Path(args[0]).read_text())
    except OSError as error:
        print(f"error: cannot read {args[0]}: {error.strerror or error}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as error:
        print(f"error: {args[0]} is not JSON: {error}", file=sys.stderr)
        return 2
    if not isinstance(cases, list):
        print(f"error: {args[0]} must hold a JSON array of cases", file=sys.stderr)
        return 2
    try:
        json.dump(run_cases(cases), sys.stdout, indent=1)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (| head): not our error
        sys.stderr.close()
    return 0
