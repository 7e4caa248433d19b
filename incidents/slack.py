"""Slack's interaction endpoint, behind the view: verify the signature, read the click, decide.

Deciding is one short transaction: record the click (its unique key makes a repeated delivery a
no-op), call the same service as the browser and the API (approve or reject a proposal, acknowledge
an incident), remember the message's response_url, and queue what Slack should see next. Sending
happens after commit, in Celery.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from incidents import incidents, services
from incidents.choices import SLACK_ACTIONS, SLACK_INCIDENT_ACTIONS, ChannelKind, NotificationKind, SlackOutcome
from incidents.models import Channel, Incident, SlackIdentity, SlackInteraction, SlackMessage
from incidents.transports.slack import RESPONSE_URL_LIFETIME, parse_block_id
from scaling import services as scaling
from scaling.models import Proposal

SIGNATURE_WINDOW = timedelta(minutes=5)  # Slack's advice: refuse older requests (replays)


def signature_problem(body: bytes, timestamp: str | None, signature: str | None, now: datetime) -> str | None:
    """Why a request is not from Slack (v0 HMAC-SHA256 over `v0:{timestamp}:{body}`), or None if it is."""
    if not settings.SLACK_SIGNING_SECRET:
        return "no signing secret is configured"  # an empty key would let anyone sign
    if not timestamp or not signature:
        return "missing X-Slack-Request-Timestamp or X-Slack-Signature"
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):  # '²' is a digit to isdigit
        return "the timestamp is not a number of seconds"
    if abs(now.timestamp() - int(timestamp)) > SIGNATURE_WINDOW.total_seconds():
        return "the timestamp is more than 5 minutes away from now"
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(settings.SLACK_SIGNING_SECRET.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        return "the signature does not match"
    return None


@dataclass(frozen=True)
class Click:
    delivery_key: str
    slack_user_id: str
    action_id: str
    proposal_id: int | None
    channel_id: int | None
    response_url: str
    incident_id: int | None = None


@dataclass(frozen=True)
class ClickResult:
    outcome: str
    reply: str = ""
    duplicate: bool = False


def parse_click(raw_payload: str) -> Click | None:
    """The first action of a block_actions payload; None for anything else (or malformed)."""
    try:
        payload = json.loads(raw_payload)
        action = payload["actions"][0]
        user_id = _text(payload["user"]["id"], 32)
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None
    # Signed is not well-formed: any JSON can arrive here, so every field's type is checked.
    if not isinstance(payload, dict) or not isinstance(action, dict) or payload.get("type") != "block_actions":
        return None
    # The same click delivered twice carries the same trigger and action timestamp.
    key = ":".join(_text(part, 200) for part in (payload.get("trigger_id") or "", user_id, action.get("action_id"),
                                                 action.get("action_ts")))
    action_id = _text(action.get("action_id", ""), 64)
    row_id = _row_id(_text(action.get("value", ""), 32))
    on_incident = action_id in SLACK_INCIDENT_ACTIONS  # the button's value names an incident, not a proposal
    return Click(
        delivery_key=key[:200], slack_user_id=user_id, action_id=action_id,
        proposal_id=None if on_incident else row_id, incident_id=row_id if on_incident else None,
        channel_id=_channel_id(_text(action.get("block_id", ""), 200)),
        response_url=_text(payload.get("response_url", ""), 500),
    )


def _text(value: object, limit: int) -> str:
    """A field as text that fits its column; PostgreSQL refuses NUL characters in text."""
    return str(value).replace("\x00", "")[:limit]


def _row_id(text: str) -> int | None:
    """A primary key, or None: ASCII digits only (int() reads '٣' but not '²') and within a bigint."""
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    return None


def _channel_id(block_id: str) -> int | None:
    channel_id = parse_block_id(block_id) if block_id.isascii() else None
    return channel_id if channel_id is not None and channel_id < 10**18 else None


def _settings_url() -> str:
    return settings.SITE_URL.rstrip("/") + reverse("incidents:user-settings")


def _actor(click: Click, request_id: str) -> core.Actor | str:
    """The linked Headroom user acting through Slack, or the reply telling an unlinked user what to do."""
    identity = SlackIdentity.objects.select_related("user").filter(slack_user_id=click.slack_user_id).first()
    if identity is None or not identity.user.is_active:
        return (f"Nothing changed: your Slack account ({click.slack_user_id}) is not linked to a Headroom user. "
                f"Link it at {_settings_url()} or ask an admin to run `manage.py link_slack_user`.")
    return core.Actor(user=identity.user, channel=ActorChannel.SLACK, request_id=request_id)


INCIDENT_MOVES = {"acknowledge": (incidents.acknowledge, SlackOutcome.ACKNOWLEDGED),
                  "mitigate": (incidents.mitigate, SlackOutcome.MITIGATED),
                  "resolve": (incidents.resolve, SlackOutcome.RESOLVED)}


def _decide_incident(click: Click, request_id: str) -> tuple[str, str]:
    """Acknowledge, mitigate or resolve an incident: the same service, rights and answers as the browser and API."""
    actor = _actor(click, request_id)
    if isinstance(actor, str):
        return SlackOutcome.UNLINKED, actor
    move, outcome = INCIDENT_MOVES[SLACK_INCIDENT_ACTIONS[click.action_id]]
    try:
        done = move(click.incident_id, actor)  # type: ignore[arg-type]
    except Incident.DoesNotExist:
        return SlackOutcome.IGNORED, f"Nothing changed: incident #{click.incident_id} does not exist."
    except core.AccessDenied as exc:
        return SlackOutcome.FORBIDDEN, f"Nothing changed: {exc}"
    except incidents.IncidentConflict as exc:
        return SlackOutcome.CONFLICT, f"Nothing changed: {exc}"
    incident = done.incident
    if not done.changed:
        return SlackOutcome.CONFLICT, f"Incident #{incident.pk} is already acknowledged by you."
    commander = incident.commander.get_username() if incident.commander else "nobody"
    lead = "you are its commander" if incident.commander == actor.user else f"{commander} is its commander"
    return outcome, f"Incident #{incident.pk} {incident.state}: {lead}."


def _decide(click: Click, request_id: str) -> tuple[str, str]:
    if click.action_id in SLACK_INCIDENT_ACTIONS and click.incident_id is not None:
        return _decide_incident(click, request_id)
    verb = SLACK_ACTIONS.get(click.action_id)
    if verb is None or click.proposal_id is None:
        return SlackOutcome.IGNORED, ""
    actor = _actor(click, request_id)
    if isinstance(actor, str):
        return SlackOutcome.UNLINKED, actor
    decide = scaling.approve if verb == "approve" else scaling.reject
    try:
        decide(click.proposal_id, actor)
    except Proposal.DoesNotExist:
        return SlackOutcome.IGNORED, f"Nothing changed: proposal #{click.proposal_id} does not exist any more."
    except scaling.ProposalForbidden as exc:
        return SlackOutcome.FORBIDDEN, f"Nothing changed: {exc}"
    except scaling.ProposalConflict as exc:
        who = f" (decided by {exc.proposal.decided_by.get_username()})" if exc.proposal.decided_by else ""
        return SlackOutcome.CONFLICT, f"Nothing changed: {exc}{who}"
    return (SlackOutcome.APPROVED if verb == "approve" else SlackOutcome.REJECTED), ""


def _remember_message(channel: Channel, proposal: Proposal, response_url: str, now: datetime) -> None:
    """The click's response_url is how we edit the message from now on (Slack: 30 minutes, 5 uses)."""
    if not response_url:
        return
    SlackMessage.objects.update_or_create(
        channel=channel, proposal=proposal,
        defaults={"response_url": response_url, "response_url_expires_at": now + RESPONSE_URL_LIFETIME,
                  "response_url_uses": 0},
        create_defaults={"posted_at": now, "response_url": response_url,
                         "response_url_expires_at": now + RESPONSE_URL_LIFETIME},
    )


