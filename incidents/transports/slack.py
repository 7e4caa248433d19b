"""Slack incoming webhooks: one Block Kit message per proposal, edited in place through response_url;
one message when an alert fires (with its incident's buttons: acknowledge, mitigate, resolve) and one when
it resolves."""
from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.utils import timezone
from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)

from incidents import outbound
from incidents.choices import IncidentState, NotificationKind
from incidents.messages import AlertFacts, ProposalFacts, alert_facts, proposal_facts, slack_escape
from incidents.models import Notification, SlackMessage
from incidents.specs import SlackSpec
from incidents.transports.base import NothingToSend, Transport, TransportError, answer_detail, render

# Slack lets a response_url edit a message 5 times within 30 minutes.
RESPONSE_URL_LIFETIME = timedelta(minutes=30)
RESPONSE_URL_USES = 5
# These answers mean the webhook itself is gone (removed app, archived channel, revoked token).
GONE = {403, 404, 410}
# The same said in a 200's `{"ok": false, "error": ...}` (Slack's API shape, which relays and response_urls use).
GONE_ERRORS = {"channel_not_found", "channel_is_archived", "invalid_auth", "invalid_token", "not_authed",
               "account_inactive", "token_revoked", "no_service", "no_team", "team_disabled", "action_prohibited"}
RATE_LIMITED_ERRORS = {"ratelimited", "rate_limited"}


def refused_in_body(answer: outbound.Answer) -> str:
    """The `error` of a 2xx answer whose JSON says `"ok": false` ('' for any other answer, Slack's "ok" included)."""
    try:
        body = json.loads(answer.body)
    except ValueError:
        return ""
    if isinstance(body, dict) and body.get("ok") is False:
        return str(body.get("error") or "unknown_error")
    return ""


def action_block_id(proposal_id: int, channel_id: int) -> str:
    """Names the channel in every click, so the right message gets its response_url."""
    return f"proposal:{proposal_id}:channel:{channel_id}"


def incident_block_id(incident_id: int, channel_id: int) -> str:
    return f"incident:{incident_id}:channel:{channel_id}"


def parse_block_id(block_id: str) -> int | None:
    """The channel named in a proposal's or an incident's action block."""
    parts = block_id.split(":")
    if len(parts) == 4 and parts[0] in ("proposal", "incident") and parts[2] == "channel" and parts[3].isdigit():
        return int(parts[3])
    return None


SECTION_TEXT_MAX = 3000  # Slack's limit on a section's text; slack_sdk refuses to build a longer one


def _section(text: str) -> SectionBlock:
    """A section of rendered text, cut to Slack's limit (escaping can lengthen a reason past it)."""
    if len(text) > SECTION_TEXT_MAX:
        text = text[: SECTION_TEXT_MAX - 1] + "…"
    return SectionBlock(text=MarkdownTextObject(text=text))


def proposal_blocks(facts: ProposalFacts, channel_id: int, *, reminder: bool = False) -> list[Block]:
    blocks: list[Block] = [
        HeaderBlock(text=render("slack/header.txt", facts=facts, reminder=reminder)[:150]),
        _section(render("slack/proposal.txt", facts=facts)),
        ContextBlock(elements=[MarkdownTextObject(text=render("slack/state.txt", facts=facts))]),
    ]
    if facts.pending:
        value = str(facts.id)
        blocks.append(ActionsBlock(block_id=action_block_id(facts.id, channel_id), elements=[
            ButtonElement(text="Approve", action_id="approve_proposal", value=value, style="primary"),
            ButtonElement(text="Reject", action_id="reject_proposal", value=value, style="danger"),
        ]))
    return blocks


def proposal_message(facts: ProposalFacts, channel_id: int, *, reminder: bool = False) -> dict[str, Any]:
    return {
        "text": render("slack/fallback.txt", facts=facts, reminder=reminder),
        "blocks": [block.to_dict() for block in proposal_blocks(facts, channel_id, reminder=reminder)],
    }


def incident_buttons(facts: AlertFacts) -> list[ButtonElement]:
    """Acknowledge, mark mitigated, resolve (asking to confirm: it is final), and a link to the incident page."""
    value = str(facts.incident_id)
    buttons = []
    for state in facts.incident_actions:
        if state == IncidentState.ACKNOWLEDGED:
            buttons.append(ButtonElement(text=f"Acknowledge incident #{value}", action_id="acknowledge_incident",
                                         value=value, style="primary"))
        elif state == IncidentState.MITIGATED:
            buttons.append(ButtonElement(text="Mark mitigated", action_id="mitigate_incident", value=value))
        elif state == IncidentState.RESOLVED:
            buttons.append(ButtonElement(text="Resolve", action_id="resolve_incident", value=value, confirm=ConfirmObject(
                title="Resolve the incident?", text=f"Incident #{value} will be closed; a new firing opens a new one.",
                confirm="Resolve", deny="Cancel")))
    return buttons + [ButtonElement(text="Open incident", action_id="open_incident", url=facts.incident_url)]


