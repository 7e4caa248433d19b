"""Notification workflows: fan events out to channels, deliver with backoff, remind, disable, link Slack users.

ProposalEvent rows are the outbox. `fan_out` turns each new one into Notification rows (once: a
DispatchedEvent marks it) in one transaction; `deliver` sends one notification outside any
transaction and records the outcome; nothing is lost when a receiver or a worker is down, because the
rows stay pending until a later sweep delivers them.

A pool with an open incident is not deleted (`refuse_deleting_a_pool_in_trouble`): its alerts, proposals and
charts would go from under the on-call. A deleted pool's resolved incidents stay, with its name
(`keep_the_pool_name_on_its_incidents`).
"""
from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError, Q
from django.utils import timezone

from controlplane import metrics
from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.errors import ServiceError
from controlplane.models import Pool, Team
from incidents import outbound
from incidents.choices import ACTIVE_INCIDENT_STATES, AlertState, ChannelKind, NotificationKind, NotificationState
from incidents.models import Alert, Channel, DispatchedEvent, Drill, Incident, Notification, SlackIdentity
from incidents.transports import NothingToSend, TransportError, transport_class, transport_for
from scaling.choices import ProposalState
from scaling.models import Proposal, ProposalEvent

# Events older than this are history, not news: a channel added today does not replay last week.
OUTBOX_HORIZON = timedelta(days=1)
DISPATCH_PRUNE_BATCH = 10_000  # markers a sweep deletes at most: a backlog drains over sweeps
FAN_OUT_BATCH = 200
RETRY_AFTER_MAX_S = 3600  # a receiver's Retry-After is honoured up to an hour; a longer one is a typo or a ban
AUTO = core.Actor(user=None, channel=ActorChannel.AUTO)
logger = logging.getLogger(__name__)


class NotificationError(ServiceError):
    pass


class InvalidChannelSettings(NotificationError):
    def payload(self) -> dict[str, Any]:
        return {"settings": [str(self)]}


class ChannelNameTaken(NotificationError):
    def payload(self) -> dict[str, Any]:
        return {"name": [str(self)]}


@dataclass(frozen=True)
class Delivery:
    notification_id: int
    state: str
    error: str = ""


def integration_enabled(kind: str) -> bool:
    return {ChannelKind.SLACK: settings.SLACK_ENABLED, ChannelKind.WEBHOOK: settings.WEBHOOKS_ENABLED}[kind]


def backoff(attempts: int) -> timedelta:
    """30 s, 1 min, 2 min, … capped: a Slack outage of an hour costs a handful of attempts."""
    seconds = settings.NOTIFY_RETRY_BASE_S * 2 ** max(0, attempts - 1)
    return timedelta(seconds=min(seconds, settings.NOTIFY_RETRY_MAX_S))


# --- writing the outbox -------------------------------------------------------------------------


def _kind_for(event: ProposalEvent) -> str | None:
    if not event.from_state:
        return NotificationKind.POST
    if event.from_state == event.to_state:
        return None  # a note on the timeline (resumed, cluster accepted), not a change of state
    return NotificationKind.UPDATE


def _quiet_reason(channel: Channel, proposal: Proposal, now: datetime) -> str:
    try:
        return channel.spec.quiet_reason(proposal.pool.priority, now)
    except ValueError:
        return ""  # invalid settings fail the delivery, which says so


def _mutable(kind: str, edits_in_place: bool) -> bool:
    """Quiet rules hold back new messages; replies, edits of a message already posted, and a playbook's
    message (a person's deliberate step) go out."""
    if kind in (NotificationKind.REPLY, NotificationKind.MESSAGE):
        return False
    return kind != NotificationKind.UPDATE or not edits_in_place


