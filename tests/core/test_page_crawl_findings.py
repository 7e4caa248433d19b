"""What the page crawl (tests/core/test_page_crawl.py) found, each shown on its own.

1. The incidents app's API router registered its routes in the app's `incidents` namespace, under names the pages
   use too (incident-what-if, incident-postmortem, channel-enable): `{% url %}` gave the API's address, so the
   incident page polled its what-if with a GET the API refuses (405), its postmortem link left for the API, and
   the channels page's "Switch back on" posted to the API and answered JSON.
2. The audit log linked a playbook's row to the playbook's edit form, which only its team's operators may open: a
   viewer following it met a 403. It links to the playbook on the playbooks page, which everyone in the team reads.
3. The browsable API's forms for channels, silences and playbooks offered every team in their team list: an outsider
   read ML Platform's slug and name there. The core API's serializers scope the teams they offer; these did not.
"""
from __future__ import annotations

import re
from datetime import timedelta

from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel, Role
from controlplane.models import Membership, Pool, Team
from incidents import playbooks, services as notify
from incidents.choices import ChannelKind
from incidents.models import Channel, Incident
from scaling import report_service

from tests.incidents.test_incidents import fire_ttft_p95


def _login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_incident_page_polls_its_what_if_and_links_its_postmortem_on_the_pages(pool: Pool, alice: User) -> None:
    fire_ttft_p95(pool, timezone.now() - timedelta(minutes=20))
    incident = Incident.objects.get(pool=pool)
    report_service.request_what_if(incident, core.Actor(alice, ActorChannel.WEB), enqueue=False)  # pending: polled
    client = _login(alice)
    page = client.get(f"/incidents/{incident.pk}/").content.decode()

    polled = re.search(r'<section id="what-if" hx-get="([^"]+)"', page).group(1)
    assert polled == f"/incidents/{incident.pk}/what-if/"
    assert client.get(polled, HTTP_HX_REQUEST="true").status_code == 200
    assert f'href="/incidents/{incident.pk}/postmortem.md"' in page


def test_the_channels_page_switches_a_channel_back_on_through_the_page(ml_team: Team, bob: User) -> None:
    channel = notify.create_channel(ml_team, "pager", ChannelKind.WEBHOOK, {"url": "https://hooks.example.com/h"},
                                    core.Actor(bob, ActorChannel.WEB))
    notify.disable_channel(channel, "410 Gone")
    client = _login(bob)
    page = client.get("/integrations/channels/").content.decode()

    action = re.search(r'<form method="post" action="([^"]+)">', page).group(1)
    assert action == f"/integrations/channels/{channel.pk}/enable/"
    answer = client.post(action)
    assert answer.status_code == 302 and answer["Location"] == "/integrations/channels/"
    assert Channel.objects.get(pk=channel.pk).enabled


def test_the_audit_log_links_a_playbook_where_a_viewer_of_its_team_can_read_it(ml_team: Team, alice: User) -> None:
    dave = User.objects.create_user(username="dave")
    Membership.objects.create(user=dave, team=ml_team, role=Role.VIEWER)
    playbook = playbooks.save(core.Actor(alice, ActorChannel.WEB), ml_team, "surge",
                              steps=[playbooks.StepSpec("Take command", "checklist")])
    client = _login(dave)
    page = client.get("/audit/").content.decode()

    link = re.search(r'href="(/playbooks/[^"]+)"', page).group(1)  # not the menu's /playbooks/
    assert link == f"/playbooks/#playbook-{playbook.pk}"
    assert client.get(link).status_code == 200


def test_the_browsable_apis_forms_offer_an_outsider_only_their_own_teams(ml_team: Team, charlie: User) -> None:
    client = _login(charlie)
    for address in ("/api/v1/channels/", "/api/v1/silences/", "/api/v1/playbooks/"):
        page = client.get(address, HTTP_ACCEPT="text/html").content.decode()
        assert '<option value="search"' in page, address
        assert "ml-platform" not in page and "ML Platform" not in page, address
    # A slug typed in is still read, so a write to another team is a 403 saying why (tests/incidents/test_api.py).
