"""The notification path at its edges: odd requests to the Slack endpoint, receivers that echo secrets or
refuse one payload, a message the client library will not build, Slack switched off between two attempts,
a channel deleted during a send, duplicate names and Slack links made at the same moment."""
from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.utils import timezone
from slack_sdk.signature import SignatureVerifier

from controlplane import services as core
from incidents import services
from incidents.choices import ChannelKind, NotificationState
from incidents.models import Channel, Notification
from incidents.transports.slack import SlackTransport

from tests.core.conftest import token_client
from tests.incidents.conftest import SIGNING_SECRET, propose

HOOK = "/services/T1/B1/hook"
INTERACTIONS = "/integrations/slack/interactions/"


@pytest.mark.parametrize("timestamp", ["²", "1" * 400, "9" * 5000])
def test_an_odd_timestamp_is_a_401_before_any_signature_check(client, db, timestamp: str) -> None:  # noqa: ANN001
    client.raise_request_exception = False
    body = urlencode({"payload": json.dumps({"type": "block_actions"})})
    answer = client.post(INTERACTIONS, body, content_type="application/x-www-form-urlencoded",
                         HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp, HTTP_X_SLACK_SIGNATURE="v0=" + "0" * 64)
    assert answer.status_code == 401


def test_a_signed_but_deeply_nested_payload_is_ignored(client, db) -> None:  # noqa: ANN001
    client.raise_request_exception = False
    body = urlencode({"payload": "[" * 100_000 + "]" * 100_000})
    stamp = str(int(time.time()))
    signature = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=stamp, body=body)
    answer = client.post(INTERACTIONS, body, content_type="application/x-www-form-urlencoded",
                         HTTP_X_SLACK_REQUEST_TIMESTAMP=stamp, HTTP_X_SLACK_SIGNATURE=signature)
    assert answer.status_code == 200


def _deliver_all() -> list:
    services.fan_out()
    return [services.deliver(pk) for pk in services.due_notifications()]


def test_an_echoed_url_is_redacted_before_it_is_cut(pool, alice, receiver, allow_loopback) -> None:  # noqa: ANN001
    path, query = "/hooks/PATHSECRET0123456789", "token=QUERYSECRET0123456789abcdefQUERYSECRET"
    # A standard 404 page quotes the whole address, past the 200 characters an error keeps.
    page = ('<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">\n<html><head>\n<title>404 Not Found</title>\n'
            f"</head><body>\n<h1>Not Found</h1>\n<p>The requested URL {path}?{query} was not found.</p>\n</body></html>")
    receiver.answers[f"{path}?{query}"] = (404, page.encode(), {})
    webhook = Channel.objects.create(team=pool.team, name="pager", kind=ChannelKind.WEBHOOK,
                                     settings={"url": receiver.url(f"{path}?{query}"), "secret": "whsec-0123456789abcdef"})
    slack_path = "/services/T0AAAAAAA/B0BBBBBBBBB/SLACKSECRETxxxxxxxxxxxxx"
    receiver.answers[slack_path] = (500, ("x" * 50 + " POST " + slack_path).encode(), {})  # cut at 100
    slack = Channel.objects.create(team=pool.team, name="on-call", kind=ChannelKind.SLACK,
                                   settings={"webhook_url": receiver.url(slack_path)})
    propose(pool, alice)
    _deliver_all()
    webhook.refresh_from_db()
    slack.refresh_from_db()
    seen = " ".join([webhook.last_error, webhook.disabled_reason, slack.last_error,
                     *Notification.objects.values_list("last_error", flat=True)])
    assert webhook.last_error.startswith("404 from http://127.0.0.1") and slack.last_error.startswith("Slack answered 500")
    assert "SECRET" not in seen


def test_a_receiver_refusing_one_payload_keeps_its_channel(pool, alice, receiver, allow_loopback) -> None:  # noqa: ANN001
    channel = Channel.objects.create(team=pool.team, name="pager", kind=ChannelKind.WEBHOOK,
                                     settings={"url": receiver.url("/relay"), "secret": "whsec-0123456789abcdef"})
    receiver.answers["/relay"] = (422, b'{"error": "unknown event type"}', {})
    propose(pool, alice)
    assert [delivery.state for delivery in _deliver_all()] == [NotificationState.FAILED]
    channel.refresh_from_db()
    assert channel.enabled and "422" in channel.last_error
    receiver.answers["/relay"] = (404, b"gone", {})  # its address gone: that stops the channel
    propose(pool, alice, target=5)
    _deliver_all()
    channel.refresh_from_db()
    assert not channel.enabled and "404" in channel.disabled_reason


def test_a_message_the_library_will_not_build_is_retried_then_failed(settings, pool, alice, slack_channel,  # noqa: ANN001
                                                                     receiver, monkeypatch) -> None:
    def refuse(self, notification) -> None:  # noqa: ANN001
        raise ValueError("text attribute cannot exceed 3000 characters")

    monkeypatch.setattr(SlackTransport, "notify", refuse)
    propose(pool, alice)
    [pk] = services.fan_out()
    now = timezone.now()
    for _ in range(settings.NOTIFY_MAX_ATTEMPTS + 2):
        now += timedelta(hours=1)
        for due in services.due_notifications(now):
            services.deliver(due, now)  # a worker's task: never raises
    notification = Notification.objects.get(pk=pk)
    assert (notification.state, notification.attempts) == (NotificationState.FAILED, settings.NOTIFY_MAX_ATTEMPTS)
    assert "ValueError: text attribute cannot exceed" in notification.last_error


