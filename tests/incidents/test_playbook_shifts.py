"""Playbooks and traffic shifts in the sandbox (Kubernetes API emulator, gateway, emulated replicas): a shift
step starts a real shift (once, however often it is run); an approved pre-scale of a pool with split routing
starts the 80/20 → 95/5 → 100/0 shift by itself; shifts appear in the incident's timeline and page with links."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from incidents import incidents as incident_service, playbooks, timeline
from incidents.choices import IncidentState
from incidents.models import Incident
from scaling import prescale_shift, services as scaling, traffic
from scaling.choices import ProposalKind, ProposalState, ShiftPhase
from scaling.models import Proposal, TrafficShift

from tests.core.conftest import alice, bob, charlie, cluster, ml_team, search_team  # noqa: F401
from tests.scaling.test_traffic import GIVING, RECEIVING, _weights, observe, pools, sandbox  # noqa: F401


def _incident(pool: Pool) -> Incident:
    return Incident.objects.create(team=pool.team, cluster=pool.cluster, pool=pool, title="surge", severity="P1",
                                   opened_at=timezone.now() - timedelta(minutes=1))


def _shift_playbook(pool: Pool, user: User) -> playbooks.Playbook:
    return playbooks.save(core.Actor(user, Channel.API), pool.team, "drain to warm", steps=[
        playbooks.StepSpec("Move traffic to the warm pool", "shift", {"to_pool": "chat-8b-warm", "hold_s": 30})])


def test_a_shift_step_starts_one_shift_and_follows_it_to_completion(sandbox, pools, alice: User, client) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    giving, receiving = pools
    incident = _incident(giving)
    run = playbooks.start_run(incident, _shift_playbook(giving, alice), core.Actor(alice, Channel.WEB))
    step = playbooks.run_step(run.pk, 1, core.Actor(alice, Channel.WEB))
    shift = TrafficShift.objects.get()
    assert (step.state, step.shift_id, shift.from_pool, shift.to_pool) == ("running", shift.pk, giving, receiving)
    assert playbooks.run_step(run.pk, 1, core.Actor(alice, Channel.API)).shift_id == shift.pk
    assert TrafficShift.objects.count() == 1
    now = timezone.now()
    for _ in range(12):
        observe(kube, gateway, pools, now)
        shift = traffic.tick(shift.pk, now=now)
        now += timedelta(seconds=15)
        if shift.phase == ShiftPhase.COMPLETED:
            break
    playbooks.refresh(run)
    step.refresh_from_db()
    assert (step.state, step.reason) == ("done", f"shift #{shift.pk} completed: 100 % on {RECEIVING}")
    entries = [entry for entry in timeline.timeline(incident, now) if entry.kind == "shift"]
    titles = [entry.title for entry in entries]
    assert titles[0].startswith(f"Shift #{shift.pk} started: {GIVING} → {RECEIVING}")
    assert f"Shift #{shift.pk} step 1: 80 % on {RECEIVING}" in titles and f"Shift #{shift.pk} completed" in titles
    assert entries[0].url == f"/pools/{receiving.pk}/#shift-{shift.pk}"
    client.force_login(alice)
    page = client.get(f"/incidents/{incident.pk}/").content.decode()
    assert f"Shift #{shift.pk} step 1: 80 % on {RECEIVING}" in page and f"#shift-{shift.pk}" in page
    assert "Move traffic to the warm pool" in page and f"shift #{shift.pk} completed" in page


def test_a_shift_step_the_route_refuses_fails_with_the_reason(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    giving, _ = pools
    traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API))  # another shift holds the route
    run = playbooks.start_run(_incident(giving), _shift_playbook(giving, alice), core.Actor(alice, Channel.WEB))
    step = playbooks.run_step(run.pk, 1, core.Actor(alice, Channel.WEB))
    assert step.state == "failed" and "already moving traffic" in step.reason and TrafficShift.objects.count() == 1


def test_an_approved_prescale_of_a_split_routed_pool_shifts_the_route_to_it(
        sandbox, pools, alice: User, bob: User, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    giving, receiving = pools
    proposal = scaling.propose(receiving, 2, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1)
    scaling.approve(proposal.pk, core.Actor(bob, Channel.WEB))
    with django_capture_on_commit_callbacks(execute=True):
        scaling.execute(proposal.pk)
        for _ in range(40):
            if Proposal.objects.get(pk=proposal.pk).state == ProposalState.SUCCEEDED:
                break
            scaling.advance()
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.SUCCEEDED
    shift = TrafficShift.objects.get()
    assert (shift.from_pool, shift.to_pool, shift.steps, shift.idempotency_key) == (
        giving, receiving, [80, 95, 100], f"prescale:{proposal.pk}")
    assert prescale_shift.sweep() == 0 and TrafficShift.objects.count() == 1  # the sweep finds it started
    TrafficShift.objects.filter(pk=shift.pk).update(hold_s=30)  # the default 5 minutes, shortened for the test
    now = timezone.now()
    for _ in range(20):
        observe(kube, gateway, pools, now)
        shift = traffic.tick(shift.pk, now=now)
        now += timedelta(seconds=15)
        if shift.phase == ShiftPhase.COMPLETED:
            break
    assert shift.phase == ShiftPhase.COMPLETED and _weights(kube) == {GIVING: 0, RECEIVING: 100}


def test_the_sweep_starts_a_shift_whose_start_was_lost_and_nothing_for_other_kinds(
        sandbox, pools, alice: User, bob: User) -> None:  # noqa: ANN001, F811
    _, receiving = pools
    manual = scaling.propose(receiving, 2, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
    prescale = scaling.propose(receiving, 2, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1)
    for proposal in (manual, prescale):  # the worker died after `succeeded` committed: no on_commit ran
        Proposal.objects.filter(pk=proposal.pk).update(state=ProposalState.SUCCEEDED, finished_at=timezone.now())
    assert prescale_shift.sweep() == 1
    assert TrafficShift.objects.get().idempotency_key == f"prescale:{prescale.pk}"
    assert prescale_shift.sweep() == 0 and TrafficShift.objects.count() == 1


def test_no_shift_when_the_pool_already_carries_the_route(sandbox, pools, alice: User) -> None:  # noqa: ANN001, F811
    giving, _ = pools
    prescale = scaling.propose(giving, 2, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1)
    Proposal.objects.filter(pk=prescale.pk).update(state=ProposalState.SUCCEEDED, finished_at=timezone.now())
    assert prescale_shift.start_for(prescale.pk) is None and not TrafficShift.objects.exists()


def test_a_fallback_pool_on_the_route_is_no_split_to_shift_from(sandbox, pools) -> None:  # noqa: ANN001, F811
    """The headless demo's primary shares its route with its warm fallback: a pre-scale of either must not
    start a shift between them (the sweep logged "already carries the traffic" every beat)."""
    giving, receiving = pools
    assert prescale_shift.giving_pool(receiving) == giving  # two pools on one route: a split
    Pool.objects.filter(pk=receiving.pk).update(fallback_pool=giving)
    receiving.refresh_from_db()
    assert prescale_shift.giving_pool(receiving) is None
    assert prescale_shift.giving_pool(giving) is None  # nor the other way


def test_the_incident_page_offers_the_playbook_and_runs_steps_with_htmx(pools, alice: User, client) -> None:  # noqa: ANN001, F811
    giving, _ = pools
    playbook = playbooks.save(core.Actor(alice, Channel.API), giving.team, "surge", severities=["P1"], steps=[
        playbooks.StepSpec("Take command", "checklist"), playbooks.StepSpec("Pre-scale", "prescale")])
    incident = _incident(giving)
    client.force_login(alice)
    page = client.get(f"/incidents/{incident.pk}/").content.decode()
    assert "Start surge" in page
    started = client.post(f"/incidents/{incident.pk}/playbooks/{playbook.pk}/start/", HTTP_HX_REQUEST="true")
    run = incident.playbook_runs.get()
    assert started.status_code == 200 and "Take command" in started.content.decode()
    done = client.post(f"/incidents/{incident.pk}/runs/{run.pk}/steps/1/complete/", HTTP_HX_REQUEST="true")
    assert 'class="step step-done"' in done.content.decode()
    waiting = client.post(f"/incidents/{incident.pk}/runs/{run.pk}/steps/2/run/", HTTP_HX_REQUEST="true").content.decode()
    proposal = Proposal.objects.get(pool=giving)
    assert f"waiting for approval #{proposal.pk}" in waiting and f"#proposal-{proposal.pk}" in waiting
    conflict = client.post(f"/incidents/{incident.pk}/runs/{run.pk}/steps/1/complete/", HTTP_HX_REQUEST="true")
    assert conflict.status_code == 200  # ticking twice changes nothing
    incident_service.resolve(incident.pk, core.Actor(alice, Channel.WEB))
    assert Incident.objects.get(pk=incident.pk).state == IncidentState.RESOLVED
    assert "Start surge" not in client.get(f"/incidents/{incident.pk}/").content.decode()
