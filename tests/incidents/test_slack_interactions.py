"""The Slack interaction endpoint: signatures, one decision per click, permissions, replies."""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from hypothesis import HealthCheck, example, given, settings as hypothesis_settings
from hypothesis import strategies as st

from controlplane.models import AuditEvent, Pool
from incidents.choices import NotificationKind, SlackOutcome
from incidents.models import Channel, Notification, SlackInteraction
from scaling.choices import ProposalState
from scaling.models import Proposal

from tests.incidents.conftest import Receiver, click_payload, link, propose, signed_post

HOOK = "/services/T1/B1/hook"
RESPONSE = "/actions/T1/1/response"


def _decisions(proposal: Proposal) -> list[str]:
    return list(proposal.events.filter(from_state=ProposalState.PENDING).values_list("to_state", flat=True))


def test_a_pending_proposal_posts_and_a_signed_click_approves_it_once(
    client, pool: Pool, alice: User, bob: User, slack_channel: Channel, receiver: Receiver,  # noqa: ANN001
    django_capture_on_commit_callbacks,  # noqa: ANN001
) -> None:
    link(bob, "UBOB")
    with django_capture_on_commit_callbacks(execute=True):
        proposal = propose(pool, alice)
    [posted] = receiver.at(HOOK)
    buttons = [block for block in posted.json()["blocks"] if block["type"] == "actions"][0]["elements"]
    assert [(button["action_id"], button["value"]) for button in buttons] == [
        ("approve_proposal", str(proposal.pk)), ("reject_proposal", str(proposal.pk))]

    payload = click_payload(proposal, slack_channel, "UBOB", receiver.url(RESPONSE))
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_post(client, payload)
    assert response.status_code == 200
    proposal.refresh_from_db()
    assert (proposal.decided_by, proposal.decided_channel) == (bob, "slack")
    assert _decisions(proposal) == [ProposalState.APPROVED]
    assert proposal.events.filter(to_state=ProposalState.EXECUTING).count() == 1  # handed to execution once
    assert AuditEvent.objects.filter(action="approved", channel="slack", actor=bob).count() == 1
    edits = receiver.at(RESPONSE)
    assert edits and all(edit.json()["replace_original"] for edit in edits)
    assert "Approved by *bob* via slack" in edits[0].body.decode()
    assert not any(block["type"] == "actions" for block in edits[-1].json()["blocks"])  # no buttons once decided
    assert len(receiver.at(HOOK)) == 1  # one message per proposal, edited in place

    with django_capture_on_commit_callbacks(execute=True):
        again = signed_post(client, payload)  # Slack delivering the same request twice
    assert again.status_code == 200
    assert _decisions(proposal) == [ProposalState.APPROVED]
    assert proposal.events.filter(to_state=ProposalState.EXECUTING).count() == 1
    assert SlackInteraction.objects.count() == 1


def test_a_second_click_is_told_it_was_decided_already(
    client, pool: Pool, alice: User, bob: User, slack_channel: Channel, receiver: Receiver,  # noqa: ANN001
    django_capture_on_commit_callbacks,  # noqa: ANN001
) -> None:
    link(bob, "UBOB")
    link(alice, "UALICE")
    proposal = propose(pool, alice)
    with django_capture_on_commit_callbacks(execute=True):
        assert signed_post(client, click_payload(proposal, slack_channel, "UBOB", receiver.url(RESPONSE))).status_code == 200
        second = click_payload(proposal, slack_channel, "UALICE", receiver.url("/actions/alice"), action_id="reject_proposal",
                               action_ts="1764480001.000200")
        assert signed_post(client, second).status_code == 200
    assert _decisions(proposal) == [ProposalState.APPROVED]
    [reply] = [request.json() for request in receiver.at("/actions/alice") if not request.json().get("replace_original")]
    assert reply["response_type"] == "ephemeral" and "already" in reply["text"] and "bob" in reply["text"]
    assert SlackInteraction.objects.get(slack_user_id="UALICE").outcome == SlackOutcome.CONFLICT


