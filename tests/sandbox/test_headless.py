"""`manage.py demo --headless`: the scenario in the sandbox under Headroom and keda-queue, one JSON object.

Service tier: the real sandbox, Prometheus (Debian's binary), the control loop and the test database. The
scored run is shortened by speed and a lighter base rate (the scenario's shape is unchanged).
"""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from sandbox import scenarios
from sandbox.registration import register
from sandbox.runtime import Sandbox, SandboxConfig
from scaling import services
from scaling.models import Proposal

REPORT_KEYS = {"scenario", "requests", "slo_attainment", "ttft_ms", "e2e_ms", "proposals", "max_ready_replicas",
               "gpu_hours", "cost_usd", "fallback_share", "fallback", "incidents", "alerts", "baseline"}


def _stale_proposal_of_an_earlier_demo() -> Proposal:
    """What a previous demo run leaves behind: its sandbox cluster with a proposal still pending."""
    with Sandbox(SandboxConfig(pools=1, scenario="idle", prometheus=False, cold_start_s=0.0)) as earlier:
        register(earlier, team_slug="ml-platform")
    pool = Pool.objects.get(cluster__name="sandbox")
    return services.propose(pool, 4, "manual", core.Actor(user=None, channel=Channel.CLI), current=1,
                            reasons=[{"code": "Manual", "detail": "left over"}])


@pytest.mark.prometheus
@pytest.mark.django_db(transaction=True)
def test_it_runs_both_policies_and_reports_every_key(settings, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    settings.KUBERNETES_ENABLED = settings.PROMETHEUS_ENABLED = True
    call_command("seed_demo", stdout=io.StringIO())
    stale = _stale_proposal_of_an_earlier_demo()
    monkeypatch.setattr(scenarios, "BASE_RPS_PER_POOL", 1.0)  # 10 req/s in the surge: two replicas
    out, err = io.StringIO(), io.StringIO()

    call_command("demo", "--headless", "--scenario", "surge-10x", "--speed", "8", "--auto-approve-after-s", "15",
                 "--json", stdout=out, stderr=err)

    report = json.loads(out.getvalue())  # stdout holds the JSON alone
    assert REPORT_KEYS <= report.keys()
    assert report["scenario"] == "surge-10x" and report["fallback_share"] is None
    assert report["requests"]["sent"] > 100 and report["requests"]["succeeded"] > 0
    assert 0.0 <= report["slo_attainment"] <= 1.0
    for series in ("ttft_ms", "e2e_ms"):
        for window in ("overall", "surge"):
            p = report[series][window]
            assert 0 < p["p50"] <= p["p95"] <= p["p99"]
    assert report["ttft_ms"]["overall"]["p50"] <= report["e2e_ms"]["overall"]["p50"]
    assert 1 <= report["max_ready_replicas"] <= 10 and report["gpu_hours"] > 0 and report["cost_usd"] >= 0
    assert report["proposals"], "the surge brought no proposal"
    for proposal in report["proposals"]:
        times = [proposal[key] for key in ("created_s", "approved_s", "executed_s", "ready_s") if proposal[key] is not None]
        assert times == sorted(times), proposal
        assert proposal["channel"] in ("policy", "simulated-on-call", None)
    assert report["incidents"]["count"] == len(report["incidents"]["items"])
    assert report["alerts"]["count"] == len(report["alerts"]["items"])
    baseline = report["baseline"]
    assert baseline["policy"] == "keda-queue" and baseline["requests"]["sent"] == report["requests"]["sent"]
    assert 0.0 <= baseline["slo_attainment"] <= 1.0 and baseline["scale_events"]
    assert set(baseline["simulator"]) == {"keda-queue", "headroom"}
    assert "[keda-queue]" in err.getvalue()  # progress goes to stderr

    # The earlier run's proposal is gone with its sandbox, and the audit log says so.
    assert stale.pk not in {proposal["id"] for proposal in report["proposals"]}
    assert not Proposal.objects.filter(pk=stale.pk).exists()
    assert AuditEvent.objects.filter(action="delete", object_type__icontains="cluster").exists()


@pytest.mark.parametrize("arguments, message", [
    (["--headless", "--auto-approve-after-s", "-1"], "--auto-approve-after-s must be 0 or more"),
    (["--headless", "--scenario", "surge"], "--headless needs a scenario with an end"),
    (["--headless", "--pools", "2"], "--headless runs one pool"),
    (["--headless", "--speed", "0"], "--speed must be above 0"),
    (["--json"], "--json needs --headless"),
    (["--auto-approve-after-s", "30"], "--auto-approve-after-s needs --headless"),
])
def test_it_refuses_bad_arguments_with_a_message_naming_them(settings, arguments: list[str], message: str) -> None:  # noqa: ANN001
    settings.KUBERNETES_ENABLED = True
    with pytest.raises(CommandError, match=message):
        call_command("demo", *arguments)


def test_it_refuses_an_unknown_scenario_through_the_parser() -> None:
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("demo", "--headless", "--scenario", "no-such")
