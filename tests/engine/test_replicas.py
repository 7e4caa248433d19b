"""The HPA-conformant core: the Kubernetes-derived case file, its CLI, state and queue depth."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scaling.engine.hpa_cases import run_case
from scaling.engine.replicas import (
    Behavior,
    HpaSpec,
    HpaState,
    MetricSpec,
    MetricTarget,
    ScalingPolicy,
    ScalingRules,
    decide,
)
from scaling.engine.queue_depth import QueueDepthPolicy, decide_on_queue_depth

REPO = Path(__file__).resolve().parents[2]
CASES_PATH = REPO / "scaling" / "engine" / "hpa_cases.json"
CASES = json.loads(CASES_PATH.read_text())


def _answer(case: dict) -> int | str:
    return "error" if case["expected"] == "error" else case["expected"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_it_reproduces_kubernetes_on_every_case(case: dict) -> None:
    result = run_case(case)
    assert result.get("replicas", "error") == _answer(case), result


def test_it_has_cases_from_the_kubernetes_tests_and_docs() -> None:
    sources = {c["source"].split("/")[-1] for c in CASES}
    assert len(CASES) >= 40
    assert {"replica_calculator_test.go", "horizontal_test.go"} <= sources
    assert any("kubernetes.io/docs" in c["source"] for c in CASES)
    assert len({c["name"] for c in CASES}) == len(CASES)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scaling.engine.replicas", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_it_passes_the_case_file_through_the_cli() -> None:
    done = _cli(str(CASES_PATH))
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert [a["name"] for a in answers] == [c["name"] for c in CASES]
    assert [a.get("replicas", "error") for a in answers] == [_answer(c) for c in CASES]


def test_it_answers_an_error_for_a_case_it_cannot_read_and_goes_on(tmp_path: Path) -> None:
    good = next(c for c in CASES if c["name"] == "TestReplicaCalcScaleUp")
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{"name": "broken"}, 7, {"name": "odd", "currentReplicas": "x", "spec": {}}, good]))
    done = _cli(str(path))
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert [("error" in a) for a in answers] == [True, True, True, False]
    assert answers[3] == {"name": "TestReplicaCalcScaleUp", "replicas": 5}


@pytest.mark.parametrize(
    "content, message",
    [(None, "cannot read"), ("{not json", "is not JSON"), ('{"a": 1}', "JSON array")],
    ids=["missing", "not-json", "not-a-list"],
)
def test_it_fails_cleanly_on_a_bad_file(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "cases.json"
    if content is not None:
        path.write_text(content)
    done = _cli(str(path))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and message in done.stderr
    assert "Traceback" not in done.stderr


SPEC = HpaSpec(
    max_replicas=100,
    min_replicas=1,
    metrics=(MetricSpec("Pods", MetricTarget("AverageValue", average_value_milli=5000)),),
    behavior=Behavior(scale_down=ScalingRules(stabilization_window_s=300, policies=(ScalingPolicy("Pods", 2, 60),))),
)


def test_it_keeps_its_memory_across_a_restart() -> None:
    first = decide(SPEC, 10, HpaState(), now_s=0.0, recommendation=12)
    restored = HpaState.from_dict(json.loads(json.dumps(first.state.to_dict())))
    assert restored == first.state
    # The high recommendation of 60 s ago holds the scale-down, as it would without the restart.
    after_restart = decide(SPEC, 12, restored, now_s=60.0, recommendation=3)
    assert after_restart.desired_replicas == 12
    forgot = decide(SPEC, 12, HpaState(), now_s=60.0, recommendation=3)
    assert forgot.desired_replicas == 10  # what the real HPA would do after losing its memory


def test_it_counts_its_own_scale_events_against_the_rate_policy() -> None:
    state = HpaState()
    replicas = 20
    for tick in range(4):  # 15 s apart, all inside the 60-s policy period
        outcome = decide(SPEC, replicas, state, now_s=400.0 + 15 * tick, recommendation=1)
        state, replicas = outcome.state, outcome.desired_replicas
    assert replicas == 18  # 2 pods per 60 s in total, not 2 per tick
    assert sum(e.replica_change for e in state.scale_down_events) == 2


def test_it_keeps_no_scale_events_without_behavior() -> None:
    spec = HpaSpec(max_replicas=100, metrics=SPEC.metrics, behavior=None)
    outcome = decide(spec, 10, HpaState(), now_s=0.0, recommendation=15)
    assert outcome.desired_replicas == 15
    assert outcome.state.scale_up_events == () and len(outcome.state.recommendations) == 1


QUEUE_TABLE = [
    # name, waiting per ready replica, arriving, current, expected desired
    ("doubles when the queue is twice the target", [10.0, 10.0], 0, 2, 4),
    ("holds inside the 10 % tolerance", [5.4, 5.2], 0, 2, 2),
    ("credits replicas that are still loading", [15.0, 15.0], 4, 6, 6),
    ("orders only what is not already arriving", [30.0, 30.0], 2, 4, 8),
    ("scale-up capped by max(+100 %, +4) per 15 s", [100.0], 0, 1, 5),
    ("scales down one replica at a time", [0.0] * 10, 0, 10, 9),
    ("unknown replicas count at the target on a scale-down (3, not 1)", [0.0, None, None, None], 0, 4, 3),
    ("an unknown replica counts as empty on a scale-up", [20.0, None], 0, 2, 4),
]


def test_it_reads_nan_as_unknown_not_zero() -> None:
    def recommendation(waiting: list) -> int | None:
        return decide_on_queue_depth(waiting, 0, 4, HpaState(), now_s=0.0).metric_recommendation

    assert recommendation([float("nan"), 0.0, 0.0, 0.0]) == recommendation([None, 0.0, 0.0, 0.0]) == 1
    assert recommendation([0.0, 0.0, 0.0, 0.0]) == 0


@pytest.mark.parametrize("name, waiting, arriving, current, expected", QUEUE_TABLE, ids=[row[0] for row in QUEUE_TABLE])
def test_it_scales_on_queue_depth_per_ready_replica(name: str, waiting: list, arriving: int, current: int, expected: int) -> None:
    decision = decide_on_queue_depth(waiting, arriving, current, HpaState(), now_s=1000.0)
    assert decision.desired_replicas == expected


@pytest.mark.parametrize("waiting", [[], [None, None], [float("nan")]], ids=["no-ready-replica", "all-missing", "nan"])
def test_it_holds_when_the_queue_is_unknown(waiting: list) -> None:
    state = HpaState()
    decision = decide_on_queue_depth(waiting, 0, 8, state, now_s=0.0)
    assert decision.desired_replicas is None
    assert decision.reason == "QueueDepthUnknown"
    assert decision.state is state


def test_it_uses_headroom_defaults_for_queue_depth() -> None:
    policy = QueueDepthPolicy()
    assert policy.target_waiting_per_replica == 5.0 and policy.tolerance == 0.1
    assert policy.behavior.scale_up.stabilization_window_s == 0
    assert policy.behavior.scale_down.stabilization_window_s == 300


def test_it_reads_container_metrics_and_quantity_strings() -> None:
    case = {
        "name": "container cpu as quantities",
        "currentReplicas": 3,
        "spec": {
            "maxReplicas": 10,
            "metrics": [{"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
                         "target": {"type": "Utilization", "averageUtilization": 30}}}],
            "behavior": None,
        },
        "pods": [
            {"name": "a", "cpuRequestMilli": "1", "metrics": ["300m"]},
            {"name": "b", "cpuRequestMilli": 1000, "metrics": [500]},
            {"name": "c", "cpuRequestMilli": 1000, "metrics": [700]},
        ],
    }
    assert run_case(case) == {"name": "container cpu as quantities", "replicas": 5}
