"""A late action on an incident someone else moved on named the commander as the one who did it.
Alice acknowledged (she is commander), Bob resolved; Alice then pressed "Mark mitigated" on the old Slack
message and was told "Incident #1 is resolved by alice": she did not resolve it and goes looking in the wrong
place. The 409 of the API and the web says the same."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool
from incidents import incidents
from incidents.models import Channel, Incident

from tests.core.conftest import token_client
from tests.incidents.conftest import Receiver, link, signed_post
from tests.incidents.test_incident_slack import RESPONSE, ack_payload, replies
from tests.incidents.test_incidents import fire_ttft_p95

pytestmark = pytest.mark.django_db


def _acknowledged_by_alice_resolved_by_bob(pool: Pool, alice: User, bob: User) -> Incident:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    incidents.acknowledge(incident.pk, core.Actor(alice, ActorChannel.WEB))
    incidents.resolve(incident.pk, core.Actor(bob, ActorChannel.WEB))
    return incident


def test_a_late_slack_click_names_who_resolved_it(client, pool: Pool, alice: User, bob: User,  # noqa: ANN001
                                                 slack_channel: Channel, receiver: Receiver,
                                                 django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    incident = _acknowledged_by_alice_resolved_by_bob(pool, alice, bob)
    link(alice, "UALICE")
    payload = ack_payload(incident, slack_channel, "UALICE", receiver.url(RESPONSE), action_id="mitigate_incident")
    with django_capture_on_commit_callbacks(execute=True):
        assert signed_post(client, payload).status_code == 200
    [told] = replies(receiver)
    assert "resolved by bob" in told and "by alice" not in told


def test_the_api_409_names_who_resolved_it(pool: Pool, alice: User, bob: User) -> None:
    incident = _acknowledged_by_alice_resolved_by_bob(pool, alice, bob)
    answer = token_client(alice).post(f"/api/v1/incidents/{incident.pk}/mitigate/", {}, format="json")
    assert answer.status_code == 409
    assert "resolved by bob" in answer.json()["detail"]


def test_acknowledged_still_names_the_commander(pool: Pool, alice: User, bob: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    incidents.acknowledge(incident.pk, core.Actor(alice, ActorChannel.WEB))
    with pytest.raises(incidents.IncidentConflict, match="acknowledged by alice"):
        incidents.acknowledge(incident.pk, core.Actor(bob, ActorChannel.SLACK))
