"""The web UI's edges: what an edit records as "before", absurd page numbers, links and buttons shown only to
those who may follow them, and an htmx poll whose session has ended."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from controlplane import services
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Cluster, Pool, Team
from incidents import playbooks

from tests.core.test_permission_matrix import form_data
from tests.incidents.test_incidents import dave  # noqa: F401

NEW_BUTTONS = {"/": 'href="/pool/new/"', "/clusters/": 'href="/cluster/new/"',
               "/integrations/channels/": 'href="/integrations/channels/new/"', "/playbooks/": 'href="/playbooks/new/"'}


def _login(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def _playbook(bob: User, team: Team) -> playbooks.Playbook:
    return playbooks.save(services.Actor(bob, Channel.CLI), team, "surge",
                          steps=[playbooks.StepSpec("Take command", "checklist", {})])


# --- edits record the old values -------------------------------------------------------------------


def test_it_records_the_values_before_a_web_edit_as_before(bob: User, pool: Pool) -> None:
    response = _login(bob).post(f"/pool/{pool.pk}/edit/", form_data("pool", pool, bob, max_replicas=6))
    assert response.status_code == 302
    event = AuditEvent.objects.get(object_type="controlplane.pool", object_id=str(pool.pk), action="update")
    assert (event.before["max_replicas"], event.after["max_replicas"]) == (8, 6)


# --- the audit page --------------------------------------------------------------------------------


def test_it_answers_an_absurd_audit_page_number_with_an_empty_page(bob: User, pool: Pool) -> None:
    response = _login(bob).get("/audit/?page=" + "9" * 31)
    assert response.status_code == 200
    assert response.context["rows"] == []


# --- links and buttons only for those who may follow them ------------------------------------------


def test_it_shows_a_clusters_edit_link_only_to_admins_of_the_owning_team(
        alice: User, bob: User, charlie: User, dave: User, cluster: Cluster, search_team: Team) -> None:  # noqa: F811
    cluster.shared_with.add(search_team)
    link = f'href="/cluster/{cluster.pk}/edit/"'
    shown = {user.username: link in _login(user).get("/clusters/").content.decode()
             for user in (alice, bob, charlie, dave)}
    assert shown == {"alice": False, "bob": True, "charlie": False, "dave": False}


def test_it_shows_a_playbooks_edit_link_only_to_operators_of_its_team(
        alice: User, bob: User, dave: User, ml_team: Team) -> None:  # noqa: F811
    playbook = _playbook(bob, ml_team)
    link = f'href="/playbooks/{playbook.pk}/edit/"'
    shown = {user.username: link in _login(user).get("/playbooks/").content.decode() for user in (alice, dave)}
    assert shown == {"alice": True, "dave": False}


def test_it_refuses_a_viewer_the_playbook_form_naming_the_role(dave: User, bob: User, ml_team: Team) -> None:  # noqa: F811
    playbook = _playbook(bob, ml_team)
    client = _login(dave)
    for response in (client.get(f"/playbooks/{playbook.pk}/edit/"),
                     client.post(f"/playbooks/{playbook.pk}/edit/", {"team": ml_team.pk, "name": "x", "steps": "checklist | y"}),
                     client.get("/playbooks/new/")):
        assert response.status_code == 403
        assert "operator role" in response.content.decode()
    assert playbooks.Playbook.objects.get().name == "surge"


def test_it_hides_the_new_buttons_from_a_viewer(dave: User) -> None:  # noqa: F811
    client = _login(dave)
    assert {page: link in client.get(page).content.decode() for page, link in NEW_BUTTONS.items()} \
        == dict.fromkeys(NEW_BUTTONS, False)


def test_it_shows_the_new_buttons_to_those_who_may_create(alice: User, bob: User) -> None:
    operator, admin = _login(alice), _login(bob)
    assert NEW_BUTTONS["/playbooks/"] in operator.get("/playbooks/").content.decode()
    assert NEW_BUTTONS["/"] not in operator.get("/").content.decode()  # a pool needs the admin role
    assert all(link in admin.get(page).content.decode() for page, link in NEW_BUTTONS.items())


# --- an htmx poll after the session ended ----------------------------------------------------------


def test_it_sends_an_htmx_poll_without_a_session_to_the_login_page_as_a_whole_page(pool: Pool) -> None:
    response = Client().get(f"/pools/{pool.pk}/live/", HTTP_HX_REQUEST="true",
                            HTTP_HX_CURRENT_URL=f"http://testserver/pools/{pool.pk}/?tab=live")
    assert response.status_code == 204 and "Location" not in response
    assert response["HX-Redirect"] == f"/login/?next=/pools/{pool.pk}/%3Ftab%3Dlive"


def test_it_keeps_the_next_page_on_this_site(pool: Pool) -> None:
    response = Client().get(f"/pools/{pool.pk}/live/", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="http://x//evil.example/")
    assert response["HX-Redirect"] == "/login/?next=/"


def test_it_leaves_plain_requests_and_history_restores_to_the_plain_redirect(pool: Pool) -> None:
    plain = Client().get(f"/pools/{pool.pk}/live/")
    restore = Client().get(f"/pools/{pool.pk}/", HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert plain.status_code == restore.status_code == 302
    assert plain["Location"] == f"/login/?next=/pools/{pool.pk}/live/"
