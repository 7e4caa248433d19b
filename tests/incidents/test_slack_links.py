"""Linking Slack users: the command, the settings page, and who can take a Slack ID."""
from __future__ import annotations

from io import StringIO

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


def test_moving_a_link_audits_the_old_holders_loss(alice: User, bob: User) -> None:
    call_command("link_slack_user", "alice", "U0123ABCD", stdout=StringIO())
    out = StringIO()
    call_command("link_slack_user", "bob", "U0123ABCD", stdout=out)
    assert "(moved from alice)" in out.getvalue()
    deleted = AuditEvent.objects.get(action="delete", object_type="incidents.slackidentity")
    assert deleted.before["user"] == alice.pk and deleted.before["slack_user_id"] == "U0123ABCD"


@pytest.mark.parametrize("slack_user_id", ["not-an-id", "U1", "X0123ABCD", "U" + "0" * 32, "U0ÄBC", "C0123ABCD"])
def test_only_slack_member_ids_are_linked(alice: User, client, slack_user_id: str) -> None:  # noqa: ANN001
    with pytest.raises(CommandError, match="looks like U0123ABCD"):
        call_command("link_slack_user", "alice", slack_user_id)
    client.force_login(alice)  # the settings page keeps the same rule: it calls the same service
    assert client.post("/settings/", {"slack_user_id": slack_user_id}).status_code == 200
    assert not SlackIdentity.objects.exists()


def test_enterprise_grid_ids_and_lower_case_are_linked(alice: User) -> None:
    call_command("link_slack_user", "alice", "w0123abcd", stdout=StringIO())
    assert SlackIdentity.objects.get(user=alice).slack_user_id == "W0123ABCD"


def test_an_id_given_with_unlink_is_refused(alice: User) -> None:
    call_command("link_slack_user", "alice", "U0ALICE", stdout=StringIO())
    with pytest.raises(CommandError, match="give no Slack member ID"):
        call_command("link_slack_user", "alice", "U0ALICE", "--unlink")
    assert SlackIdentity.objects.filter(user=alice).exists()


def test_relinking_the_same_id_changes_nothing(alice: User) -> None:
    call_command("link_slack_user", "alice", "U0ALICE", stdout=StringIO())
    events = AuditEvent.objects.count()
    out = StringIO()
    call_command("link_slack_user", "alice", "u0alice", stdout=out)
    assert "nothing changed" in out.getvalue() and AuditEvent.objects.count() == events
