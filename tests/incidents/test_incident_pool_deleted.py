"""A deleted pool's incidents stay: an SRE decommissioning a pool still reads its postmortems months later.

The incident keeps the pool's name (`pool_name`) and its own timeline; its `pool` is emptied, which must never
make it read as a system incident (the control loop of a cluster, which has no pool and never had one). A pool
with an active incident is still not deleted.
"""
from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.test import Client

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool, Team
from incidents import alerts, incidents
from incidents.choices import IncidentState
from incidents.models import Incident

from tests.core.conftest import token_client
from tests.incidents.test_alerts import T0, evaluate
from tests.incidents.test_incidents import fire_ttft_p95


def _web(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _resolved_incident(pool: Pool, alice: User) -> Incident:
    """chat-8b's P1 incident, resolved by alice with a follow-up for the postmortem."""
    fire_ttft_p95(pool)
    incident = Incident.objects.get(pool=pool)
    actor = core.Actor(alice, ActorChannel.API)
    incidents.add_note(incident.pk, actor, "raise the warm pool before the launch", follow_up=True)
    incidents.resolve(incident.pk, actor, "capacity back")
    return incident


@pytest.fixture
def deleted(pool: Pool, alice: User, bob: User) -> Incident:
    """The resolved incident of chat-8b, after bob deleted chat-8b through the API."""
    incident = _resolved_incident(pool, alice)
    answer = token_client(bob).delete(f"/api/v1/pools/{pool.pk}/")
    assert answer.status_code == 204, answer.content[:300]
    assert not Pool.objects.filter(pk=pool.pk).exists()
    return incident


def test_it_keeps_the_resolved_incident_of_a_deleted_pool_with_its_timeline(pool: Pool, alice: User, bob: User) -> None:
    incident = _resolved_incident(pool, alice)
    kinds = list(incident.events.values_list("kind", flat=True))

    assert token_client(bob).delete(f"/api/v1/pools/{pool.pk}/").status_code == 204

    kept = Incident.objects.get(pk=incident.pk)
    assert (kept.pool_id, kept.pool_name, kept.state) == (None, "chat-8b", IncidentState.RESOLVED)
    assert kept.pool_deleted and not kept.is_system
    assert list(kept.events.values_list("kind", flat=True)) == kinds  # opened, note, resolved: all there
    assert kept.scope == "gpu-us-east/chat-8b (deleted)"
    page = _web(alice).get("/incidents/")
    assert page.status_code == 200
    assert f'href="/incidents/{incident.pk}/"' in page.content.decode() and "chat-8b (deleted)" in page.content.decode()


def test_its_page_api_detail_and_postmortem_name_the_deleted_pool(deleted: Incident, pool: Pool, alice: User) -> None:
    client = _web(alice)
    for path in (f"/incidents/{deleted.pk}/", f"/incidents/{deleted.pk}/live/"):
        page = client.get(path)
        assert page.status_code == 200, path
        text = page.content.decode()
        assert "gpu-us-east/chat-8b (deleted)" in text and f"/pool/{pool.pk}/" not in text  # named, not linked
        assert "Pool chat-8b has been deleted" in text and "A system incident" not in text
        assert "Resolved by alice" in text and "raise the warm pool before the launch" in text
    # Its alerts went with the pool: the timeline says so instead of "alert #None".
    assert "by an alert since deleted" in client.get(f"/incidents/{deleted.pk}/").content.decode()

    api = token_client(alice)
    detail = api.get(f"/api/v1/incidents/{deleted.pk}/")
    assert detail.status_code == 200, detail.content[:300]
    body = detail.json()
    assert (body["pool"], body["pool_name"], body["pool_deleted"], body["system"]) == (None, "chat-8b", True, False)
    assert [entry["title"] for entry in body["timeline"]][-1] == "Resolved by alice"

    for answer in (client.get(f"/incidents/{deleted.pk}/postmortem.md"), api.get(f"/api/v1/incidents/{deleted.pk}/postmortem/")):
        assert answer.status_code == 200
        text = answer.content.decode()
        assert "P1 incident on pool **gpu-us-east/chat-8b (deleted)**" in text and "system incident" not in text
        assert "Unknown: pool chat-8b has been deleted" in text
        assert "- [ ] raise the warm pool before the launch (alice)" in text

    # Its samples went with the pool: nothing to replay, and the answer says why (not "a system incident").
    replay = api.post(f"/api/v1/incidents/{deleted.pk}/what-if/", {}, format="json")
    assert replay.status_code == 400 and "chat-8b has been deleted" in replay.json()["incident"][0]


def test_it_is_never_taken_for_a_system_incident(deleted: Incident, pool: Pool, alice: User, ml_team: Team) -> None:
    embed = Pool.objects.create(cluster=pool.cluster, team=ml_team, name="embed", namespace="inference",
                                deployment="vllm-embed", model_name="bge", gpu_type="H100", min_replicas=1, max_replicas=2)
    later = T0 + timedelta(hours=1)
    evaluate(embed, later)
    alerts.evaluate_heartbeats(later + timedelta(minutes=2))  # the cluster's control loop stopped: a system incident

    system = Incident.objects.get(pool__isnull=True, pool_name="")
    assert system.pk != deleted.pk and system.is_system and system.scope == "gpu-us-east (control loop)"
    assert Incident.objects.filter(cluster=pool.cluster, pool__isnull=True).count() == 2

    api = token_client(alice)
    listed = {row["id"]: row for row in api.get("/api/v1/incidents/").json()["results"]}
    assert (listed[system.pk]["system"], listed[system.pk]["pool_deleted"]) == (True, False)
    assert (listed[deleted.pk]["system"], listed[deleted.pk]["pool_deleted"]) == (False, True)
    # A team's incidents by pool: the deleted pool's are found by its name.
    by_name = api.get("/api/v1/incidents/", {"team": "ml-platform", "pool_name": "chat-8b"}).json()["results"]
    assert [row["id"] for row in by_name] == [deleted.pk]

    page = _web(alice).get(f"/incidents/{system.pk}/").content.decode()
    assert "A system incident" in page and "chat-8b" not in page


def test_a_pool_with_an_active_incident_is_still_refused_and_kept_once_resolved(pool: Pool, alice: User,
                                                                                bob: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get(pool=pool)

    refused = token_client(bob).delete(f"/api/v1/pools/{pool.pk}/")
    assert refused.status_code == 409 and "resolve it first" in refused.json()["detail"]
    assert Pool.objects.filter(pk=pool.pk).exists() and Incident.objects.get(pk=incident.pk).pool_id == pool.pk

    incidents.resolve(incident.pk, core.Actor(alice, ActorChannel.API), "capacity back")
    assert token_client(bob).delete(f"/api/v1/pools/{pool.pk}/").status_code == 204
    assert Incident.objects.get(pk=incident.pk).pool_name == "chat-8b"


def test_it_names_the_pool_as_it_was_last_called(pool: Pool, alice: User, bob: User) -> None:
    """A pool renamed after its incident: the postmortem names the pool people last knew."""
    incident = _resolved_incident(pool, alice)
    Pool.objects.filter(pk=pool.pk).update(name="chat-8b-old")
    assert token_client(bob).delete(f"/api/v1/pools/{pool.pk}/").status_code == 204
    assert Incident.objects.get(pk=incident.pk).scope == "gpu-us-east/chat-8b-old (deleted)"


def test_the_migration_names_the_pool_of_every_existing_incident(pool: Pool, alice: User) -> None:
    incident = _resolved_incident(pool, alice)
    Incident.objects.filter(pk=incident.pk).update(pool_name="")  # as the rows stood before the field
    migration = importlib.import_module("incidents.migrations.0009_incident_pool_name")

    migration.name_the_pools(apps, None)

    assert Incident.objects.get(pk=incident.pk).pool_name == "chat-8b"
