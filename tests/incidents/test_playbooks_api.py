"""/api/v1/playbooks/ and /api/v1/playbook-runs/: CRUD with 400s naming the field, team roles, a run whose
steps go through the services (a pre-scale waits for approval like any proposal), idempotent re-runs."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import AuditEvent, Pool, Team
from incidents.choices import ChannelKind
from incidents.models import Channel, Incident, Notification, Playbook, PlaybookRunStep
from scaling import services as scaling
from scaling.models import PlannerMemory, Proposal

from tests.core.conftest import token_client
from tests.incidents.test_incidents import dave, fire_ttft_p95  # noqa: F401

URL, RUNS = "/api/v1/playbooks/", "/api/v1/playbook-runs/"
SURGE = {"team": "ml-platform", "name": "surge", "alert_rules": ["ttft_p95", "queue_growth"], "severities": [],
         "steps": [{"title": "Take command", "kind": "checklist"},
                   {"title": "Pre-scale to warm pool + 50 %", "kind": "prescale", "params": {"buffer": 0.5}},
                   {"title": "Tell the on-call channel", "kind": "notify", "params": {"channel": "on-call", "text": "surge"}}]}


@pytest.fixture
def on_call(ml_team: Team) -> Channel:  # noqa: F811
    return Channel.objects.create(team=ml_team, name="on-call", kind=ChannelKind.WEBHOOK,
                                  settings={"url": "https://hooks.example/on-call", "secret": "s" * 32})


@pytest.fixture
def incident(pool: Pool) -> Incident:
    fire_ttft_p95(pool)
    return Incident.objects.get()


def test_an_operator_creates_reads_edits_and_deletes_a_playbook(alice: User, on_call: Channel) -> None:
    client = token_client(alice)
    created = client.post(URL, SURGE, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert [(s["position"], s["kind"]) for s in body["steps"]] == [(1, "checklist"), (2, "prescale"), (3, "notify")]
    assert body["steps"][1]["params"] == {"buffer": 0.5}
    edited = client.put(f"{URL}{body['id']}/", SURGE | {"steps": SURGE["steps"][:1], "severities": ["P0"]}, format="json")
    assert edited.status_code == 200 and len(edited.json()["steps"]) == 1 and edited.json()["severities"] == ["P0"]
    assert AuditEvent.objects.filter(object_type="incidents.playbook", action__in=["create", "update"]).count() == 2
    assert client.delete(f"{URL}{body['id']}/").status_code == 204
    assert not Playbook.objects.exists()


@pytest.mark.parametrize(("change", "field"), [
    ({"name": ""}, "name"),
    ({"alert_rules": ["no_such_rule"]}, "alert_rules"),
    ({"severities": ["P9"]}, "severities"),
    ({"steps": []}, "steps"),
    ({"steps": [{"title": "x", "kind": "teleport"}]}, "steps[1].kind"),
    ({"steps": [{"title": "x", "kind": "fallback"}]}, "steps[1].kind"),
    ({"steps": [{"title": "x", "kind": "breaker"}]}, "steps[1].kind"),
    ({"steps": [{"title": "", "kind": "checklist"}]}, "steps[1].title"),
    ({"steps": [{"title": "x", "kind": "prescale", "params": {"buffer": -1}}]}, "steps[1].params.buffer"),
    ({"steps": [{"title": "x", "kind": "shift", "params": {"to_pool": "nowhere"}}]}, "steps[1].params.to_pool"),
    ({"steps": [{"title": "x", "kind": "notify", "params": {"channel": "nope"}}]}, "steps[1].params.channel"),
])
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(alice: User, on_call: Channel, change: dict,
                                                                field: str) -> None:
    answer = token_client(alice).post(URL, SURGE | change, format="json")
    assert answer.status_code == 400, answer.json()
    assert field in answer.json()
    assert not Playbook.objects.exists()


def test_a_taken_name_is_a_400_on_name(alice: User, on_call: Channel) -> None:
    client = token_client(alice)
    assert client.post(URL, SURGE, format="json").status_code == 201
    assert "name" in client.post(URL, SURGE, format="json").json()


def test_unavailable_kinds_are_listed(alice: User) -> None:
    kinds = {row["kind"]: row for row in token_client(alice).get(URL + "kinds/").json()}
    assert kinds["prescale"]["available"] and kinds["shift"]["available"] and kinds["notify"]["available"]
    assert not kinds["fallback"]["available"] and "not yet available" in kinds["breaker"]["unavailable_reason"]


def test_viewers_read_outsiders_see_nothing_and_neither_writes(alice: User, dave: User, charlie: User,  # noqa: F811
                                                               on_call: Channel) -> None:
    playbook_id = token_client(alice).post(URL, SURGE, format="json").json()["id"]
    assert token_client(dave).get(f"{URL}{playbook_id}/").status_code == 200
    assert token_client(dave).post(URL, SURGE | {"name": "mine"}, format="json").status_code == 403
    assert token_client(dave).delete(f"{URL}{playbook_id}/").status_code == 403
    assert token_client(charlie).get(URL).json()["results"] == []
    assert token_client(charlie).get(f"{URL}{playbook_id}/").status_code == 404
    assert token_client(charlie).post(URL, SURGE | {"name": "theirs"}, format="json").status_code == 403


def test_a_run_goes_through_the_services_and_waits_for_approval(alice: User, bob: User, dave: User,  # noqa: F811
                                                                incident: Incident, on_call: Channel) -> None:
    client = token_client(alice)
    playbook_id = client.post(URL, SURGE, format="json").json()["id"]
    started = client.post(RUNS, {"incident": incident.pk, "playbook": playbook_id}, format="json")
    assert started.status_code == 201
    run = started.json()
    assert [s["state"] for s in run["steps"]] == ["pending"] * 3
    # Starting again answers the same run.
    assert client.post(RUNS, {"incident": incident.pk, "playbook": playbook_id}, format="json").json()["id"] == run["id"]
    assert token_client(dave).post(f"{RUNS}{run['id']}/complete/", {"position": 1}, format="json").status_code == 403

    ticked = client.post(f"{RUNS}{run['id']}/complete/", {"position": 1}, format="json").json()
    assert (ticked["steps"][0]["state"], ticked["steps"][0]["actor_name"], ticked["steps"][0]["channel"]) == \
        ("done", "alice", "api")

    # The loop last read 5 rps at 2 rps per replica: a warm pool of 3 replicas, plus 50 %: 5.
    PlannerMemory.objects.update_or_create(pool=incident.pool, defaults={
        "last_signals": {"request_rate_rps": 5.0}, "last_decision": {"capacity_per_replica_rps": 2.0}})
    ran = client.post(f"{RUNS}{run['id']}/run/", {"position": 2}, format="json").json()["steps"][1]
    proposal = Proposal.objects.get(pk=ran["proposal"])
    assert (proposal.kind, proposal.state, proposal.current_replicas, proposal.target_replicas) == ("prescale", "pending", 1, 5)
    assert (ran["state"], ran["reason"]) == ("waiting_approval", f"waiting for approval #{proposal.pk}")
    # Running it again makes no second proposal.
    again = client.post(f"{RUNS}{run['id']}/run/", {"position": 2}, format="json").json()["steps"][1]
    assert again["proposal"] == proposal.pk and Proposal.objects.count() == 1

    scaling.approve(proposal.pk, core.Actor(bob, ActorChannel.WEB), "go")
    step = client.get(f"{RUNS}{run['id']}/").json()["steps"][1]
    assert (step["state"], step["reason"]) == ("running", f"proposal #{proposal.pk} approved")
    # The step moved when, and because, bob approved: his name and channel, and its own audit record.
    assert (step["actor_name"], step["channel"]) == ("bob", "web")
    mirrored = AuditEvent.objects.get(action="playbook-step-running")
    assert (mirrored.actor_name, mirrored.after["mirrors"], mirrored.after["by"]) == \
        ("auto:system", f"proposal #{proposal.pk}", "bob")

    sent = client.post(f"{RUNS}{run['id']}/run/", {"position": 3}, format="json").json()["steps"][2]
    assert (sent["state"], sent["reason"]) == ("done", "message queued for on-call")
    [message] = Notification.objects.filter(kind="message")
    assert message.channel == on_call and "surge" in message.text and f"incident #{incident.pk}" in message.text
    client.post(f"{RUNS}{run['id']}/run/", {"position": 3}, format="json")
    assert Notification.objects.filter(kind="message").count() == 1
    assert AuditEvent.objects.filter(action__startswith="playbook-step-").count() == 4  # 3 by alice, 1 mirrored


def test_a_rejected_prescale_fails_the_step_which_can_be_skipped(alice: User, bob: User, incident: Incident,
                                                                  on_call: Channel) -> None:
    client = token_client(alice)
    playbook_id = client.post(URL, SURGE, format="json").json()["id"]
    run_id = client.post(RUNS, {"incident": incident.pk, "playbook": playbook_id}, format="json").json()["id"]
    proposal_id = client.post(f"{RUNS}{run_id}/run/", {"position": 2}, format="json").json()["steps"][1]["proposal"]
    scaling.reject(proposal_id, core.Actor(bob, ActorChannel.WEB), "not now")
    step = client.get(f"{RUNS}{run_id}/").json()["steps"][1]
    assert (step["state"], step["reason"]) == ("failed", f"proposal #{proposal_id} rejected: not now")
    skipped = client.post(f"{RUNS}{run_id}/skip/", {"position": 2, "reason": "traffic fell"}, format="json")
    assert skipped.json()["steps"][1]["state"] == "skipped"
    assert client.post(f"{RUNS}{run_id}/complete/", {"position": 2}, format="json").status_code == 409
    assert client.post(f"{RUNS}{run_id}/run/", {"position": 9}, format="json").status_code == 400


def test_a_rejected_prescale_step_run_again_makes_a_new_proposal(alice: User, bob: User, incident: Incident,
                                                                   on_call: Channel) -> None:
    client = token_client(alice)
    playbook_id = client.post(URL, SURGE, format="json").json()["id"]
    run_id = client.post(RUNS, {"incident": incident.pk, "playbook": playbook_id}, format="json").json()["id"]
    first = client.post(f"{RUNS}{run_id}/run/", {"position": 2}, format="json").json()["steps"][1]["proposal"]
    scaling.reject(first, core.Actor(bob, ActorChannel.WEB), "too early")
    assert client.get(f"{RUNS}{run_id}/").json()["steps"][1]["state"] == "failed"
    # The on-call tries again a few minutes later: a new attempt (before, the rejected proposal answered again).
    again = client.post(f"{RUNS}{run_id}/run/", {"position": 2}, format="json").json()["steps"][1]
    assert again["state"] == "waiting_approval" and again["proposal"] not in (None, first)
    assert Proposal.objects.count() == 2
    # While it waits, running it again still makes nothing new.
    assert client.post(f"{RUNS}{run_id}/run/", {"position": 2}, format="json").json()["steps"][1]["proposal"] == \
        again["proposal"] and Proposal.objects.count() == 2


def test_a_notify_step_whose_message_will_not_be_sent_fails_with_the_reason(alice: User, incident: Incident,
                                                                            on_call: Channel, settings) -> None:  # noqa: ANN001
    settings.SLACK_ENABLED = settings.WEBHOOKS_ENABLED = False
    client = token_client(alice)
    playbook_id = client.post(URL, SURGE, format="json").json()["id"]
    run_id = client.post(RUNS, {"incident": incident.pk, "playbook": playbook_id}, format="json").json()["id"]
    step = client.post(f"{RUNS}{run_id}/run/", {"position": 3}, format="json").json()["steps"][2]
    # Before: "done: message queued" for a message the outbox had already skipped.
    assert step["state"] == "failed" and "integration is switched off" in step["reason"], step


def test_a_pool_at_its_maximum_fails_the_prescale_step_with_the_reason(alice: User, pool: Pool, incident: Incident,
                                                                       on_call: Channel) -> None:
    Pool.objects.filter(pk=pool.pk).update(max_replicas=1, min_replicas=1)
    client = token_client(alice)
    playbook_id = client.post(URL, SURGE, format="json").json()["id"]
    run_id = client.post(RUNS, {"incident": incident.pk, "playbook": playbook_id}, format="json").json()["id"]
    step = client.post(f"{RUNS}{run_id}/run/", {"position": 2}, format="json").json()["steps"][1]
    assert step["state"] == "failed" and "maximum" in step["reason"] and not Proposal.objects.exists()


def test_runs_are_scoped_and_a_checklist_step_is_not_run(alice: User, charlie: User, incident: Incident,
                                                          on_call: Channel) -> None:
    client = token_client(alice)
    playbook_id = client.post(URL, SURGE, format="json").json()["id"]
    run_id = client.post(RUNS, {"incident": incident.pk, "playbook": playbook_id}, format="json").json()["id"]
    assert client.post(f"{RUNS}{run_id}/run/", {"position": 1}, format="json").status_code == 409
    assert token_client(charlie).get(f"{RUNS}{run_id}/").status_code == 404
    answer = token_client(charlie).post(RUNS, {"incident": incident.pk, "playbook": playbook_id}, format="json")
    assert answer.status_code in (400, 403)
    assert client.post(RUNS, {"incident": "x", "playbook": playbook_id}, format="json").json().keys() == {"incident"}
    assert PlaybookRunStep.objects.filter(run_id=run_id, state="pending").count() == 3


def test_a_notify_step_is_delivered_by_the_webhook_transport(alice: User, incident: Incident, ml_team: Team,  # noqa: F811
                                                            receiver, allow_loopback) -> None:  # noqa: ANN001
    from incidents.services import deliver

    Channel.objects.create(team=ml_team, name="on-call", kind=ChannelKind.WEBHOOK,
                           settings={"url": receiver.url("/hook"), "secret": "s" * 32})
    client = token_client(alice)
    playbook_id = client.post(URL, SURGE, format="json").json()["id"]
    run_id = client.post(RUNS, {"incident": incident.pk, "playbook": playbook_id}, format="json").json()["id"]
    client.post(f"{RUNS}{run_id}/run/", {"position": 3}, format="json")
    [message] = Notification.objects.filter(kind="message")
    deliver(message.pk)
    [request] = receiver.at("/hook")
    assert request.headers["X-Headroom-Event"] == "playbook.message"
    assert request.json()["summary"] == message.text and Notification.objects.get(pk=message.pk).state == "delivered"


def test_seed_demo_seeds_the_surge_playbook_once_and_a_ttft_incident_offers_it(db) -> None:  # noqa: ANN001
    from django.core.management import call_command

    from incidents import playbooks

    call_command("seed_demo", stdout=None)
    call_command("seed_demo", stdout=None)
    surge = Playbook.objects.get(team__slug="ml-platform", name="surge")
    assert Playbook.objects.filter(name="surge").count() == 2  # one per team
    assert surge.alert_rules == ["ttft_p95", "queue_growth"]
    assert list(surge.steps.values_list("kind", flat=True)) == ["checklist", "prescale", "checklist"]
    pool = Pool.objects.get(cluster__name="gpu-us-east", name="chat-llama-8b")
    fire_ttft_p95(pool)
    assert playbooks.offered_for(Incident.objects.get(pool=pool)) == [surge]