def test_a_linked_operator_can_reject(client, pool: Pool, alice: User, slack_channel: Channel, receiver: Receiver,  # noqa: ANN001
                                      django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    link(alice, "UALICE")
    proposal = propose(pool, alice)
    payload = click_payload(proposal, slack_channel, "UALICE", receiver.url(RESPONSE), action_id="reject_proposal")
    with django_capture_on_commit_callbacks(execute=True):
        assert signed_post(client, payload).status_code == 200
    proposal.refresh_from_db()
    assert (proposal.state, proposal.decided_by, proposal.decided_channel) == (ProposalState.REJECTED, alice, "slack")
    assert "Rejected by *alice*" in receiver.at(RESPONSE)[-1].body.decode()


@pytest.mark.parametrize("slack_user_id, expected_outcome, explanation", [
    ("UCHARLIE", SlackOutcome.FORBIDDEN, "operator role in team ML Platform"),  # linked outsider
    ("UNOBODY", SlackOutcome.UNLINKED, "not linked to a Headroom user"),
])
def test_an_outsider_or_unlinked_click_changes_nothing_and_explains_why(
    client, pool: Pool, alice: User, charlie: User, slack_channel: Channel, receiver: Receiver,  # noqa: ANN001
    django_capture_on_commit_callbacks, slack_user_id: str, expected_outcome: str, explanation: str,  # noqa: ANN001
) -> None:
    link(charlie, "UCHARLIE")
    proposal = propose(pool, alice)
    audit_before = AuditEvent.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_post(client, click_payload(proposal, slack_channel, slack_user_id, receiver.url(RESPONSE)))
    assert response.status_code == 200
    proposal.refresh_from_db()
    assert proposal.state == ProposalState.PENDING and proposal.decided_by is None
    assert AuditEvent.objects.count() == audit_before
    [reply] = [request.json() for request in receiver.at(RESPONSE)]
    assert reply["response_type"] == "ephemeral" and reply["replace_original"] is False
    assert explanation in reply["text"] and reply["text"].startswith("Nothing changed")
    assert SlackInteraction.objects.get().outcome == expected_outcome


@pytest.mark.parametrize("case", ["wrong secret", "tampered signature", "missing timestamp", "missing signature",
                                  "stale", "future"])
def test_it_refuses_requests_not_signed_by_slack(client, pool: Pool, alice: User, bob: User, slack_channel: Channel,  # noqa: ANN001
                                                 receiver: Receiver, case: str) -> None:
    link(bob, "UBOB")
    proposal = propose(pool, alice)
    payload = click_payload(proposal, slack_channel, "UBOB", receiver.url(RESPONSE))
    now = int(time.time())
    kwargs = {
        "wrong secret": {"secret": "not-the-signing-secret"},
        "tampered signature": {"signature": "v0=" + "0" * 64},
        "missing timestamp": {"omit": ("HTTP_X_SLACK_REQUEST_TIMESTAMP",)},
        "missing signature": {"omit": ("HTTP_X_SLACK_SIGNATURE",)},
        "stale": {"timestamp": now - 6 * 60},  # correctly signed, but older than 5 minutes: a replay
        "future": {"timestamp": now + 6 * 60},
    }[case]
    response = signed_post(client, payload, **kwargs)
    assert response.status_code == 401
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.PENDING
    assert not SlackInteraction.objects.exists() and not receiver.at(RESPONSE)


def test_it_accepts_a_signature_four_minutes_old(client, pool: Pool, alice: User, bob: User, slack_channel: Channel,  # noqa: ANN001
                                                 receiver: Receiver) -> None:
    link(bob, "UBOB")
    proposal = propose(pool, alice)
    payload = click_payload(proposal, slack_channel, "UBOB", receiver.url(RESPONSE))
    assert signed_post(client, payload, timestamp=int(time.time()) - 4 * 60).status_code == 200
    assert Proposal.objects.get(pk=proposal.pk).state != ProposalState.PENDING


def test_it_is_not_there_when_slack_is_off(client, settings, pool: Pool, alice: User, slack_channel: Channel,  # noqa: ANN001
                                          receiver: Receiver) -> None:
    settings.SLACK_ENABLED = False
    proposal = propose(pool, alice)
    assert signed_post(client, click_payload(proposal, slack_channel, "UBOB", receiver.url(RESPONSE))).status_code == 404


def test_other_interactions_are_acknowledged_and_ignored(client, pool: Pool, alice: User, slack_channel: Channel,  # noqa: ANN001
                                                        receiver: Receiver) -> None:
    link(alice, "UALICE")
    proposal = propose(pool, alice)
    payload = click_payload(proposal, slack_channel, "UALICE", receiver.url(RESPONSE)) | {"type": "view_submission"}
    assert signed_post(client, payload).status_code == 200
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.PENDING
    assert not Notification.objects.filter(kind=NotificationKind.REPLY).exists()


def test_it_answers_at_once_and_leaves_sending_and_execution_to_celery(
    client, pool: Pool, alice: User, bob: User, slack_channel: Channel, receiver: Receiver,  # noqa: ANN001
    django_capture_on_commit_callbacks,  # noqa: ANN001
) -> None:
    link(bob, "UBOB")
    proposal = propose(pool, alice)
    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = signed_post(client, click_payload(proposal, slack_channel, "UBOB", receiver.url(RESPONSE)))
    assert response.status_code == 200 and time.monotonic() - started < 3
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.APPROVED  # the decision is recorded at once
    assert receiver.requests == [] and len(queued) >= 2  # execution and the message edit wait for the commit


def test_an_empty_signing_secret_refuses_everything(client, settings, pool: Pool, alice: User, bob: User,  # noqa: ANN001
                                                    slack_channel: Channel, receiver: Receiver) -> None:
    settings.SLACK_SIGNING_SECRET = ""
    link(bob, "UBOB")
    proposal = propose(pool, alice)
    payload = click_payload(proposal, slack_channel, "UBOB", receiver.url(RESPONSE))
    timestamp = int(time.time())
    body = urlencode({"payload": json.dumps(payload)})
    signature = "v0=" + hmac.new(b"", f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()  # slack_sdk refuses ""
    assert signed_post(client, payload, timestamp=timestamp, signature=signature).status_code == 401
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.PENDING


# Any JSON at all, and block_actions-shaped JSON whose every field is any JSON: signed is not well-formed.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
ACTION = st.fixed_dictionaries({}, optional={
    "action_id": st.sampled_from(["approve_proposal", "reject_proposal"]) | JSON,
    "value": st.from_regex(r"[0-9]{1,25}", fullmatch=True) | st.sampled_from(["²", "٣", "-1"]) | JSON,
    "block_id": st.from_regex(r"proposal:[0-9]{1,3}:channel:[0-9]{1,25}", fullmatch=True) | JSON,
    "action_ts": JSON,
})
BLOCK_ACTIONS = st.fixed_dictionaries({"type": st.just("block_actions")}, optional={
    "user": st.fixed_dictionaries({"id": st.text() | JSON}) | JSON,
    "actions": st.lists(ACTION | JSON, max_size=2) | JSON,
    "trigger_id": JSON,
    "response_url": JSON,
})


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=BLOCK_ACTIONS | JSON)
@example(payload={"type": "block_actions", "user": {"id": "UBOB"}, "actions": ["x"]})
@example(payload={"type": "block_actions", "user": {"id": "U" * 40}, "actions": [{"value": "9" * 30}]})
@example(payload={"type": "block_actions", "user": {"id": "U\x00"}, "actions": [{"value": "²"}]})
def test_it_never_answers_500_to_a_correctly_signed_payload(client, pool: Pool, alice: User,  # noqa: ANN001
                                                           payload: object) -> None:
    assert signed_post(client, payload).status_code == 200  # type: ignore[arg-type]


def test_a_click_on_a_switched_off_channels_message_is_still_answered(
    client, pool: Pool, alice: User, charlie: User, slack_channel: Channel, receiver: Receiver,  # noqa: ANN001
    django_capture_on_commit_callbacks,  # noqa: ANN001
) -> None:
    """The channel's webhook broke and Headroom switched it off; a click on one of its older messages is answered
    through Slack's response_url, which the broken address does not concern: the person is told what happened."""
    from incidents import services as notify

    link(charlie, "UCHARLIE")
    proposal = propose(pool, alice)
    notify.disable_channel(slack_channel, "Slack answered 404 no_service")
    with django_capture_on_commit_callbacks(execute=True):
        assert signed_post(client, click_payload(proposal, slack_channel, "UCHARLIE", receiver.url(RESPONSE))).status_code == 200
    [reply] = [request.json() for request in receiver.at(RESPONSE)]
    assert reply["response_type"] == "ephemeral" and reply["text"].startswith("Nothing changed")
    assert Notification.objects.get(kind=NotificationKind.REPLY).state == "delivered"
