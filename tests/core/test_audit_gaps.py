"""The audit gaps of issue 18: deleting a user or a team leaves the append-only log as it was and is
itself recorded; every admin change (role grants, channels, Slack links, users) is audited, and no
secret (a password hash, a webhook address) ever reaches the log."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from controlplane import services
from controlplane.choices import Channel as ActorChannel
from controlplane.choices import Role
from controlplane.models import AuditEvent, Membership, Pool, Team
from incidents.models import Channel, Notification, SlackIdentity

from tests.core.conftest import alice, bob, cluster, ml_team, pool, token_client  # noqa: F401

WEBHOOK = "https://hooks.example.com/services/T000/B000/very-secret-path"


@pytest.fixture
def root(db) -> User:  # noqa: ANN001
    return User.objects.create_superuser("root", password="pw-root-long-enough")


@pytest.fixture
def admin_site(root: User) -> Client:
    client = Client()
    client.force_login(root)
    return client


def _events(action: str, object_type: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, object_type=object_type).order_by("id"))


def test_deleting_a_user_keeps_their_audit_rows_and_is_recorded(admin_site: Client, alice: User, pool: Pool) -> None:  # noqa: F811
    actor = services.Actor(user=alice, channel=ActorChannel.API)
    services.record(actor, "update", pool)
    theirs = AuditEvent.objects.get(actor_name="alice")
    response = admin_site.post(f"/admin/auth/user/{alice.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not User.objects.filter(username="alice").exists()
    kept = AuditEvent.objects.get(pk=theirs.pk)
    assert (kept.actor_id, kept.actor_name, kept.after) == (theirs.actor_id, "alice", theirs.after)  # untouched
    [deleted] = _events("delete", "auth.user")
    assert (deleted.actor_name, deleted.object_repr, deleted.channel) == ("root", "alice", "web")
    assert deleted.before["username"] == "alice" and deleted.before["password"] == services.UNRECORDED


def test_a_user_deleted_outside_the_admin_leaves_the_log_alone(alice: User, pool: Pool) -> None:  # noqa: F811
    services.record(services.Actor(user=alice, channel=ActorChannel.API), "update", pool)
    alice_id = alice.pk
    alice.delete()  # PostgreSQL refuses any UPDATE of the log: nothing may try one
    assert AuditEvent.objects.get(actor_name="alice").actor_id == alice_id
    assert alice.pk is None or not User.objects.filter(pk=alice_id).exists()


def test_deleting_an_empty_team_works_and_is_recorded(root: User) -> None:
    team = Team.objects.create(name="Spare", slug="spare")
    services.record(services.Actor(user=root, channel=ActorChannel.API), "update", team)
    response = token_client(root).delete("/api/v1/teams/spare/")
    assert response.status_code == 204, response.content
    assert not Team.objects.filter(slug="spare").exists()
    [deleted] = _events("delete", "controlplane.team")
    assert deleted.before["slug"] == "spare" and deleted.actor_name == "root"
    assert AuditEvent.objects.filter(action="update", object_type="controlplane.team").count() == 1  # kept


def test_a_team_that_still_owns_pools_is_a_409_naming_them(root: User, pool: Pool) -> None:  # noqa: F811
    response = token_client(root).delete(f"/api/v1/teams/{pool.team.slug}/")
    assert response.status_code == 409
    assert "chat-8b" in response.json()["detail"] or "gpu-us-east" in response.json()["detail"]
    assert Team.objects.filter(pk=pool.team_id).exists() and not _events("delete", "controlplane.team")


def _team_form(team: Team, memberships: list[Membership], extra: dict[str, str]) -> dict[str, str]:
    data = {"name": team.name, "slug": team.slug, "memberships-TOTAL_FORMS": str(len(memberships) + 1),
            "memberships-INITIAL_FORMS": str(len(memberships)), "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "1000", f"memberships-{len(memberships)}-role": Role.VIEWER}  # the blank row
    for index, membership in enumerate(memberships):
        data |= {f"memberships-{index}-id": str(membership.pk), f"memberships-{index}-team": str(team.pk),
                 f"memberships-{index}-user": str(membership.user_id), f"memberships-{index}-role": membership.role}
    return data | extra


def test_a_role_grant_in_the_admin_is_audited(admin_site: Client, ml_team: Team, alice: User, bob: User) -> None:  # noqa: F811
    carol = User.objects.create_user("carol", password="pw-carol")
    memberships = list(Membership.objects.filter(team=ml_team).order_by("id"))
    index = [m.user_id for m in memberships].index(alice.pk)
    grant = {f"memberships-{index}-role": Role.ADMIN,  # alice: operator → admin
             f"memberships-{len(memberships)}-user": str(carol.pk), f"memberships-{len(memberships)}-role": Role.VIEWER}
    response = admin_site.post(f"/admin/controlplane/team/{ml_team.pk}/change/", _team_form(ml_team, memberships, grant))
    assert response.status_code == 302, response.content.decode()[:2000]
    [raised] = _events("update", "controlplane.membership")
    assert (raised.before["role"], raised.after["role"], raised.actor_name) == (Role.OPERATOR, Role.ADMIN, "root")
    [added] = _events("create", "controlplane.membership")
    assert added.after["user"] == carol.pk and added.team_id == ml_team.pk


def test_removing_a_membership_in_the_admin_is_audited(admin_site: Client, ml_team: Team, alice: User) -> None:  # noqa: F811
    memberships = list(Membership.objects.filter(team=ml_team))
    form = _team_form(ml_team, memberships, {"memberships-0-DELETE": "on"})
    response = admin_site.post(f"/admin/controlplane/team/{ml_team.pk}/change/", form)
    assert response.status_code == 302
    [removed] = _events("delete", "controlplane.membership")
    assert removed.before["user"] == alice.pk and not Membership.objects.filter(team=ml_team).exists()


def test_a_channel_edited_in_the_admin_is_audited_without_its_address(admin_site: Client, ml_team: Team) -> None:  # noqa: F811
    channel = Channel.objects.create(team=ml_team, name="oncall", kind="slack", settings={"webhook_url": WEBHOOK})
    form = {"team": str(ml_team.pk), "name": "oncall-eu", "kind": "slack", "settings": f'{{"webhook_url": "{WEBHOOK}/2"}}',
            "enabled": "on", "disabled_reason": "", "last_error": ""}
    response = admin_site.post(f"/admin/incidents/channel/{channel.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    [changed] = _events("update", "incidents.channel")
    assert (changed.before["name"], changed.after["name"]) == ("oncall", "oncall-eu")
    assert "very-secret-path" not in str(AuditEvent.objects.values_list("before", "after", "object_repr"))


def test_the_admin_never_shows_a_channels_address_or_secret(admin_site: Client, ml_team: Team) -> None:  # noqa: F811
    # docs/slack.md: a webhook's path and signing secret are never shown on a page; the admin's is one.
    channel = Channel.objects.create(team=ml_team, name="pager", kind="webhook",
                                     settings={"url": f"{WEBHOOK}?sig=QUERYSECRET", "secret": "whsec-0123456789abcdef"})
    page = admin_site.get(f"/admin/incidents/channel/{channel.pk}/change/").content.decode()
    assert "very-secret-path" not in page and "QUERYSECRET" not in page and "whsec-0123456789abcdef" not in page
    assert "https://hooks.example.com/…" in page  # what it points at: scheme and host, as the API's target
    # Saved with the settings left empty, they stay as they were; a new object replaces them.
    form = {"team": str(ml_team.pk), "name": "pager-eu", "kind": "webhook", "settings": "", "enabled": "on"}
    assert admin_site.post(f"/admin/incidents/channel/{channel.pk}/change/", form).status_code == 302
    channel.refresh_from_db()
    assert channel.name == "pager-eu" and channel.settings["secret"] == "whsec-0123456789abcdef"
    # A staff member who may only view channels reads no secret either.
    auditor = User.objects.create_user("audrey", password="pw", is_staff=True)
    auditor.user_permissions.add(Permission.objects.get(codename="view_channel"))
    viewer = Client()
    viewer.force_login(auditor)
    page = viewer.get(f"/admin/incidents/channel/{channel.pk}/change/")
    assert page.status_code == 200 and "very-secret-path" not in page.content.decode()
    assert "whsec-0123456789abcdef" not in page.content.decode()


def test_the_admin_never_shows_a_slack_response_url(admin_site: Client, ml_team: Team) -> None:  # noqa: F811
    channel = Channel.objects.create(team=ml_team, name="oncall", kind="slack", settings={"webhook_url": WEBHOOK})
    reply = Notification.objects.create(channel=channel, kind="reply", text="Nothing changed", next_attempt_at=timezone.now(),
                                        response_url="https://hooks.slack.com/actions/T1/1/RESPONSESECRET")
    page = admin_site.get(f"/admin/incidents/notification/{reply.pk}/change/").content.decode()
    assert "Nothing changed" in page and "RESPONSESECRET" not in page


def test_an_invalid_channel_is_refused_in_the_admin(admin_site: Client, ml_team: Team) -> None:  # noqa: F811
    form = {"team": str(ml_team.pk), "name": "bad", "kind": "webhook", "settings": '{"url": "http://169.254.169.254/", "secret": "0123456789abcdef0123"}',
            "enabled": "on"}
    response = admin_site.post("/admin/incidents/channel/add/", form)
    assert response.status_code == 200 and b"link-local" in response.content
    assert not Channel.objects.exists() and not _events("create", "incidents.channel")


def test_a_slack_link_made_in_the_admin_is_audited(admin_site: Client, alice: User) -> None:  # noqa: F811
    response = admin_site.post("/admin/incidents/slackidentity/add/", {"user": str(alice.pk), "slack_user_id": "U0ALICE"})
    assert response.status_code == 302
    [linked] = _events("create", "incidents.slackidentity")
    assert linked.after["slack_user_id"] == "U0ALICE" and linked.actor_name == "root"
    identity = SlackIdentity.objects.get()
    assert admin_site.post(f"/admin/incidents/slackidentity/{identity.pk}/delete/", {"post": "yes"}).status_code == 302
    assert _events("delete", "incidents.slackidentity")


def test_user_edits_and_password_changes_in_the_admin_are_audited(admin_site: Client, alice: User) -> None:  # noqa: F811
    form = {"username": "alice", "first_name": "Alice", "last_name": "", "email": "", "is_active": "on",
            "is_staff": "on", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00"}
    response = admin_site.post(f"/admin/auth/user/{alice.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:3000]
    [changed] = _events("update", "auth.user")
    assert (changed.before["is_staff"], changed.after["is_staff"]) == (False, True)
    new_password = {"password1": "a-new-long-password-42", "password2": "a-new-long-password-42"}
    assert admin_site.post(f"/admin/auth/user/{alice.pk}/password/", new_password).status_code == 302
    [reset] = _events("set_password", "auth.user")
    assert reset.after == {"username": "alice"}
    hashes = User.objects.values_list("password", flat=True)
    assert not any(h in str(AuditEvent.objects.values_list("before", "after")) for h in hashes)