def alert_message(facts: AlertFacts, channel_id: int) -> dict[str, Any]:
    blocks: list[Block] = [
        _section(render("slack/alert.txt", facts=facts)),
        ContextBlock(elements=[MarkdownTextObject(text=render("slack/alert_context.txt", facts=facts))]),
    ]
    if facts.incident_actions:
        blocks.append(ActionsBlock(block_id=incident_block_id(facts.incident_id, channel_id),  # type: ignore[arg-type]
                                   elements=incident_buttons(facts)))
    return {"text": render("slack/alert_fallback.txt", facts=facts), "blocks": [block.to_dict() for block in blocks]}


class SlackTransport(Transport):
    spec_class = SlackSpec
    coalesce_updates = True
    reminds = True

    def notify(self, notification: Notification) -> None:
        kind = notification.kind
        if notification.alert is not None:
            self.post_json(self.spec.url, alert_message(alert_facts(notification.alert, notification.kind), self.channel.pk))
            return
        # Sentences are plain text: a person's comment in one must not ping <!channel> or hide a link.
        if kind == NotificationKind.MESSAGE:
            self.post_json(self.spec.url, {"text": slack_escape(notification.text)})
            return
        if kind == NotificationKind.REPLY:
            reply = {"response_type": "ephemeral", "replace_original": False, "text": slack_escape(notification.text)}
            self._to_response_url(notification.response_url, reply)
            return
        facts = proposal_facts(notification.proposal)
        message = proposal_message(facts, self.channel.pk, reminder=kind == NotificationKind.REMINDER)
        if kind == NotificationKind.UPDATE:
            self._edit(notification, message)
        elif kind == NotificationKind.REMINDER and not facts.pending:
            raise NothingToSend(f"the proposal is {facts.state} now; no reminder needed")
        else:
            self.post_json(self.spec.url, message)

    def _edit(self, notification: Notification, message: dict[str, Any]) -> None:
        posted = SlackMessage.objects.filter(channel=self.channel, proposal=notification.proposal).first()
        if posted is None:
            raise NothingToSend("the message is not posted yet; it shows the current state when it is")
        if not posted.response_url:
            raise NothingToSend("no response_url yet (nobody clicked in Slack); the next click refreshes the message")
        if posted.response_url_uses >= RESPONSE_URL_USES or (posted.response_url_expires_at or timezone.now()) <= timezone.now():
            raise NothingToSend("Slack's response_url for this message has expired")
        SlackMessage.objects.filter(pk=posted.pk).update(response_url_uses=posted.response_url_uses + 1)
        self._to_response_url(posted.response_url, message | {"replace_original": True})

    def delivered(self, notification: Notification) -> None:
        if notification.kind == NotificationKind.POST:
            SlackMessage.objects.get_or_create(
                channel=self.channel, proposal=notification.proposal, defaults={"posted_at": timezone.now()}
            )

    def raise_for_answer(self, answer: outbound.Answer) -> None:
        if 200 <= answer.status < 300:
            # A 200 is not a delivery when its body says `"ok": false`: the message was not posted.
            if error := refused_in_body(answer):
                detail = f"Slack answered {answer.status} but refused the message: {error}"
                if error in RATE_LIMITED_ERRORS:
                    raise TransportError(detail, retry_after_s=answer.retry_after_s)
                raise TransportError(detail, permanent=True, disables_channel=error in GONE_ERRORS)
            return
        detail = f"Slack answered {answer.status} {answer_detail(answer, 100)}".strip()
        if answer.status in GONE or answer.text.strip() == "invalid_token":
            raise TransportError(detail, permanent=True)
        if answer.status == 400:
            raise TransportError(detail, permanent=True, disables_channel=False)  # our payload: fix the code
        raise TransportError(detail, retry_after_s=answer.retry_after_s)

    def _to_response_url(self, url: str, payload: dict[str, Any]) -> None:
        """A response_url belongs to one message; its failures (expired, used up) leave the channel alone."""
        try:
            self.post_json(url, payload)
        except TransportError as exc:
            raise TransportError(exc.message, permanent=exc.permanent, disables_channel=False,
                                 retry_after_s=exc.retry_after_s) from exc
