"""A surge, end to end through the real pieces: the control loop's decide step (`loop.tick_pool`) reads a
growing queue and slow first tokens, proposes a scale-up; the alert rules open a P1 incident; a person
approves in Slack; the execution scales the Deployment in the sandbox's Kubernetes API and follows the
replicas to Ready. The incident's timeline and postmortem hold the whole story."""
from __future__ import annotations

import time
from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool
from incidents import alerts, postmortem, timeline
from incidents.models import Incident
from sandbox.kube.cluster import SandboxCluster
from scaling import loop, services as scaling
from scaling import report_service
from scaling.choices import ProposalState, ReportState
from scaling.engine.signals import PoolSignals, Reading
from scaling.models import Proposal

from tests.scaling.conftest import NS, kube, kube_pool  # noqa: F401


def surge(pool: Pool, ready: int, queue: float, ttft_s: float) -> PoolSignals:
    values = {"ready_replicas": ready, "desired_replicas": ready, "arriving_replicas": 0, "request_rate_rps": 12.0,
              "running_requests": 2.0 * ready, "queue_depth": queue, "ttft_p95_s": ttft_s, "ttft_p99_s": ttft_s * 1.5,
              "e2e_p95_s": ttft_s + 2.0, "error_rate": 0.0}
    return PoolSignals(pool=pool.name, waiting_per_ready_replica=tuple(Reading(queue / ready, 0.0) for _ in range(ready)),
                       **{name: Reading(float(value), 0.0) for name, value in values.items()})


def test_a_surge_opens_a_p1_incident_whose_timeline_holds_alert_proposal_approval_and_execution(
        kube_pool: Pool, kube: SandboxCluster, alice: User, bob: User) -> None:  # noqa: F811
    Pool.objects.filter(pk=kube_pool.pk).update(
        approval_policy={"auto_approve_reactive": False, "auto_approve_off_hours": False})
    pool = Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules").get(pk=kube_pool.pk)
    start = timezone.now() - timedelta(minutes=4)
    for tick in range(13):  # three minutes of a growing queue at 15-second ticks
        now = start + timedelta(seconds=15 * tick)
        loop.tick_pool(pool, surge(pool, ready=1, queue=20.0 + 10 * tick, ttft_s=1.5 + 0.1 * tick), now)
        alerts.evaluate_alerts([pool], now)

    incident = Incident.objects.get(pool=pool)
    assert (incident.severity, incident.state) == ("P1", "open")
    proposal = Proposal.objects.get(pool=pool, state=ProposalState.PENDING)
    assert proposal.target_replicas > 1

    scaling.approve(proposal.pk, core.Actor(alice, ActorChannel.SLACK), "go")
    scaling.execute(proposal.pk)  # the Celery task's work, here in the test's thread
    deadline = time.monotonic() + 20
    while Proposal.objects.get(pk=proposal.pk).state != ProposalState.SUCCEEDED and time.monotonic() < deadline:
        time.sleep(0.3)
        scaling.advance()
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.SUCCEEDED and proposal.measured_cold_start_s is not None
    assert len(kube.ready_replicas(NS, "vllm-chat-8b")) == proposal.target_replicas

    entries = timeline.timeline(incident)
    titles = [entry.title for entry in entries]
    assert "Alert #%d P1 ttft_p95 firing" % incident.alerts.get(rule="ttft_p95").pk in titles
    assert any(t.startswith(f"Proposal #{proposal.pk} (Reactive") for t in titles), titles
    [approved] = [e for e in entries if e.title == f"Proposal #{proposal.pk} approved"]
    assert (approved.actor, approved.channel, approved.detail, approved.url) == (
        "alice", "slack", "go", f"/approvals/#proposal-{proposal.pk}")
    assert f"Proposal #{proposal.pk} executing" in titles
    assert any(t.startswith(f"Proposal #{proposal.pk} replicas ready after") for t in titles)
    assert [e.at for e in entries] == sorted(e.at for e in entries)

    text = postmortem.render(incident)
    assert f"#{proposal.pk} Reactive" in text and "decided by alice via slack" in text and "ready after" in text

    # What if: the surge's window replayed at other warm-pool settings, its line in the postmortem.
    report = report_service.run(report_service.request_what_if(incident, core.Actor(alice, ActorChannel.WEB),
                                                               enqueue=False).pk)
    assert report.state == ReportState.SUCCEEDED, report.error
    what_if = report.result["what_if"]
    assert what_if["ran"]["requests"] > 1000 and len(what_if["alternatives"]) == 5  # sizes 0-100 by 20, 0 ran
    text = postmortem.render(Incident.objects.get(pk=incident.pk))
    assert what_if["summary"] in text
    # The replay against what the loop recorded in the window: the sandbox's one replica, its TTFT over 1.5 s.
    trust = report.result["observed_vs_replay"]
    assert trust["ready_replicas_max"]["observed"] == 1 and trust["ttft_p95_ms_median"]["observed"] > 1500
    assert "How far to trust it: " + trust["summary"] in text
