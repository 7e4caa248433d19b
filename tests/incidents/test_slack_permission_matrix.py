"""The Slack approve/reject buttons hold team boundaries like the API and the browser: a click by a
linked member of Search with each role, on a proposal of each kind of pool of `tests.permission_world`.
Slack always gets 200 (it shows our reply, not a status); the decision is in the recorded outcome."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane.choices import Role
from controlplane.models import Team
from incidents.choices import ChannelKind, SlackOutcome
from incidents.models import Channel, SlackInteraction
from scaling.choices import ProposalState

from tests.incidents.conftest import Receiver, click_payload, link, signed_post
from tests.permission_world import ROLES, SCOPES, World, database_state, member_of_search, world  # noqa: F401

RESPONSE = "/actions/T1/1/response"
ACTIONS = {"approve_proposal": (SlackOutcome.APPROVED, ProposalState.APPROVED),
           "reject_proposal": (SlackOutcome.REJECTED, ProposalState.REJECTED)}
ALLOWED_SCOPES = {"own", "shared"}  # Search's pools in a cluster Search owns or ML Platform shared


@pytest.fixture
def search_slack(search_team: Team, receiver: Receiver, allow_loopback: None) -> Channel:
    return Channel.objects.create(team=search_team, name="search-on-call", kind=ChannelKind.SLACK,
                                  settings={"webhook_url": receiver.url("/services/T1/B2/hook")})


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action_id", list(ACTIONS))
def test_it_decides_a_slack_click_by_role_and_scope(
    client, world: World, search_team: Team, search_slack: Channel, receiver: Receiver,  # noqa: ANN001
    action_id: str, role: str, scope: str,
) -> None:
    link(member_of_search(search_team, role), f"U{role.upper()}")
    proposal = world.proposal(scope)
    before = database_state()
    payload = click_payload(proposal, search_slack, f"U{role.upper()}", receiver.url(RESPONSE), action_id=action_id)
    response = signed_post(client, payload)
    assert response.status_code == 200
    outcome, state = ACTIONS[action_id]
    allowed = scope in ALLOWED_SCOPES and Role.rank(role) >= Role.rank(Role.OPERATOR)
    interaction = SlackInteraction.objects.get()
    proposal.refresh_from_db()
    if allowed:
        assert (interaction.outcome, proposal.state, proposal.decided_channel) == (outcome, state, "slack")
    else:
        assert interaction.outcome == SlackOutcome.FORBIDDEN, interaction.detail
        assert interaction.detail.startswith("Nothing changed")
        assert database_state() == before


def test_a_click_on_a_pool_in_an_unshared_cluster_explains_the_sharing(
    client, world: World, search_team: Team, search_slack: Channel, receiver: Receiver,  # noqa: ANN001
    django_capture_on_commit_callbacks,  # noqa: ANN001
) -> None:
    link(member_of_search(search_team, Role.ADMIN), "UADMIN")
    proposal = world.proposal("unshared")
    with django_capture_on_commit_callbacks(execute=True):
        signed_post(client, click_payload(proposal, search_slack, "UADMIN", receiver.url(RESPONSE)))
    [reply] = [request.json() for request in receiver.at(RESPONSE)]
    assert reply["text"] == ("Nothing changed: Cluster gpu-us-east belongs to team ML Platform and is not shared "
                             "with team Search; an admin of ML Platform can share it.")
    assert world.proposal("unshared").pk == proposal.pk  # still pending


def test_an_outsider_cannot_decide_through_a_shared_cluster(
    client, world: World, alice: User, search_slack: Channel,  # noqa: ANN001
    receiver: Receiver,
) -> None:
    """Sharing opens the cluster to Search's pools; it gives nobody in Search a say over ML Platform's."""
    link(alice, "UALICE")
    proposal = world.proposal("shared")  # Search's pool: ML Platform's operator has no role in Search
    signed_post(client, click_payload(proposal, search_slack, "UALICE", receiver.url(RESPONSE)))
    assert SlackInteraction.objects.get().outcome == SlackOutcome.FORBIDDEN
    assert world.proposal("shared").pk == proposal.pk
