"""/api/v1/incidents/: team-scoped reads with the timeline, the acknowledge / mitigate / resolve / notes
actions with their 400, 403, 404 and 409 answers, the postmortem as Markdown, and the schema."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane.choices import Role
from controlplane.models import Cluster, Membership, Pool, Team
from incidents.choices import IncidentState
from incidents.models import Incident

from tests.core.conftest import token_client
from tests.incidents.test_incidents import dave, fire_ttft_p95  # noqa: F401

URL = "/api/v1/incidents/"


@pytest.fixture
def incident(pool: Pool) -> Incident:
    fire_ttft_p95(pool)
    return Incident.objects.get()


def test_members_list_and_read_their_teams_incidents_with_the_timeline(incident: Incident, alice: User,
                                                                         dave: User, charlie: User) -> None:  # noqa: F811
    for user in (alice, dave):
        listed = token_client(user).get(URL + "?active=true")
        assert listed.status_code == 200
        [row] = listed.json()["results"]
        assert (row["id"], row["state"], row["severity"], row["team"]) == (incident.pk, "open", "P1", "ml-platform")
        assert row["alerts"] == list(incident.alerts.values_list("pk", flat=True))
    detail = token_client(alice).get(f"{URL}{incident.pk}/").json()
    kinds = [(entry["kind"], entry["object_type"]) for entry in detail["timeline"]]
    assert ("incident", "incidents.incident") in kinds and ("alert", "incidents.alert") in kinds
    assert all(entry["url"] for entry in detail["timeline"])
    assert token_client(charlie).get(URL).json()["results"] == []
    assert token_client(charlie).get(f"{URL}{incident.pk}/").status_code == 404


def test_an_operator_acknowledges_mitigates_and_resolves(incident: Incident, alice: User) -> None:
    client = token_client(alice)
    acknowledged = client.post(f"{URL}{incident.pk}/acknowledge/", {"text": "on it"}, format="json")
    assert acknowledged.status_code == 200
    assert (acknowledged.json()["state"], acknowledged.json()["commander"]) == ("acknowledged", "alice")
    assert client.post(f"{URL}{incident.pk}/acknowledge/").status_code == 200  # her own repeat: no-op
    assert client.post(f"{URL}{incident.pk}/mitigate/", {}, format="json").json()["state"] == "mitigated"
    assert client.post(f"{URL}{incident.pk}/resolve/", {"text": "ready"}, format="json").json()["state"] == "resolved"
    events = list(incident.events.values_list("kind", "channel"))
    assert events[1:] == [("acknowledged", "api"), ("mitigated", "api"), ("resolved", "api")]


def test_a_move_the_state_does_not_allow_is_409_with_the_state(incident: Incident, alice: User, bob: User) -> None:
    token_client(alice).post(f"{URL}{incident.pk}/acknowledge/")
    answer = token_client(bob).post(f"{URL}{incident.pk}/acknowledge/")
    assert answer.status_code == 409
    assert answer.json()["state"] == "acknowledged" and "by alice" in answer.json()["detail"]
    token_client(bob).post(f"{URL}{incident.pk}/resolve/")
    assert token_client(bob).post(f"{URL}{incident.pk}/mitigate/").status_code == 409


def test_viewers_get_403_and_outsiders_404(incident: Incident, dave: User, charlie: User) -> None:  # noqa: F811
    for verb in ("acknowledge", "mitigate", "resolve"):
        assert token_client(dave).post(f"{URL}{incident.pk}/{verb}/").status_code == 403
        assert token_client(charlie).post(f"{URL}{incident.pk}/{verb}/").status_code == 404
    assert token_client(dave).post(f"{URL}{incident.pk}/notes/", {"text": "hi"}, format="json").status_code == 403
    incident.refresh_from_db()
    assert incident.state == IncidentState.OPEN and incident.events.count() == 1


def test_an_operator_of_the_team_whose_cluster_is_not_shared_any_more_gets_403(pool: Pool, alice: User) -> None:
    """The incident's cluster belongs to another team that no longer shares it: like approvals, no action."""
    other = Team.objects.create(name="Infra", slug="infra")
    pool.cluster.team = other
    pool.cluster.save()
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    answer = token_client(alice).post(f"{URL}{incident.pk}/acknowledge/")
    assert answer.status_code == 403 and "not shared" in answer.json()["detail"]


