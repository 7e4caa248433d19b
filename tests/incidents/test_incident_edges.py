"""Edges of the incident workflow an audit found: a pool with an open incident is not deleted (its cascade
erased it), a pre-scale step rejected from Slack is failed at once for skip and run
(not only once someone read the run), and at one instant the timeline puts causes before their effects."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.test import Client
from django.utils.html import escape

from controlplane import services as core
from controlplane.choices import AuditAction, Channel as ActorChannel
from controlplane.models import AuditEvent, Pool, Team
from incidents import incidents, playbooks, timeline
from incidents.choices import AlertState, IncidentState, RunStepState
from incidents.models import Alert, AlertEvent, Channel, Incident, IncidentEvent, Notification, PlaybookRun
from scaling import services as scaling
from scaling.models import Proposal

from tests.core.conftest import token_client
from tests.incidents.conftest import Receiver
from tests.incidents.test_alerts import HOOK, T0, alert_of, evaluate
from tests.incidents.test_incidents import fire_ttft_p95

OUTAGE = {"ready_replicas": 0.0, "request_rate_rps": 3.0}


def _web(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _kept(pool: Pool) -> tuple[int, ...]:
    """What the pool's cascade would erase: incidents, their events, alerts, their events, notifications."""
    return (Incident.objects.filter(pool=pool).count(), IncidentEvent.objects.filter(incident__pool=pool).count(),
            Alert.objects.filter(pool=pool).count(), AlertEvent.objects.filter(alert__pool=pool).count(),
            Notification.objects.filter(alert__pool=pool).count())


def test_it_refuses_to_delete_a_pool_with_an_open_incident_until_it_is_resolved(
        pool: Pool, alice: User, bob: User, slack_channel: Channel, receiver: Receiver) -> None:
    evaluate(pool, T0, **OUTAGE)
    evaluate(pool, T0 + timedelta(seconds=30), **OUTAGE)
    incident, alert = Incident.objects.get(pool=pool), alert_of(pool, "outage")
    assert incident.state == IncidentState.OPEN and len(receiver.at(HOOK)) == 1  # the on-call was paged
    before = _kept(pool)

    answer = token_client(bob).delete(f"/api/v1/pools/{pool.pk}/")
    assert answer.status_code == 409, answer.content[:300]
    detail = answer.json()["detail"]
    assert f"incident #{incident.pk} (P0, open)" in detail and "resolve it first" in detail
    page = _web(bob).post(f"/pool/{pool.pk}/delete/")
    assert page.status_code == 409 and escape(detail) in page.content.decode()  # the web says the same
    # Nothing deleted, nothing recorded as deleted (as for the other refusals: a refusal writes nothing).
    assert Pool.objects.filter(pk=pool.pk).exists() and _kept(pool) == before
    assert not AuditEvent.objects.filter(action=AuditAction.DELETE).exists()

    incidents.resolve(incident.pk, core.Actor(alice, ActorChannel.API), "capacity back")
    assert alert.state == AlertState.FIRING  # a pool being taken down keeps firing; it must still go
    assert token_client(bob).delete(f"/api/v1/pools/{pool.pk}/").status_code == 204


def test_an_active_alert_alone_does_not_hold_a_pool(pool: Pool, bob: User) -> None:
    """A pool whose Deployment is gone reads no signals and its alerts fire: held by them, it could never go."""
    evaluate(pool, T0, **OUTAGE)
    assert alert_of(pool, "outage").state == AlertState.PENDING and not Incident.objects.exists()

    assert token_client(bob).delete(f"/api/v1/pools/{pool.pk}/").status_code == 204
    assert not Alert.objects.filter(pool_id=pool.pk).exists()


def test_it_deletes_a_pool_whose_alerts_never_fired(pool: Pool, bob: User, ml_team: Team) -> None:
    quiet = Pool.objects.create(cluster=pool.cluster, team=ml_team, name="quiet", namespace="inference",
                                deployment="vllm-quiet", model_name="m", gpu_type="H100", min_replicas=1, max_replicas=2)
    evaluate(pool, T0, **OUTAGE)  # the other pool's alert is no reason to keep this one
    assert token_client(bob).delete(f"/api/v1/pools/{quiet.pk}/").status_code == 204


def _rejected_prescale(pool: Pool, alice: User, bob: User) -> PlaybookRun:
    """A run whose pre-scale step waits on a proposal that bob has just rejected from Slack (nobody read the run)."""
    fire_ttft_p95(pool)
    actor = core.Actor(alice, ActorChannel.API)
    playbook = playbooks.save(actor, pool.team, "surge",
                              steps=[playbooks.StepSpec("Pre-scale", "prescale", {"buffer": 0.5})])
    run = playbooks.start_run(Incident.objects.get(), playbook, actor)
    step = playbooks.run_step(run.pk, 1, actor)
    assert step.state == RunStepState.WAITING_APPROVAL
    scaling.reject(step.proposal_id, core.Actor(bob, ActorChannel.SLACK), "not now")
    return run


def test_it_skips_a_prescale_step_rejected_from_slack_at_once(pool: Pool, alice: User, bob: User) -> None:
    run = _rejected_prescale(pool, alice, bob)
    answer = token_client(alice).post(f"/api/v1/playbook-runs/{run.pk}/skip/", {"position": 1, "reason": "traffic fell"},
                                      format="json")
    assert answer.status_code == 200, answer.content[:300]
    step = run.steps.get(position=1)
    assert (step.state, step.reason) == (RunStepState.SKIPPED, "traffic fell")


def test_it_runs_a_prescale_step_rejected_from_slack_again_in_one_click(pool: Pool, alice: User, bob: User) -> None:
    run = _rejected_prescale(pool, alice, bob)
    first = run.steps.get(position=1).proposal_id
    answer = token_client(alice).post(f"/api/v1/playbook-runs/{run.pk}/run/", {"position": 1}, format="json")
    step = answer.json()["steps"][0]
    assert answer.status_code == 200 and step["state"] == "waiting_approval" and step["proposal"] not in (None, first)
    assert Proposal.objects.count() == 2


def test_it_puts_an_alert_before_the_incident_it_opened_at_the_same_instant(pool: Pool) -> None:
    evaluate(pool, T0, **OUTAGE)
    evaluate(pool, T0 + timedelta(seconds=30), **OUTAGE)
    alert, incident = alert_of(pool, "outage"), Incident.objects.get()
    entries = timeline.timeline(incident, T0 + timedelta(minutes=1))
    # Before: "Incident opened" came first, in the order the sources were registered.
    assert [(entry.kind, entry.title) for entry in entries if entry.at == T0 + timedelta(seconds=30)] == [
        ("alert", f"Alert #{alert.pk} P0 outage firing"), ("incident", f"Incident opened (P0) by alert #{alert.pk}")]