def enqueue(channel: Channel, proposal: Proposal | None, kind: str, now: datetime, event: ProposalEvent | None = None,
            **fields: Any) -> Notification | None:
    """Write one notification for `channel` (in the caller's transaction), or None when nothing is due.
    A reply (to a click on an incident's button) may concern no proposal."""
    transport = transport_class(channel.kind)
    existing = Notification.objects.filter(channel=channel, proposal=proposal)
    if kind == NotificationKind.UPDATE and transport.coalesce_updates:
        post = existing.filter(kind=NotificationKind.POST).first()
        if post is None or post.state in (NotificationState.SKIPPED, NotificationState.FAILED):
            return None  # no message to edit
        if existing.filter(kind=kind, state=NotificationState.PENDING).exists():
            return None  # the pending edit will show this state too
    state, reason = NotificationState.PENDING, ""
    if not integration_enabled(channel.kind):
        state, reason = NotificationState.SKIPPED, f"the {channel.get_kind_display()} integration is switched off"
    elif _mutable(kind, transport.coalesce_updates) and (quiet := _quiet_reason(channel, proposal, now)):
        state, reason = NotificationState.SKIPPED, quiet
    try:
        with transaction.atomic():
            return Notification.objects.create(
                channel=channel, proposal=proposal, event=event, kind=kind, state=state, last_error=reason,
                next_attempt_at=now, **fields,
            )
    except IntegrityError:
        return None  # the one post or reminder of this proposal exists already


def fan_out(now: datetime | None = None) -> list[int]:
    """Turn new proposal events into notifications for their team's enabled channels.

    Safe to run from many workers at once: each event is taken by one (row lock, skip locked) and
    marked dispatched in the same transaction. Returns the ids of notifications to deliver.
    """
    now = now or timezone.now()
    created: list[int] = []
    with transaction.atomic():
        events = list(
            ProposalEvent.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(dispatch__isnull=True, at__gte=now - OUTBOX_HORIZON)
            .select_related("proposal__pool__team", "proposal__pool__cluster")
            .order_by("id")[:FAN_OUT_BATCH]
        )
        if not events:
            return created
        DispatchedEvent.objects.bulk_create([DispatchedEvent(event=event) for event in events], ignore_conflicts=True)
        team_ids = {event.proposal.pool.team_id for event in events}
        channels = list(Channel.objects.filter(team_id__in=team_ids, enabled=True).select_related("team"))
        # A drill's proposals are practice: they never reach the team's real channels.
        drill_pools = set(Drill.objects.filter(pool_id__in={event.proposal.pool_id for event in events})
                          .values_list("pool_id", flat=True))
        for event in events:
            kind = _kind_for(event)
            if kind is None or event.proposal.pool_id in drill_pools:
                continue
            for channel in channels:
                if channel.team_id != event.proposal.pool.team_id:
                    continue
                notification = enqueue(channel, event.proposal, kind, now, event=event)
                if notification is not None and notification.state == NotificationState.PENDING:
                    created.append(notification.pk)
    return created


def prune_dispatched(now: datetime | None = None, batch: int = DISPATCH_PRUNE_BATCH) -> int:
    """Delete the outbox's markers older than OUTBOX_HORIZON, at most `batch` of them (oldest first).

    `fan_out` reads only the events of the last OUTBOX_HORIZON, and an event is never younger than its marker: an
    older marker marks an event nobody reads for the outbox again. Kept, they were one row per event for good."""
    now = now or timezone.now()
    oldest = DispatchedEvent.objects.filter(at__lt=now - OUTBOX_HORIZON).order_by("at").values_list("pk", flat=True)
    return DispatchedEvent.objects.filter(pk__in=list(oldest[:batch])).delete()[0]


def remind_due(now: datetime | None = None) -> list[int]:
    """Once per proposal and channel, a reminder shortly before a pending proposal expires."""
    now = now or timezone.now()
    lead = timedelta(seconds=settings.NOTIFY_REMINDER_BEFORE_S)
    posts = Notification.objects.filter(
        kind=NotificationKind.POST, state=NotificationState.DELIVERED, channel__enabled=True,
        delivered_at__lte=now - lead,  # a message younger than the lead needs no reminder yet
        proposal__state=ProposalState.PENDING, proposal__expires_at__gt=now, proposal__expires_at__lte=now + lead,
    ).select_related("channel", "proposal__pool")
    created = []
    for post in posts:
        if not transport_class(post.channel.kind).reminds:
            continue
        reminder = enqueue(post.channel, post.proposal, NotificationKind.REMINDER, now)
        if reminder is not None and reminder.state == NotificationState.PENDING:
            created.append(reminder.pk)
    return created