def handle_click(click: Click, request_id: str = "", now: datetime | None = None) -> ClickResult:
    """Record and act on one click, once. Replies and message edits go out after commit."""
    now = now or timezone.now()
    with transaction.atomic():
        try:
            with transaction.atomic():
                interaction = SlackInteraction.objects.create(
                    delivery_key=click.delivery_key, slack_user_id=click.slack_user_id, action_id=click.action_id,
                    proposal_id=click.proposal_id, incident_id=click.incident_id,
                )
        except IntegrityError:
            return ClickResult(SlackOutcome.IGNORED, duplicate=True)
        outcome, reply = _decide(click, request_id)
        interaction.outcome, interaction.detail = outcome, reply
        interaction.save(update_fields=["outcome", "detail"])
        channel = Channel.objects.filter(pk=click.channel_id, kind=ChannelKind.SLACK).first()
        if click.incident_id is not None:
            _reply_about_incident(click, channel, reply, now)
        proposal = Proposal.objects.select_related("pool").filter(pk=click.proposal_id).first()
        if proposal is not None and channel is not None and channel.team_id == proposal.pool.team_id:
            _remember_message(channel, proposal, click.response_url, now)
            if reply and click.response_url:
                services.enqueue(channel, proposal, NotificationKind.REPLY, now, text=reply, response_url=click.response_url)
            if outcome == SlackOutcome.CONFLICT:
                services.enqueue(channel, proposal, NotificationKind.UPDATE, now)  # a stale message catches up
        transaction.on_commit(_deliver_due, robust=True)
    return ClickResult(outcome, reply)


def _reply_about_incident(click: Click, channel: Channel | None, reply: str, now: datetime) -> None:
    """Tell the clicking user what happened, in the channel the click came from (if it is the incident's team's)."""
    incident = Incident.objects.filter(pk=click.incident_id).first()
    if not (incident and channel and reply and click.response_url) or channel.team_id != incident.team_id:
        return
    services.enqueue(channel, None, NotificationKind.REPLY, now, text=reply, response_url=click.response_url)


def _deliver_due() -> None:
    from incidents import tasks

    tasks.sweep_outbox.delay()
