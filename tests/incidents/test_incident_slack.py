"""Acknowledging an incident from Slack: the alert message carries the button while the incident is open;
a signed click acknowledges once (a repeated delivery is ignored), as the clicking user, within their
team's rights; the user is told what happened."""
from __future__ import annotations

from django.contrib.auth.models import User

from controlplane.models import AuditEvent, Pool
from incidents.choices import IncidentState, SlackOutcome
from incidents.models import Channel, Incident, SlackInteraction

from tests.incidents.conftest import Receiver, link, signed_post
from tests.incidents.test_incidents import fire_ttft_p95

HOOK = "/services/T1/B1/hook"
RESPONSE = "/actions/T1/9/response"


def ack_payload(incident: Incident, channel: Channel, slack_user_id: str, response_url: str,
                action_ts: str = "1764480000.000100", action_id: str = "acknowledge_incident") -> dict:
    return {
        "type": "block_actions", "trigger_id": f"trigger-{action_ts}",
        "user": {"id": slack_user_id, "username": slack_user_id.lower(), "team_id": "T1"}, "team": {"id": "T1"},
        "response_url": response_url,
        "actions": [{"type": "button", "action_id": action_id, "value": str(incident.pk),
                     "action_ts": action_ts, "block_id": f"incident:{incident.pk}:channel:{channel.pk}"}],
    }


def replies(receiver: Receiver, path: str = RESPONSE) -> list[str]:
    return [request.json()["text"] for request in receiver.at(path)]


def test_the_alert_message_carries_an_acknowledge_button_while_the_incident_is_open(
        pool: Pool, slack_channel: Channel, receiver: Receiver) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    [posted] = receiver.at(HOOK)
    [actions] = [block for block in posted.json()["blocks"] if block["type"] == "actions"]
    assert actions["block_id"] == f"incident:{incident.pk}:channel:{slack_channel.pk}"
    button = actions["elements"][0]
    assert (button["action_id"], button["value"], button["text"]["text"]) == (
        "acknowledge_incident", str(incident.pk), f"Acknowledge incident #{incident.pk}")
    assert [b["action_id"] for b in actions["elements"]] == [
        "acknowledge_incident", "mitigate_incident", "resolve_incident", "open_incident"]
    assert actions["elements"][2]["confirm"]["title"]["text"] == "Resolve the incident?"  # final: asks first
    assert actions["elements"][-1]["url"] == f"https://headroom.example/incidents/{incident.pk}/"
    assert f"incident #{incident.pk}> (open)" in str(posted.json()["blocks"])


def test_a_signed_click_acknowledges_once_as_the_linked_user(
        client, pool: Pool, alice: User, slack_channel: Channel, receiver: Receiver,  # noqa: ANN001
        django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    link(alice, "UALICE")
    payload = ack_payload(incident, slack_channel, "UALICE", receiver.url(RESPONSE))
    with django_capture_on_commit_callbacks(execute=True):
        assert signed_post(client, payload).status_code == 200
    incident.refresh_from_db()
    assert (incident.state, incident.commander) == (IncidentState.ACKNOWLEDGED, alice)
    assert list(incident.events.filter(kind="acknowledged").values_list("actor_name", "channel")) == [("alice", "slack")]
    assert AuditEvent.objects.filter(action="acknowledged", channel="slack", actor=alice).count() == 1
    assert replies(receiver) == [f"Incident #{incident.pk} acknowledged: you are its commander."]

    with django_capture_on_commit_callbacks(execute=True):
        assert signed_post(client, payload).status_code == 200  # Slack delivering the same click again
    assert incident.events.filter(kind="acknowledged").count() == 1
    assert SlackInteraction.objects.get().outcome == SlackOutcome.ACKNOWLEDGED
    assert SlackInteraction.objects.get().incident_id == incident.pk
    assert len(replies(receiver)) == 1


def test_a_second_person_is_told_who_has_it(client, pool: Pool, alice: User, bob: User, slack_channel: Channel,
                                            receiver: Receiver, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    link(alice, "UALICE")
    link(bob, "UBOB")
    with django_capture_on_commit_callbacks(execute=True):
        signed_post(client, ack_payload(incident, slack_channel, "UALICE", receiver.url(RESPONSE)))
        signed_post(client, ack_payload(incident, slack_channel, "UBOB", receiver.url("/actions/bob"), "1764480001.1"))
    [told] = replies(receiver, "/actions/bob")
    assert "Nothing changed" in told and "acknowledged by alice" in told
    incident.refresh_from_db()
    assert incident.commander == alice


def test_unlinked_and_outside_users_change_nothing(client, pool: Pool, charlie: User, slack_channel: Channel,
                                                   receiver: Receiver, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    link(charlie, "UCHARLIE")
    with django_capture_on_commit_callbacks(execute=True):
        signed_post(client, ack_payload(incident, slack_channel, "UNOBODY", receiver.url("/actions/nobody")))
        signed_post(client, ack_payload(incident, slack_channel, "UCHARLIE", receiver.url("/actions/charlie"), "2.2"))
    assert "not linked" in replies(receiver, "/actions/nobody")[0]
    assert "operator role" in replies(receiver, "/actions/charlie")[0]
    assert list(SlackInteraction.objects.order_by("pk").values_list("outcome", flat=True)) == [
        SlackOutcome.UNLINKED, SlackOutcome.FORBIDDEN]
    incident.refresh_from_db()
    assert incident.state == IncidentState.OPEN and incident.events.count() == 1


def test_an_unsigned_click_is_refused(client, pool: Pool, alice: User, slack_channel: Channel,  # noqa: ANN001
                                      receiver: Receiver) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    link(alice, "UALICE")
    answer = signed_post(client, ack_payload(incident, slack_channel, "UALICE", receiver.url(RESPONSE)),
                         secret="not-the-secret")
    assert answer.status_code == 401
    incident.refresh_from_db()
    assert incident.state == IncidentState.OPEN


def test_an_operator_resolves_from_slack_and_a_later_message_offers_no_buttons(
        client, pool: Pool, alice: User, bob: User, slack_channel: Channel, receiver: Receiver,  # noqa: ANN001
        django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    link(bob, "UBOB")
    with django_capture_on_commit_callbacks(execute=True):
        signed_post(client, ack_payload(incident, slack_channel, "UBOB", receiver.url(RESPONSE),
                                        action_id="resolve_incident"))
    incident.refresh_from_db()
    assert (incident.state, incident.commander) == (IncidentState.RESOLVED, None)
    assert list(incident.events.filter(kind="resolved").values_list("actor_name", "channel")) == [("bob", "slack")]
    assert replies(receiver) == [f"Incident #{incident.pk} resolved: nobody is its commander."]
    assert SlackInteraction.objects.get().outcome == SlackOutcome.RESOLVED