def due_notifications(now: datetime | None = None, limit: int = 500) -> list[int]:
    """Pending notifications whose next attempt is due (the retry half of the outbox sweep), oldest first:
    those made in one fan-out share their due time, and go out in the order their events happened."""
    now = now or timezone.now()
    due = Notification.objects.filter(Q(channel__enabled=True) | Q(kind=NotificationKind.REPLY),
                                      state=NotificationState.PENDING, next_attempt_at__lte=now)
    return list(due.order_by("next_attempt_at", "pk").values_list("pk", flat=True)[:limit])


# --- delivering ---------------------------------------------------------------------------------


def _claim(notification_id: int, now: datetime) -> Notification | None:
    """Take a due notification: count the attempt and hold it for the length of one send."""
    hold = timedelta(seconds=settings.OUTBOUND_TIMEOUT_S + 30)
    with transaction.atomic():
        notification = (
            Notification.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("channel__team", "proposal__pool__team", "proposal__pool__cluster", "event")
            .filter(pk=notification_id, state=NotificationState.PENDING, next_attempt_at__lte=now)
            .first()
        )
        if notification is None:
            return None
        # A reply answers a person's click through Slack's response_url, not the channel's broken address.
        if not notification.channel.enabled and notification.kind != NotificationKind.REPLY:
            _finish(notification, NotificationState.SKIPPED, f"channel disabled: {notification.channel.disabled_reason}")
            return None
        if not integration_enabled(notification.channel.kind):  # switched off since it was queued (a retry)
            _finish(notification, NotificationState.SKIPPED,
                    f"the {notification.channel.get_kind_display()} integration is switched off")
            return None
        notification.attempts += 1
        notification.next_attempt_at = now + hold
        notification.save(update_fields=["attempts", "next_attempt_at"])
    return notification


def _finish(notification: Notification, state: str, error: str = "", now: datetime | None = None) -> None:
    notification.state, notification.last_error = state, error[:2000]
    if state == NotificationState.DELIVERED:
        notification.delivered_at = now or timezone.now()
    # An update, not a save: the channel (and its outbox) may have been deleted during the send.
    Notification.objects.filter(pk=notification.pk).update(
        state=notification.state, last_error=notification.last_error, delivered_at=notification.delivered_at)


def deliver(notification_id: int, now: datetime | None = None) -> Delivery | None:
    """Send one due notification. Returns None when it is not due, another worker holds it, or its channel
    was deleted during the send."""
    now = now or timezone.now()
    notification = _claim(notification_id, now)
    if notification is None:
        return None
    if late := _resolved_before_sent(notification):
        _finish(notification, NotificationState.SKIPPED, late)
        return Delivery(notification.pk, notification.state, notification.last_error)
    transport = transport_for(notification.channel)
    try:
        transport.notify(notification)  # outside any transaction: a slow receiver holds no locks
    except NothingToSend as exc:
        _finish(notification, NotificationState.SKIPPED, safe_error(notification.channel, str(exc), notification))
    except TransportError as exc:
        _record_failure(notification, exc, now)
    except Exception as exc:  # a bug of ours (a message the client library refuses to build): retried, then failed
        logger.exception("notification %s: the transport raised", notification.pk)
        _record_failure(notification, TransportError(f"{exc.__class__.__name__}: {exc}"), now)
    else:
        with transaction.atomic():
            # The channel may have been deleted during the send (its outbox with it): nothing to record.
            if not Channel.objects.select_for_update().filter(pk=notification.channel_id).exists():
                return None
            transport.delivered(notification)
            _finish(notification, NotificationState.DELIVERED, now=now)
            Channel.objects.filter(pk=notification.channel_id).update(last_delivered_at=now)
        if notification.kind == NotificationKind.ALERT_FIRING:
            from incidents import alerts  # alerts build on this module

            alerts.resolve_after_late_firing(notification, now)
    return Delivery(notification.pk, notification.state, notification.last_error)


def _resolved_before_sent(notification: Notification) -> str:
    """Why an alert's firing message is no longer news ('' when it is): the alert resolved while the
    message waited (a retry's backoff, a disabled channel). Sent now, it would arrive after the resolve,
    or with none, and leave the receiver on "firing" for an alert that is over."""
    if notification.kind != NotificationKind.ALERT_FIRING or notification.alert_id is None:
        return ""
    if Alert.objects.filter(pk=notification.alert_id, state=AlertState.RESOLVED).exists():
        return "the alert resolved before this message went out"
    return ""


