"""`manage.py demo --headless`: the scenario in the sandbox under Headroom and keda-queue, one JSON object.

Service tier: the real sandbox, Prometheus (Debian's binary), the control loop and the test database. The
scored run is shortened by speed and a lighter base rate (the scenario's shape is unchanged).
"""
from __future__ import annotations

import dataclasses
import io
import json

import pytest
from django.core.management import CommandError, call_command

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from sandbox import headless, scenarios
from sandbox.registration import register
from sandbox.replica import wait_until
from sandbox.runtime import Sandbox, SandboxConfig
from sandbox.traffic import RequestRecord, TraceRequest, TrafficGenerator
from scaling import services
from scaling.models import FallbackPolicy, Proposal

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
@pytest.mark.runs_for_minutes
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
    assert report["scenario"] == "surge-10x"
    assert report["history"]["hours"] == 26.0 and "10x peak for 30 wall minutes" in report["history"]["yesterday"]
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
    # The fallback: a warm pool on the same route, its share of the requests, and what it did.
    fallback = report["fallback"]
    assert fallback["pool"] == "vllm-llama-3-2-1b-l4-fallback" and fallback["of"] == "vllm-llama-3-1-8b-h100"
    assert fallback["warm_replicas"] >= 1 and fallback["max_ready_replicas"] >= fallback["warm_replicas"]
    assert 0.0 <= report["fallback_share"] <= 1.0
    assert fallback["requests"] == round(report["fallback_share"] * report["requests"]["sent"])
    assert fallback["policy"] == {"entry_after_s": 0.0, "exit_after_s": 60.0, "return_step_hold_s": 30.0,
                                  "max_share": 0.9}  # scenario seconds, registered as wall seconds (/ 8)
    assert fallback["gpu_hours"] > 0 and report["gpu_hours"] > fallback["gpu_hours"]
    for activation in fallback["activations"]:
        assert activation["entered_s"] is not None
        assert activation["finished_s"] is None or activation["finished_s"] >= activation["entered_s"]
    assert [e["kind"] for e in fallback["events"]][:1] in ([], ["entered"])
    # Nothing reaches it unless diverted by an activation's weights or spilled by the gateway.
    assert (report["fallback_share"] > 0) <= bool(fallback["activations"] or fallback["spillover"]["spilled_requests"])
    assert fallback["spillover"]["after_s"] == pytest.approx(0.2)  # 0.2 x the 1-s TTFT SLO
    # Each spilled attempt was answered there, failed, or was retried.
    requests = report["requests"]
    assert 0 <= fallback["spillover"]["spilled_requests"] <= fallback["requests"] + requests["failed"] + requests["retries"]
    assert report["second_tick_after_surge_s"] >= scenarios.SURGE_START_S
    assert 0.0 <= report["slo_attainment_after_second_tick"] <= 1.0 and 0.0 <= report["slo_attainment_surge"] <= 1.0
    assert report["baseline"]["second_tick_after_surge_s"] == report["second_tick_after_surge_s"]
    missed = sum(bucket["missed"] for bucket in report["misses_by_15s"])
    assert missed == round((1 - report["slo_attainment"]) * report["requests"]["sent"])
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
    (["--no-fallback"], "--no-fallback needs --headless"),
    (["--no-spillover"], "--no-spillover needs --headless"),
    (["--pools", "2"], "the story plays on one pool"),  # the live demo's default scenario
    (["--scenario", "story", "--history", "-1"], "--history must be 0 or more"),
])
def test_it_refuses_bad_arguments_with_a_message_naming_them(settings, arguments: list[str], message: str) -> None:  # noqa: ANN001
    settings.KUBERNETES_ENABLED = True
    with pytest.raises(CommandError, match=message):
        call_command("demo", *arguments)


def test_it_refuses_an_unknown_scenario_through_the_parser() -> None:
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("demo", "--headless", "--scenario", "no-such")


@pytest.mark.django_db
def test_a_fallback_pool_is_registered_warm_at_weight_0_and_adds_no_traffic() -> None:
    config = SandboxConfig(pools=1, scenario="idle", prometheus=False, cold_start_s=0.0, fallback_replicas=2,
                           speed=4.0)
    # The scenario's rate is the primary's alone: the same trace as without a fallback pool.
    unstarted = Sandbox(dataclasses.replace(config, scenario="steady"))
    alone = scenarios.scenario_trace("steady", 1)
    assert [next(unstarted.trace).t_s for _ in range(50)] == [next(alone).t_s for _ in range(50)]
    with Sandbox(config) as sandbox:
        primary, fallback = sandbox.specs
        assert sandbox.primary_specs == [primary] and sandbox.fallback_spec == fallback
        assert [weight for _, weight in sandbox.cluster.route_weights()] == [100, 0]
        assert fallback.replicas == fallback.min_replicas == 2
        assert wait_until(lambda: len(sandbox.cluster.ready_replicas(primary.namespace, primary.name)) == 1, 30)

        register(sandbox)
        records = TrafficGenerator(sandbox.gateway.url, [TraceRequest(0.0, 10, 2)] * 4).run().records

    pools = {pool.name: pool for pool in Pool.objects.filter(cluster__name="sandbox")}
    assert pools[primary.name].fallback_pool == pools[fallback.name]
    assert pools[fallback.name].min_replicas == 2 and pools[fallback.name].fallback_pool is None
    policy = FallbackPolicy.objects.get(pool=pools[primary.name])
    assert policy.enabled and not policy.requires_approval and policy.exit_after_s == 60.0 / 4
    assert not FallbackPolicy.objects.filter(pool=pools[fallback.name]).exists()
    # Weight 0: the gateway sends the fallback nothing, and each answer names the pool that gave it.
    assert [(record.outcome, record.pool) for record in records] == [("200", primary.name)] * 4


