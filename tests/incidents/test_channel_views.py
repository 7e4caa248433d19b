"""The channels page: admins add channels; the form refuses what the spec refuses."""
from __future__ import annotations

from django.contrib.auth.models import User

from controlplane.models import Team
from incidents.models import Channel


def _form(team: Team, **overrides: str) -> dict[str, object]:
    return {"team": team.pk, "name": "on-call", "kind": "slack", "url": "https://hooks.slack.com/services/T/B/x",
            "quiet": '[{"tiers": ["batch"]}]'} | overrides


def test_an_admin_adds_a_slack_channel(client, bob: User, ml_team: Team) -> None:  # noqa: ANN001
    client.force_login(bob)
    assert client.post("/integrations/channels/new/", _form(ml_team)).status_code == 302
    channel = Channel.objects.get()
    assert channel.settings == {"webhook_url": "https://hooks.slack.com/services/T/B/x", "quiet": [{"tiers": ["batch"]}]}
    assert "on-call" in client.get("/integrations/channels/").content.decode()


def test_the_form_refuses_internal_addresses_other_schemes_and_bad_rules(client, bob: User, ml_team: Team) -> None:  # noqa: ANN001
    client.force_login(bob)
    for overrides, message in [
        ({"url": "http://169.254.169.254/latest"}, "link-local address"),
        ({"url": "http://10.0.0.8/hook", "kind": "webhook"}, "private address"),
        ({"url": "ftp://example.com/x"}, "only http and https"),
        ({"quiet": '[{"tiers": ["gold"]}]'}, "quiet.tiers must name tiers"),
        ({"quiet": "{"}, "not valid JSON"),
    ]:
        response = client.post("/integrations/channels/new/", _form(ml_team, **overrides))
        assert response.status_code == 200 and message in response.content.decode(), message
    assert not Channel.objects.exists()


def test_operators_cannot_add_channels_and_outsiders_do_not_see_them(client, alice: User, charlie: User,  # noqa: ANN001
                                                                     ml_team: Team) -> None:
    Channel.objects.create(team=ml_team, name="on-call", kind="slack", settings={"webhook_url": "https://hooks.slack.com/x"})
    client.force_login(alice)
    response = client.post("/integrations/channels/new/", _form(ml_team, name="mine"))
    assert response.status_code == 200 and Channel.objects.count() == 1  # ml_team is not a choice for her
    assert "on-call" in client.get("/integrations/channels/").content.decode()  # her team's channel
    client.force_login(charlie)
    outsiders_page = client.get("/integrations/channels/")
    assert outsiders_page.status_code == 200 and "on-call" not in outsiders_page.content.decode()