def test_notes_are_201_and_bad_notes_400_naming_the_field(incident: Incident, alice: User) -> None:
    client = token_client(alice)
    created = client.post(f"{URL}{incident.pk}/notes/", {"text": "raise warm pool", "follow_up": True}, format="json")
    assert created.status_code == 201
    assert (created.json()["kind"], created.json()["data"], created.json()["actor_name"]) == (
        "note", {"follow_up": True}, "alice")
    for body, field in (({}, "text"), ({"text": ""}, "text"), ({"text": "x" * 4001}, "text"),
                        ({"text": "ok", "follow_up": "maybe"}, "follow_up")):
        answer = client.post(f"{URL}{incident.pk}/notes/", body, format="json")
        assert answer.status_code == 400 and field in answer.json(), (body, answer.json())
    whitespace = client.post(f"{URL}{incident.pk}/notes/", {"text": "   "}, format="json")
    assert whitespace.status_code == 400 and "text" in whitespace.json()
    assert client.post(f"{URL}{incident.pk}/resolve/", {"text": 5}, format="json").status_code == 200  # text coerced
    assert client.post(f"{URL}{incident.pk}/acknowledge/", "[1]", content_type="application/json").status_code == 400


def test_the_postmortem_is_markdown_with_its_sections(incident: Incident, alice: User) -> None:
    token_client(alice).post(f"{URL}{incident.pk}/notes/", {"text": "add a warm replica", "follow_up": True},
                             format="json")
    answer = token_client(alice).get(f"{URL}{incident.pk}/postmortem/")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/markdown")
    text = answer.content.decode()
    for heading in ("# Postmortem: incident #", "## Summary", "## Impact", "## Timeline", "## Decisions",
                    "## Follow-ups"):
        assert heading in text
    assert "- [ ] add a warm replica (alice)" in text
    assert "Time to first token p95 (ms) ≤ 1000 ms" in text


def test_the_schema_documents_the_incident_endpoints(client, bob: User) -> None:  # noqa: ANN001
    client.force_login(bob)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    for path in ("/api/v1/incidents/", "/api/v1/incidents/{id}/", "/api/v1/incidents/{id}/acknowledge/",
                 "/api/v1/incidents/{id}/mitigate/", "/api/v1/incidents/{id}/resolve/",
                 "/api/v1/incidents/{id}/notes/", "/api/v1/incidents/{id}/postmortem/"):
        assert path in paths, path
    assert set(paths["/api/v1/incidents/{id}/acknowledge/"]["post"]["responses"]) >= {"200", "400", "403", "409"}


def test_the_list_costs_the_same_queries_for_more_incidents(pool: Pool, alice: User,
                                                            django_assert_max_num_queries) -> None:  # noqa: ANN001
    from datetime import timedelta

    from django.utils import timezone

    client = token_client(alice)
    fire_ttft_p95(pool)
    client.get(URL)  # warm up the token's last-used write
    with django_assert_max_num_queries(8) as one:
        assert len(client.get(URL).json()["results"]) == 1
    for pool_index in range(3):
        other = Pool.objects.create(cluster=pool.cluster, team=pool.team, name=f"p{pool_index}", namespace="inference",
                                    deployment=f"d{pool_index}", model_name="m", gpu_type="H100", min_replicas=1,
                                    max_replicas=4)
        Incident.objects.create(team=pool.team, cluster=pool.cluster, pool=other, title="t", severity="P1",
                                opened_at=timezone.now() - timedelta(minutes=pool_index))
    with django_assert_max_num_queries(len(one.captured_queries)):
        assert len(client.get(URL).json()["results"]) == 4
