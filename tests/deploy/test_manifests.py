"""deploy/kubernetes validates against the Kubernetes schemas (`kubernetes-validate`), its settings are the
production settings (they pass `check --deploy`), and its RBAC is exactly what Headroom needs."""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.33.0"  # the oldest release we claim; the schemas ship with kubernetes-validate
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}  # CRDs (Prometheus Operator): checked by hand below


def _documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


DOCS = _documents()


def _one(kind: str, name: str) -> dict[str, Any]:
    [doc] = [doc for doc in DOCS if doc["kind"] == kind and doc["metadata"]["name"] == name]
    return doc


def _pod_specs() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc["spec"]["template"]["spec"] for doc in DOCS if doc["kind"] in ("Deployment", "Job")}


@pytest.mark.parametrize("doc", [doc for doc in DOCS if doc["kind"] not in CUSTOM_KINDS],
                         ids=lambda doc: f"{doc['kind']}/{doc['metadata']['name']}")
def test_every_object_validates_against_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)  # raises with the path of the problem


def test_the_validator_catches_a_broken_object() -> None:
    broken = _one("Deployment", "headroom-web") | {"spec": {"replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_it_ships_every_piece_headroom_runs_on() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in DOCS}
    assert {("Deployment", "headroom-web"), ("Deployment", "headroom-worker"), ("Deployment", "headroom-beat"),
            ("Job", "headroom-migrate"), ("ConfigMap", "headroom-config"), ("Secret", "headroom"),
            ("Service", "headroom"), ("ServiceAccount", "headroom"), ("ClusterRole", "headroom-controller"),
            ("ClusterRoleBinding", "headroom-controller"), ("ServiceMonitor", "headroom"),
            ("PodDisruptionBudget", "headroom-web"), ("PodDisruptionBudget", "headroom-worker")} <= kinds


def test_exactly_one_beat_even_during_a_rollout() -> None:
    beat = _one("Deployment", "headroom-beat")["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"


def test_the_migrations_job_migrates() -> None:
    [container] = _pod_specs()["headroom-migrate"]["containers"]
    assert container["command"][-3:] == ["manage.py", "migrate", "--noinput"]


def test_every_pod_reads_the_shipped_configuration_and_runs_locked_down() -> None:
    for name, spec in _pod_specs().items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for container in spec["containers"]:
            sources = {(ref.get("configMapRef") or ref.get("secretRef"))["name"] for ref in container["envFrom"]}
            assert sources == {"headroom-config", "headroom"}, name
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert "memory" in container["resources"]["limits"], name


def test_every_configured_variable_is_a_documented_setting() -> None:
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", (ROOT / "docs" / "settings.md").read_text(), re.M))
    configured = set(_one("ConfigMap", "headroom-config")["data"]) | set(_one("Secret", "headroom")["stringData"])
    assert configured - documented == set()  # a typo would silently fall back to a default


def _production_environment() -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.endswith(
        ("_ENABLED", "_NETWORKS")) and key not in ("DEBUG", "HTTPS_ONLY", "SECURE_PROXY_SSL_HEADER", "ALLOWED_HOSTS")}
    environment |= _one("ConfigMap", "headroom-config")["data"] | _one("Secret", "headroom")["stringData"]
    # The shipped secrets are placeholders to replace, as an operator does.
    return environment | {"SECRET_KEY": secrets.token_urlsafe(50), "METRICS_TOKEN": secrets.token_urlsafe(24)}


@pytest.mark.parametrize("name", ["SECRET_KEY", "METRICS_TOKEN", "SLACK_SIGNING_SECRET"])
def test_a_secret_left_at_its_shipped_placeholder_stops_start_up(name: str) -> None:
    # The placeholder is published with the manifests: a key everyone knows signs sessions as anyone, and a
    # metrics token everyone knows reads every team's fleet. A forgotten one must not start.
    environment = _production_environment() | {"SLACK_SIGNING_SECRET": secrets.token_urlsafe(24)}
    environment[name] = _one("Secret", "headroom")["stringData"].get(name, "REPLACE-with-the-app-signing-secret")
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=environment, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert f"{name} still holds the placeholder from deploy/kubernetes/config.yaml" in result.stderr


def test_the_shipped_settings_are_production_settings_and_pass_check_deploy() -> None:
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                            env=_production_environment(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
    script = ("from django.conf import settings as s; print(s.DEBUG, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, "
              "s.LOG_FORMAT, s.CELERY_TASK_ALWAYS_EAGER, '127.0.0.0/8' in s.CLUSTER_ALLOWED_NETWORKS)")
    shown = subprocess.run([sys.executable, "manage.py", "shell", "-v", "0", "-c", script], cwd=ROOT,
                           env=_production_environment(), capture_output=True, text=True, timeout=120)
    assert shown.stdout.split() == ["False", "True", "True", "json", "False", "False"], shown.stderr


def test_rbac_grants_exactly_what_headroom_uses() -> None:
    rules = {(group, resource): set(rule["verbs"]) for rule in _one("ClusterRole", "headroom-controller")["rules"]
             for group in rule["apiGroups"] for resource in rule["resources"]}
    assert rules == {
        ("", "pods"): {"get", "list", "watch", "patch"},
        ("apps", "deployments"): {"get", "list", "watch"},
        ("apps", "deployments/scale"): {"get", "patch", "update"},
        ("gateway.networking.k8s.io", "httproutes"): {"get", "list", "watch", "patch"},
        ("networking.istio.io", "virtualservices"): {"get", "list", "watch", "patch"},
        ("keda.sh", "scaledobjects"): {"get", "list", "watch", "patch"},
        ("autoscaling", "horizontalpodautoscalers"): {"get", "list", "watch", "patch"},
    }
    binding = _one("ClusterRoleBinding", "headroom-controller")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "headroom", "namespace": "headroom"}]


def test_the_service_monitor_scrapes_the_web_pods_with_the_metrics_token() -> None:
    monitor = _one("ServiceMonitor", "headroom")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = _one("Service", "headroom")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["credentials"] == {"name": "headroom", "key": "METRICS_TOKEN"}
    assert "METRICS_TOKEN" in _one("Secret", "headroom")["stringData"]


def test_the_alert_rules_use_metrics_headroom_exports() -> None:
    from controlplane import metrics  # noqa: F401 - the exposition's names are asserted in tests/scaling

    exported = {"headroom_cluster_last_tick_age_seconds", "headroom_tick_lateness_seconds_sum",
                "headroom_tick_lateness_seconds_count", "headroom_tick_duration_seconds_bucket",
                "headroom_notification_failures_total", "headroom_channels_disabled", "headroom_tick_failures_total",
                "headroom_proposals_finished_total"}
    rules = [rule for group in _one("PrometheusRule", "headroom")["spec"]["groups"] for rule in group["rules"]]
    for rule in rules:
        used = set(re.findall(r"headroom_[a-z_]+", rule["expr"]))
        assert used <= exported, rule["alert"]
    documented = (ROOT / "docs" / "operations.md").read_text()
    assert all(rule["alert"] in documented for rule in rules)


def test_a_terminating_web_pod_keeps_accepting_until_the_service_has_dropped_it() -> None:
    # gunicorn stops accepting at SIGTERM; the endpoints controller and the ingress drop the pod only after it
    # began terminating. A preStop pause covers that gap, and the grace period covers the pause plus the drain.
    spec = _pod_specs()["headroom-web"]
    [web] = spec["containers"]
    pause_s = web["lifecycle"]["preStop"]["sleep"]["seconds"]
    graceful_s = int(web["command"][web["command"].index("--graceful-timeout") + 1])
    assert pause_s >= 5
    assert spec["terminationGracePeriodSeconds"] > pause_s + graceful_s


def test_the_pod_disruption_budgets_cover_the_web_and_the_workers() -> None:
    for name in ("headroom-web", "headroom-worker"):
        budget = _one("PodDisruptionBudget", name)["spec"]
        deployment = _one("Deployment", name)["spec"]
        assert budget["selector"] == deployment["selector"] and budget["minAvailable"] < deployment["replicas"]
