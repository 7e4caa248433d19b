"""REST API: channels (admins write, members read, secrets never read back) and the outbox."""
from __future__ import annotations

from django.contrib.auth.models import User

from controlplane.models import AuditEvent, Pool, Team
from incidents import services
from incidents.models import Channel, Notification

from tests.core.conftest import token_client
from tests.incidents.conftest import Receiver, propose

SLACK_URL = "https://hooks.slack.com/services/T000/B000/secret-token-part"


def test_an_admin_adds_a_channel_and_its_secrets_are_never_read_back(bob: User, alice: User, ml_team: Team) -> None:
    created = token_client(bob).post("/api/v1/channels/", {"team": "ml-platform", "name": "pager", "kind": "webhook",
                                                          "settings": {"url": "https://pager.example/hook"}}, format="json")
    assert created.status_code == 201, created.data
    assert created.data["target"] == "https://pager.example/…" and "settings" not in created.data
    listed = token_client(alice).get("/api/v1/channels/").data["results"]
    assert [channel["name"] for channel in listed] == ["pager"]
    assert "secret" not in str(listed) and len(Channel.objects.get().settings["secret"]) >= 32


def test_channel_writes_answer_400_403_404(alice: User, bob: User, charlie: User, ml_team: Team) -> None:
    payload = {"team": "ml-platform", "name": "on-call", "kind": "slack", "settings": {"webhook_url": SLACK_URL}}
    assert token_client(alice).post("/api/v1/channels/", payload, format="json").status_code == 403  # operator
    assert token_client(charlie).post("/api/v1/channels/", payload, format="json").status_code == 403  # other team
    inside = payload | {"settings": {"webhook_url": "http://169.254.169.254/latest"}}
    refused = token_client(bob).post("/api/v1/channels/", inside, format="json")
    assert refused.status_code == 400 and "link-local" in refused.data["settings"][0]
    not_object = token_client(bob).post("/api/v1/channels/", payload | {"settings": "x"}, format="json")
    assert not_object.status_code == 400 and "settings" in not_object.data
    channel_id = token_client(bob).post("/api/v1/channels/", payload, format="json").data["id"]
    assert token_client(charlie).get(f"/api/v1/channels/{channel_id}/").status_code == 404
    assert token_client(alice).delete(f"/api/v1/channels/{channel_id}/").status_code == 403
    assert token_client(bob).delete(f"/api/v1/channels/{channel_id}/").status_code == 204
    assert AuditEvent.objects.filter(object_type="incidents.channel", action="delete").exists()


def test_an_admin_switches_a_disabled_channel_back_on(bob: User, ml_team: Team) -> None:
    channel = Channel.objects.create(team=ml_team, name="on-call", kind="slack", settings={"webhook_url": SLACK_URL})
    services.disable_channel(channel, "Slack answered 404 no_service")
    assert token_client(bob).get(f"/api/v1/channels/{channel.pk}/").data["disabled_reason"] == "Slack answered 404 no_service"
    enabled = token_client(bob).post(f"/api/v1/channels/{channel.pk}/enable/")
    assert enabled.status_code == 200 and enabled.data["enabled"] and enabled.data["disabled_reason"] == ""


def test_the_outbox_is_readable_by_the_team_only(pool: Pool, alice: User, charlie: User, slack_channel: Channel,
                                                 receiver: Receiver) -> None:
    propose(pool, alice)
    services.fan_out()
    body = token_client(alice).get(f"/api/v1/notifications/?channel={slack_channel.pk}&state=pending").data
    assert body["count"] == 1 and body["results"][0]["kind"] == "post"
    assert token_client(charlie).get("/api/v1/notifications/").data["count"] == 0
    assert Notification.objects.count() == 1


def test_a_channel_name_is_a_string_only(bob: User, ml_team: Team) -> None:
    payload = {"team": "ml-platform", "name": 0, "kind": "slack", "settings": {"webhook_url": SLACK_URL}}
    refused = token_client(bob).post("/api/v1/channels/", payload, format="json")
    assert refused.status_code == 400 and "name" in refused.data, refused.data
    assert not Channel.objects.exists()  # not a channel named "0"
    assert token_client(bob).post("/api/v1/channels/", payload | {"name": 12.5}, format="json").status_code == 400
    created = token_client(bob).post("/api/v1/channels/", payload | {"name": "pager"}, format="json")
    assert created.status_code == 201, created.data