def test_the_headroom_run_spills_over_to_its_fallback_and_the_baseline_has_none() -> None:
    options = headless.HeadlessOptions()
    assert headless._sandbox_config(options, 5).spill_after_s == pytest.approx(0.2)
    assert headless._sandbox_config(options, 0).spill_after_s is None  # keda-queue's run: no fallback pool
    off = dataclasses.replace(options, spillover_wait_share=None)  # --no-spillover
    assert headless._sandbox_config(off, 5).spill_after_s is None
    with pytest.raises(ValueError, match="spill_after_s needs a fallback pool"):
        Sandbox(SandboxConfig(pools=1, scenario="idle", prometheus=False, spill_after_s=0.2))


def test_only_the_headroom_run_gets_yesterdays_history_and_0_hours_is_none() -> None:
    options = headless.HeadlessOptions()
    ours = headless._sandbox_config(options, 5, options.history_hours)
    assert ours.history_hours == 26.0 and ours.history_peak_factor == headless.YESTERDAY_PEAK_FACTOR
    theirs = headless._sandbox_config(options, 0)  # keda-queue's run reads no history
    assert theirs.history_hours == 0.0 and theirs.history_peak_factor == 0.0
    unforeseen = headless._sandbox_config(dataclasses.replace(options, history_hours=0.0), 5, 0.0)
    assert unforeseen.history_peak_factor == 0.0
    # Rates alone: the live trace starts at its own start, not where a replayed history would end.
    trace = Sandbox(dataclasses.replace(ours, prometheus=False)).trace
    assert next(trace).t_s == next(scenarios.scenario_trace("surge-10x", 1)).t_s
    with pytest.raises(ValueError, match="history_peak_factor must be 0"):
        Sandbox(SandboxConfig(pools=1, scenario="idle", prometheus=False, history_peak_factor=-1.0))


def test_the_warm_fallback_is_sized_to_take_the_surge_overflow(monkeypatch: pytest.MonkeyPatch) -> None:
    config = SandboxConfig(pools=1, scenario="surge-10x")
    # 20 req/s surge; one 8b replica serves 6.786 req/s, a 1b replica 5.56, each at 85 %:
    # (20 - 5.77) / 4.73 = 3.01 -> 4, + 1 for the backlog.
    assert headless.fallback_replicas(config) == 5
    monkeypatch.setattr(scenarios, "BASE_RPS_PER_POOL", 1.0)
    assert headless.fallback_replicas(config) == 2  # (10 - 5.77) / 4.73 -> 1, + 1


def test_misses_are_bucketed_by_due_time_and_by_the_pool_that_answered() -> None:
    records = [RequestRecord(1.0, "200", 0.5, 0.1, "a"),  # 0.4 s at 4x: met
               RequestRecord(2.0, "200", 0.9, 0.3, "a"),  # 1.2 s: missed on a
               RequestRecord(16.0, "200", 0.9, 0.3, "b"),
               RequestRecord(17.0, "timeout", None, None, None),
               RequestRecord(31.0, "200", 0.2, 0.1, "b")]
    assert headless._misses_by_bucket(records, 4.0, 1.0) == [
        {"from_s": 0.0, "sent": 2, "missed": 1, "by_pool": {"a": 1}},
        {"from_s": 15.0, "sent": 2, "missed": 2, "by_pool": {"b": 1, "failed": 1}},
    ]


def test_attainment_is_also_counted_in_the_surge_and_from_the_second_tick_after_its_onset() -> None:
    start = scenarios.SURGE_START_S
    # The first tick at or after the onset sees the overload; the second is the first sized on it.
    assert headless.second_tick_after_surge_s([start - 15.0, start + 4.7, start + 19.6, start + 34.7]) == start + 19.6
    assert headless.second_tick_after_surge_s([start - 15.0, start + 4.7]) == start + 2 * headless.TICK_EVERY_S
    records = [RequestRecord(start - 10.0, "200", 0.2, 0.1, "a"),  # before the surge: met
               RequestRecord(start + 1.0, "200", 0.9, 0.3, "a"),  # 1.2 s at 4x: missed
               RequestRecord(start + 20.0, "200", 0.2, 0.1, "b"),
               RequestRecord(start + 30.0, "timeout", None, None, None),  # failed: missed
               RequestRecord(scenarios.SURGE_END_S + 1.0, "200", 0.2, 0.1, "a")]
    assert headless.slo_attainment_from(records, 4.0, 1.0, start + 19.6) == pytest.approx(2 / 3, abs=1e-4)
    assert headless.slo_attainment_from(records, 4.0, 1.0, scenarios.SURGE_END_S + 60.0) is None
    latency = headless._latency(records, 4.0, 1.0)
    assert latency["slo_attainment"] == 0.6 and latency["slo_attainment_surge"] == pytest.approx(1 / 3, abs=1e-4)