def test_a_long_escaped_reason_is_cut_to_slacks_limit_and_sent(pool, alice, slack_channel, receiver) -> None:  # noqa: ANN001
    pool.team.name = "A&" * 50  # '&' is '&amp;' in Slack's markup
    pool.team.save()
    answer = token_client(alice).post("/api/v1/proposals/", {"pool": pool.pk, "target_replicas": 3,
                                                             "reason": "&" * 500}, format="json")
    assert answer.status_code == 201
    assert [delivery.state for delivery in _deliver_all()] == [NotificationState.DELIVERED]
    [post] = receiver.at(HOOK)
    sections = [block for block in json.loads(post.body)["blocks"] if block["type"] == "section"]
    assert all(len(block["text"]["text"]) <= 3000 for block in sections)


def test_a_retry_due_after_slack_is_switched_off_is_skipped(settings, pool, alice, slack_channel, receiver) -> None:  # noqa: ANN001
    receiver.answers[HOOK] = (503, b"down", {})
    propose(pool, alice)
    [pk] = services.fan_out()
    assert services.deliver(pk).state == NotificationState.PENDING
    settings.SLACK_ENABLED = False
    receiver.answers[HOOK] = (200, b"ok", {})
    later = timezone.now() + timedelta(hours=2)
    for due in services.due_notifications(later):
        services.deliver(due, later)
    notification = Notification.objects.get(pk=pk)
    assert notification.state == NotificationState.SKIPPED and "switched off" in notification.last_error
    assert len(receiver.at(HOOK)) == 1


def test_a_channel_deleted_during_its_send_ends_the_delivery_quietly(pool, alice, slack_channel, receiver,  # noqa: ANN001
                                                                     monkeypatch) -> None:
    real = SlackTransport.notify

    def notify_then_delete(self, notification) -> None:  # noqa: ANN001
        real(self, notification)
        Channel.objects.filter(pk=self.channel.pk).delete()  # an admin removes the channel meanwhile

    monkeypatch.setattr(SlackTransport, "notify", notify_then_delete)
    propose(pool, alice)
    [pk] = services.fan_out()
    assert services.deliver(pk) is None
    assert not Channel.objects.exists() and not Notification.objects.exists()


def test_a_generated_webhook_secret_is_shown_once(client, bob, ml_team) -> None:  # noqa: ANN001
    api = token_client(bob)
    created = api.post("/api/v1/channels/", {"team": "ml-platform", "name": "pager", "kind": "webhook",
                                             "settings": {"url": "https://pager.example/hook"}}, format="json")
    secret = Channel.objects.get().settings["secret"]
    assert created.status_code == 201 and created.json()["generated_secret"] == secret
    assert secret not in api.get(f"/api/v1/channels/{created.json()['id']}/").content.decode()
    client.force_login(bob)
    page = client.post("/integrations/channels/new/", {"team": ml_team.pk, "name": "relay", "kind": "webhook",
                                                       "url": "https://relay.example/hook"})
    assert Channel.objects.get(name="relay").settings["secret"] in page.content.decode()
    assert secret not in client.get("/integrations/channels/").content.decode()
    given = api.post("/api/v1/channels/", {"team": "ml-platform", "name": "own", "kind": "webhook",
                                           "settings": {"url": "https://own.example/hook", "secret": "s" * 32}},
                     format="json")
    assert "generated_secret" not in given.json()


@pytest.mark.parametrize("quiet", ['[{"tiers": [{"a": 1}]}]', '[{"tiers": 5}]', '[{"tiers": [["batch"]]}]'])
def test_quiet_tiers_that_are_not_names_are_refused(client, bob, ml_team, quiet: str) -> None:  # noqa: ANN001
    client.force_login(bob)
    form = {"team": ml_team.pk, "name": "on-call", "kind": "slack", "url": "https://hooks.slack.com/services/T/B/x",
            "quiet": quiet}
    answer = client.post("/integrations/channels/new/", form)
    assert answer.status_code == 200 and "quiet.tiers must be a list of tier names" in answer.content.decode()
    api = token_client(bob).post("/api/v1/channels/", {"team": "ml-platform", "name": "x", "kind": "slack", "settings": {
        "webhook_url": "https://hooks.slack.com/services/T/B/x", "quiet": json.loads(quiet)}}, format="json")
    assert api.status_code == 400 and "settings" in api.json()
    assert not Channel.objects.exists()


def test_a_taken_channel_name_is_a_form_error(client, bob, ml_team) -> None:  # noqa: ANN001
    client.force_login(bob)
    form = {"team": ml_team.pk, "name": "on-call", "kind": "slack", "url": "https://hooks.slack.com/services/T/B/x"}
    assert client.post("/integrations/channels/new/", form).status_code == 302
    answer = client.post("/integrations/channels/new/", form)
    assert answer.status_code == 200 and "already has a channel named" in answer.content.decode()
    assert Channel.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_people_linking_one_slack_id_at_once(alice, bob) -> None:  # noqa: ANN001
    barrier, results = threading.Barrier(2), {}

    def link(user) -> None:  # noqa: ANN001
        try:
            barrier.wait(5)
            services.link_slack_user(user, "USHARED", core.Actor(user, "web"))
            results[user.username] = "linked"
        except services.NotificationError as exc:
            results[user.username] = f"refused: {exc}"
        except Exception as exc:  # noqa: BLE001 (what the page would answer with a 500)
            results[user.username] = f"crashed: {exc.__class__.__name__}"
        finally:
            connection.close()

    threads = [threading.Thread(target=link, args=(user,)) for user in (alice, bob)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(result.split(":")[0] for result in results.values()) == ["linked", "refused"], results
