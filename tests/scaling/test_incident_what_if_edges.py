"""An incident's what-if at its edges: a window hours long and still open on a pool whose fallback ran, the
pool's own warm-pool setting named as what ran, and a recording outage inside the window."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from incidents.models import Incident
from scaling import report_service
from scaling.choices import ReportState
from scaling.models import FallbackPolicy, SignalSample, WarmPoolReport

from tests.incidents.test_incidents import fire_ttft_p95


def _incident(pool: Pool, hours: float, fallback: bool = True) -> Incident:
    """`hours` at 30 req/s, still open, after 30 quiet minutes; the pool (warm pool 40 %) has an enabled fallback."""
    start = timezone.now().replace(microsecond=0) - timedelta(hours=hours)
    if fallback:
        spare = Pool.objects.create(cluster=pool.cluster, team=pool.team, name="chat-1b", namespace="inference",
                                    deployment="vllm-chat-1b", model_name="meta-llama/Llama-3.2-1B-Instruct",
                                    gpu_type="L4", min_replicas=2, max_replicas=4)
        Pool.objects.filter(pk=pool.pk).update(fallback_pool=spare)
        FallbackPolicy.objects.create(pool=pool)
    SignalSample.objects.bulk_create(
        SignalSample(pool=pool, at=start - timedelta(minutes=30) + timedelta(seconds=15 * tick),
                     request_rate_rps=30.0 if tick >= 120 else 3.0, ttft_p95_s=2.0, ready_replicas=2)
        for tick in range(int((hours + 0.5) * 240)))
    fire_ttft_p95(pool, start)
    return Incident.objects.get(pool=pool)


def _what_if(incident: Incident, user: User) -> WarmPoolReport:
    report = report_service.request_what_if(incident, core.Actor(user, Channel.API), enqueue=False)
    return report_service.run(report.pk)


def test_a_long_incident_what_if_says_the_fallback_that_ran_is_left_out(pool: Pool, alice: User) -> None:
    """Six hours at 30 req/s are too many requests for the fallback column: what ran is replayed without the
    fallback the incident had. The summary must say so, and nothing may advise a --days a what-if has not."""
    report = _what_if(_incident(pool, 6.0), alice)
    assert report.state == ReportState.SUCCEEDED, report.error
    result = report.result
    assert result["fallback"]["live"] and not result["fallback"]["replayed"]
    assert "--days" not in result["fallback"]["why_not"]
    assert "leaves out" in result["what_if"]["summary"] and "Llama-3.2-1B" in result["what_if"]["summary"]
    fallback_line = next(line for line in result["assumptions"] if line.startswith("Fallback:"))
    assert "not replayed" in fallback_line and "replays each size" not in fallback_line


def test_the_what_if_names_the_pools_own_setting_as_what_ran(pool: Pool, alice: User) -> None:
    """Under the day's peak the 0 % row is the pool's 40 % warm floor with no standing floor on top: calling it
    'the current 0 %' contradicts the pool's page, and the sizes are shares of the last 24 hours' peak."""
    report = _what_if(_incident(pool, 0.3, fallback=False), alice)
    assert report.state == ReportState.SUCCEEDED, report.error
    what_if = report.result["what_if"]
    assert "the current 0 %" not in what_if["summary"] and "40 %" in what_if["summary"]
    assert all("of the peak of the last 24 hours" in alternative["line"] for alternative in what_if["alternatives"])
    assert "current 0 %" not in report.result["observed_vs_replay"]["summary"]


def test_a_what_if_over_a_recording_outage_does_not_advise_days_or_a_trace(pool: Pool, alice: User) -> None:
    incident = _incident(pool, 3.0, fallback=False)
    now = timezone.now()
    SignalSample.objects.filter(pool=pool, at__gte=now - timedelta(hours=2), at__lt=now - timedelta(hours=1)).delete()
    report = _what_if(incident, alice)
    assert report.state == ReportState.FAILED and "gap of 1.0 h" in report.error
    assert "--days" not in report.error and "upload a trace" not in report.error, report.error
