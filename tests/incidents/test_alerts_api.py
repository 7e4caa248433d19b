"""REST API for alerts (read-only, team-scoped) and silences (operators of the team add and end them),
and the alerts page."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane.choices import Role
from controlplane.models import AuditEvent, Membership, Pool
from incidents import alerts
from incidents.models import Alert, Silence
from scaling.models import PlannerMemory

from tests.core.conftest import token_client


def _outage(pool: Pool) -> Alert:
    now = timezone.now()
    PlannerMemory.objects.update_or_create(pool=pool, defaults={
        "last_signals": {"ready_replicas": 0.0, "request_rate_rps": 2.0},
        "last_decision": {"at": now.isoformat(), "staleness_alert": False}})
    alerts.evaluate_alerts([pool], now)
    alerts.evaluate_alerts([pool], now + timedelta(seconds=30))
    return Alert.objects.get(rule="outage", pool=pool)


def test_it_lists_the_teams_alerts_only(pool: Pool, search_pool: Pool, alice: User, charlie: User,
                                        django_assert_max_num_queries) -> None:  # noqa: ANN001
    alert = _outage(pool)
    _outage(search_pool)
    with django_assert_max_num_queries(8):
        listed = token_client(alice).get("/api/v1/alerts/?active=true").data["results"]
    assert [(a["id"], a["rule"], a["tier"], a["state"], a["group"]) for a in listed] == [
        (alert.pk, "outage", "P0", "firing", f"pool:{pool.pk}")]
    assert listed[0]["summary"].startswith("0 ready replicas while 2.00 req/s arrive")
    assert token_client(charlie).get(f"/api/v1/alerts/{alert.pk}/").status_code == 404
    assert token_client(alice).post("/api/v1/alerts/", {}, format="json").status_code in (403, 405)


def test_an_operator_silences_a_pool_and_ends_the_silence(pool: Pool, alice: User, charlie: User) -> None:
    ends = (timezone.now() + timedelta(hours=2)).isoformat()
    payload = {"team": "ml-platform", "matchers": [{"label": "pool", "value": str(pool.pk)}], "ends_at": ends,
               "comment": "load test until 14:00"}
    created = token_client(alice).post("/api/v1/silences/", payload, format="json")
    assert created.status_code == 201, created.data
    assert created.data["created_by"] == "alice"
    assert _outage(pool).silenced_by_id == created.data["id"]
    assert token_client(charlie).post(f"/api/v1/silences/{created.data['id']}/expire/").status_code == 404
    ended = token_client(alice).post(f"/api/v1/silences/{created.data['id']}/expire/")
    assert ended.status_code == 200 and ended.data["expired_by"] == "alice"
    assert token_client(alice).get("/api/v1/silences/?active=true").data["results"] == []
    assert AuditEvent.objects.filter(object_type="incidents.silence", action="expire_silence").exists()


def test_silence_writes_answer_400_and_403(pool: Pool, alice: User, charlie: User) -> None:
    viewer = User.objects.create_user("dora")
    Membership.objects.create(user=viewer, team=pool.team, role=Role.VIEWER)
    ends = (timezone.now() + timedelta(hours=1)).isoformat()
    good = {"team": "ml-platform", "matchers": [{"label": "rule", "value": "outage"}], "ends_at": ends}
    assert token_client(charlie).post("/api/v1/silences/", good, format="json").status_code in (400, 403)
    assert token_client(viewer).post("/api/v1/silences/", good, format="json").status_code == 403
    bad = token_client(alice).post("/api/v1/silences/", good | {"matchers": [{"label": "colour", "value": "red"}]},
                                   format="json")
    assert bad.status_code == 400 and "label must be one of" in str(bad.data["matchers"])
    past = (timezone.now() - timedelta(hours=1)).isoformat()
    assert token_client(alice).post("/api/v1/silences/", good | {"ends_at": past}, format="json").status_code == 400
    assert not Silence.objects.exists()


def test_the_alerts_page_groups_active_alerts_per_pool(pool: Pool, alice: User) -> None:
    alert = _outage(pool)
    client = Client()
    client.force_login(alice)
    page = client.get("/alerts/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "gpu-us-east/chat-8b" in html and f'id="alert-{alert.pk}"' in html and "0 ready replicas" in html


def test_a_silence_comment_is_a_string_only(pool: Pool, alice: User) -> None:
    ends = (timezone.now() + timedelta(hours=1)).isoformat()
    good = {"team": "ml-platform", "matchers": [{"label": "rule", "value": "outage"}], "ends_at": ends}
    refused = token_client(alice).post("/api/v1/silences/", good | {"comment": 0}, format="json")
    assert refused.status_code == 400 and "comment" in refused.data, refused.data
    assert not Silence.objects.exists()
    assert token_client(alice).post("/api/v1/silences/", good | {"comment": "deploy"}, format="json").status_code == 201


def test_an_empty_choice_filter_is_a_400_naming_it(pool: Pool, alice: User) -> None:
    """`?state=` is not one of the schema's choices (schemathesis found it answered as "no filter")."""
    alert = _outage(pool)
    client = token_client(alice)
    for path, name in (("/api/v1/alerts/?state=", "state"), ("/api/v1/alerts/?tier=&active=false", "tier"),
                       ("/api/v1/proposals/?kind=", "kind"), ("/api/v1/incidents/?state=", "state")):
        response = client.get(path)
        assert response.status_code == 400 and name in response.data, (path, response.status_code)
    assert [a["id"] for a in client.get("/api/v1/alerts/?state=firing").data["results"]] == [alert.pk]
    assert client.get("/api/v1/alerts/?rule=").status_code == 200  # free text: empty means no filter