def secret_urls(channel: Channel, notification: Notification | None = None) -> list[str]:
    """The addresses whose paths and queries are secrets: the channel's own, and a Slack response_url."""
    urls = [str(channel.settings.get(key) or "") for key in ("url", "webhook_url")] if isinstance(channel.settings, dict) else []
    return urls + ([notification.response_url] if notification is not None else [])


def safe_error(channel: Channel, message: str, notification: Notification | None = None) -> str:
    """An error as it may be stored, shown to every team member and audited: no URL path, query or secret."""
    text = outbound.redact(message, *secret_urls(channel, notification))
    secret = channel.settings.get("secret") if isinstance(channel.settings, dict) else None
    if isinstance(secret, str) and secret:
        text = text.replace(secret, "…")
    return text[:2000]


def _record_failure(notification: Notification, exc: TransportError, now: datetime) -> None:
    channel = notification.channel
    error = safe_error(channel, exc.message, notification)
    final = exc.permanent or notification.attempts >= settings.NOTIFY_MAX_ATTEMPTS
    metrics.record_notification_failure(channel.kind, final=final)
    with transaction.atomic():
        if final:
            _finish(notification, NotificationState.FAILED, error)
        else:
            wait = backoff(notification.attempts)
            if exc.retry_after_s is not None:
                # The receiver said when (a 429's Retry-After, at most an hour): not before, for any of this
                # channel's messages, so a backlog does not spend the wait knocking on the same limit.
                asked = timedelta(seconds=min(exc.retry_after_s, RETRY_AFTER_MAX_S))
                wait = max(wait, asked)
                error = f"{error} (the receiver asked to wait {asked.total_seconds():.0f} s)"
                Notification.objects.filter(channel=channel, state=NotificationState.PENDING,
                                            next_attempt_at__lt=now + asked).exclude(pk=notification.pk) \
                    .update(next_attempt_at=now + asked)
            notification.last_error, notification.next_attempt_at = error, now + wait
            Notification.objects.filter(pk=notification.pk).update(last_error=error,
                                                                   next_attempt_at=notification.next_attempt_at)
        Channel.objects.filter(pk=channel.pk).update(last_error=error, last_error_at=now)
        if exc.permanent and exc.disables_channel:
            disable_channel(channel, error)


# --- channels -----------------------------------------------------------------------------------


def disable_channel(channel: Channel, reason: str) -> bool:
    """Stop a channel whose address is broken; the reason shows on the channels page. Idempotent."""
    reason = safe_error(channel, reason)  # shown to the team and kept in the append-only audit log
    with transaction.atomic():
        updated = Channel.objects.filter(pk=channel.pk, enabled=True).update(enabled=False, disabled_reason=reason[:2000])
        if updated:
            core.record(AUTO, "disable_channel", channel, after={"reason": reason[:2000]}, team=channel.team)
    return bool(updated)


def enable_channel(channel: Channel, actor: core.Actor) -> None:
    """Switch a channel back on after its address was fixed; its pending notifications resume."""
    with transaction.atomic():
        if Channel.objects.filter(pk=channel.pk, enabled=False).update(enabled=True, disabled_reason=""):
            core.record(actor, "enable_channel", channel, after={"name": channel.name}, team=channel.team)


def generates_secret(kind: str, raw_settings: dict[str, Any]) -> bool:
    """Whether `create_channel` generates this channel's signing secret: shown once to its creator, the
    receiver needs it to check `X-Headroom-Signature`, and it is never read back after."""
    return kind == ChannelKind.WEBHOOK and not raw_settings.get("secret")


def create_channel(team: Team, name: str, kind: str, raw_settings: dict[str, Any], actor: core.Actor) -> Channel:
    """Validate and save a channel. A webhook without a secret gets a generated one."""
    if generates_secret(kind, raw_settings):
        raw_settings = raw_settings | {"secret": secrets.token_urlsafe(32)}
    channel = Channel(team=team, name=name, kind=kind, settings=raw_settings)
    try:
        channel.spec  # noqa: B018 (parsing is the validation)
    except ValueError as exc:
        raise InvalidChannelSettings(str(exc)) from exc
    with transaction.atomic():
        try:
            with transaction.atomic():
                channel.save()
        except IntegrityError:  # the name, taken by another request first (or before: the form does not check)
            raise ChannelNameTaken(f"Team {team} already has a channel named {name!r}.") from None
        # The settings hold a webhook address and maybe a secret: the audit log keeps neither.
        core.record(actor, "create", channel, after={"name": name, "kind": kind}, team=team)
    return channel


