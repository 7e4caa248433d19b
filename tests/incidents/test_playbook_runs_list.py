"""`GET /api/v1/playbook-runs/?incident=N` (the documented way for automation to follow a run) showed
a pre-scale step as `waiting_approval` after its proposal was rejected from Slack: only the detail and the
actions mirrored the proposal. docs/incidents.md: waiting and running steps mirror their proposal or shift
whenever the run is read."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool
from incidents import playbooks
from incidents.models import Incident
from scaling import services as scaling

from tests.core.conftest import token_client
from tests.incidents.test_incidents import fire_ttft_p95

pytestmark = pytest.mark.django_db


def test_listing_runs_mirrors_a_prescale_rejected_from_slack(pool: Pool, alice: User, bob: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    playbook = playbooks.save(core.Actor(alice, ActorChannel.API), pool.team, "surge",
                              steps=[playbooks.StepSpec("Pre-scale", "prescale", {"buffer": 0.5})])
    run = playbooks.start_run(incident, playbook, core.Actor(alice, ActorChannel.WEB))
    step = playbooks.run_step(run.pk, 1, core.Actor(alice, ActorChannel.WEB))
    scaling.reject(step.proposal_id, core.Actor(bob, ActorChannel.SLACK), "not now")
    listed = token_client(alice).get(f"/api/v1/playbook-runs/?incident={incident.pk}").json()["results"]
    [row] = listed[0]["steps"]
    assert (row["state"], row["reason"]) == ("failed", f"proposal #{step.proposal_id} rejected: not now")
