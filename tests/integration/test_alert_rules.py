"""Headroom's own alert rules (deploy/kubernetes/monitoring.yaml), evaluated by Debian's promtool on series written
as its metrics would read: each fires when it should and stays quiet when it should not."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _rules_file(directory: Path) -> Path:
    """The PrometheusRule's groups as a plain rules file, which promtool reads."""
    docs = yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "monitoring.yaml").read_text())
    [rule] = [doc for doc in docs if doc and doc["kind"] == "PrometheusRule"]
    path = directory / "headroom.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def _promtool_test(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: make system-deps installs Debian's prometheus"
    rules = _rules_file(tmp_path)
    spec = tmp_path / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([promtool, "test", "rules", spec.name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


def test_failed_executions_page_a_ticket_past_two_an_hour(tmp_path: Path) -> None:
    # The counter as the cache keeps it: 0, then three failures 10 minutes apart (another cluster's two do not add).
    three = {"series": 'headroom_proposals_finished_total{state="failed",instance="web-1"}',
             "values": "0x10 1x10 2x10 3x40"}
    succeeded = {"series": 'headroom_proposals_finished_total{state="succeeded",instance="web-1"}',
                 "values": "0+5x70"}
    done = _promtool_test(tmp_path, [{
        "interval": "1m", "input_series": [three, succeeded],
        "alert_rule_test": [
            {"eval_time": "25m", "alertname": "HeadroomExecutionsFailing", "exp_alerts": []},  # two: quiet
            {"eval_time": "35m", "alertname": "HeadroomExecutionsFailing", "exp_alerts": [{
                "exp_labels": {"severity": "ticket"},
                "exp_annotations": {"summary": "Scaling changes keep failing: more than 2 in the last hour (their "
                                               "proposals' last_error says why)"}}]},
            {"eval_time": "100m", "alertname": "HeadroomExecutionsFailing", "exp_alerts": []},  # an hour later
        ]}])
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_loop_that_never_ticked_pages_as_a_stalled_one(tmp_path: Path) -> None:
    never = {"series": 'headroom_cluster_last_tick_age_seconds{cluster="gpu-us-east",instance="web-1"}',
             "values": "+Inf +Inf +Inf +Inf +Inf +Inf"}
    done = _promtool_test(tmp_path, [{
        "interval": "1m", "input_series": [never],
        "alert_rule_test": [{"eval_time": "3m", "alertname": "HeadroomLoopStalled", "exp_alerts": [{
            "exp_labels": {"severity": "page", "cluster": "gpu-us-east"},
            "exp_annotations": {"summary": "No control-loop tick recorded for gpu-us-east for over a minute"}}]}]}])
    assert done.returncode == 0, done.stdout + done.stderr