def delete_channel(channel: Channel, actor: core.Actor) -> None:
    with transaction.atomic():
        core.record(actor, "delete", channel, before={"id": channel.pk, "name": channel.name, "kind": channel.kind},
                    after=None, team=channel.team)
        channel.delete()


# --- Slack users --------------------------------------------------------------------------------


def link_slack_user(user: AbstractBaseUser, slack_user_id: str, actor: core.Actor, *, take_over: bool = False) -> SlackIdentity:
    """Map a Slack user to `user`. A Slack user linked to someone else moves only with `take_over` (the old
    link's deletion is audited); linking what is already linked changes nothing and records nothing.

    The one rule for every entry point (command, settings page): a member ID is ^[UW][A-Z0-9]{2,31}$ (U for
    users, W for Enterprise Grid), typed in either case."""
    slack_user_id = slack_user_id.strip().upper()
    if not (slack_user_id[:1] in ("U", "W") and slack_user_id.isascii() and slack_user_id.isalnum()
            and 3 <= len(slack_user_id) <= 32):
        raise NotificationError("A Slack member ID looks like U0123ABCD (profile → ⋮ → Copy member ID).")
    with transaction.atomic():
        holder = SlackIdentity.objects.select_for_update().filter(slack_user_id=slack_user_id).first()
        if holder is not None and holder.user_id == user.pk:
            return holder  # already so: a second audit row would record a change that did not happen
        if holder is not None:
            if not take_over:
                raise NotificationError("That Slack user is linked to another Headroom user; an admin can move it.")
            core.delete_with_audit(actor, holder)
        before = core.snapshot(SlackIdentity.objects.filter(user=user).first())
        try:
            with transaction.atomic():  # a savepoint: the race below leaves the outer transaction usable
                identity, _ = SlackIdentity.objects.update_or_create(user=user, defaults={"slack_user_id": slack_user_id})
        except IntegrityError:
            # Another user linked the same Slack ID between our read and our write (no row to lock before).
            raise NotificationError("That Slack user is linked to another Headroom user; an admin can move it.") from None
        core.record(actor, "link_slack", identity, before=before)
    return identity


def unlink_slack_user(user: AbstractBaseUser, actor: core.Actor) -> None:
    with transaction.atomic():
        identity = SlackIdentity.objects.select_for_update().filter(user=user).first()
        if identity is not None:
            core.delete_with_audit(actor, identity)


# --- a pool in trouble stays -------------------------------------------------------------------


class PoolInTrouble(ServiceError, ProtectedError):
    """A pool with an open incident cannot be deleted: a ProtectedError to whatever deletes it (the admin, a
    command), and as a ServiceError a 409 with this sentence in the API and the web."""

    status_code = 409

    def __str__(self) -> str:
        return str(self.args[0])


def refuse_deleting_a_pool_in_trouble(sender: type, instance: Pool, **kwargs: Any) -> None:
    """`pre_delete` of a pool: refused while it has an open (or acknowledged, or mitigated) incident, whose alerts,
    proposals and charts would go with the pool while the on-call works in it. Alerts alone do not hold a pool:
    one being taken down reads no signals and fires its staleness alert, and could then never be deleted."""
    incidents = list(Incident.objects.filter(pool=instance, state__in=sorted(ACTIVE_INCIDENT_STATES)).order_by("pk"))
    if not incidents:
        return
    named = ", ".join(f"incident #{incident.pk} ({incident.severity}, {incident.state})" for incident in incidents)
    raise PoolInTrouble(f"Pool {instance} has {named}: resolve it first. Deleted now, its alerts, proposals and "
                        "charts would go with the pool while the on-call works in it.", incidents)


def keep_the_pool_name_on_its_incidents(sender: type, instance: Pool, **kwargs: Any) -> None:
    """`pre_delete` of a pool (after the refusal above): its incidents stay, their `pool` emptied, and name it as it
    was last called, so a postmortem read months later still says which pool it was, and no such incident reads
    as a system incident (those have no pool name)."""
    Incident.objects.filter(pool=instance).update(pool_name=instance.name)
