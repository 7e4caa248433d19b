"""Linking Slack users: the command, the settings page, and who can take a Slack ID."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from controlplane.models import AuditEvent
from incidents.models import SlackIdentity


def test_the_command_links_and_moves_a_slack_user(alice: User, bob: User) -> None:
    call_command("link_slack_user", "alice", "u0alice")
    assert SlackIdentity.objects.get(user=alice).slack_user_id == "U0ALICE"
    call_command("link_slack_user", "bob", "U0ALICE")  # an admin's command may move it
    assert SlackIdentity.objects.get().user == bob
    assert AuditEvent.objects.filter(action="link_slack", channel="cli").count() == 2
    call_command("link_slack_user", "bob", "--unlink")
    assert not SlackIdentity.objects.exists()


def test_the_command_refuses_unknown_users(db) -> None:  # noqa: ANN001
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("link_slack_user", "nobody", "U1")


def test_a_user_links_their_own_slack_account_on_the_settings_page(client, alice: User, bob: User) -> None:  # noqa: ANN001
    client.force_login(alice)
    assert client.post("/settings/", {"slack_user_id": "U0ALICE"}).status_code == 302
    assert "U0ALICE" in client.get("/settings/").content.decode()
    client.force_login(bob)
    taken = client.post("/settings/", {"slack_user_id": "U0ALICE"})
    assert taken.status_code == 200 and "linked to another Headroom user" in taken.content.decode()
    assert client.post("/settings/", {"slack_user_id": "not an id!"}).status_code == 200
    client.force_login(alice)
    client.post("/settings/", {"unlink": "1"})
    assert not SlackIdentity.objects.exists()
    assert AuditEvent.objects.filter(object_type="incidents.slackidentity", channel="web").count() == 2
