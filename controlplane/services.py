"""Core workflows: who may do what, API tokens, and the audit log.

Views, the API, Slack handlers and commands call these; they never write audit rows themselves.
"""
from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core import serializers
from django.db import models, transaction
from django.utils import timezone

from controlplane.choices import AuditAction, Role
from controlplane.errors import ServiceError
from controlplane.models import ApiToken, AuditEvent, Cluster, Membership, Team

# Writing last_used_at on every request would turn each API read into a write.
TOKEN_LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Actor:
    """Who is acting, through which channel, in which request."""

    user: AbstractBaseUser | None
    channel: str
    request_id: str = ""

    @property
    def name(self) -> str:
        if self.user is None or isinstance(self.user, AnonymousUser):
            return f"{self.channel}:system"
        return self.user.get_username()

    @classmethod
    def from_request(cls, request: Any, channel: str) -> Actor:
        user = request.user if request.user.is_authenticated else None
        return cls(user=user, channel=channel, request_id=getattr(request, "request_id", ""))


# --- roles and scoping -------------------------------------------------------------------------


def role_in(user: AbstractBaseUser | AnonymousUser, team: Team | int | None) -> str | None:
    """The user's role in the team; superusers are admins everywhere."""
    if not user.is_authenticated or team is None:
        return None
    if user.is_superuser:
        return Role.ADMIN
    team_id = team.pk if isinstance(team, Team) else team
    return Membership.objects.filter(user=user, team_id=team_id).values_list("role", flat=True).first()


def has_role(user: AbstractBaseUser | AnonymousUser, team: Team | int | None, role: str) -> bool:
    return Role.rank(role_in(user, team)) >= Role.rank(role)


def visible_team_ids(user: AbstractBaseUser | AnonymousUser, min_role: str = Role.VIEWER) -> models.QuerySet | None:
    """Ids of the teams whose objects the user may see (None means all: a superuser)."""
    if not user.is_authenticated:
        return Team.objects.none().values("id")
    if user.is_superuser:
        return None
    roles = [role for role in Role.values if Role.rank(role) >= Role.rank(min_role)]
    return Membership.objects.filter(user=user, role__in=roles).values("team_id")


def team_ids_where(user: AbstractBaseUser | AnonymousUser, role: str) -> set[int] | None:
    """Ids of the teams where the user holds `role` or more (None: every team, a superuser)."""
    teams = visible_team_ids(user, min_role=role)
    return None if teams is None else set(teams.values_list("team_id", flat=True))


def holds_role_somewhere(user: AbstractBaseUser | AnonymousUser, role: str) -> bool:
    """Whether a "New ..." form would offer the user any team to create in."""
    teams = team_ids_where(user, role)
    return teams is None or bool(teams)


# --- team boundaries for actions ----------------------------------------------------------------


class AccessDenied(ServiceError):
    """The actor's teams do not allow this change. `field` names the input to change, when one would help."""

    status_code = 403

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def cluster_refusal(cluster: Cluster, team: Team) -> str:
    """Why pools of `team` may not sit (or act) in `cluster`, or '' when they may.

    They may when the team owns the cluster, or when an admin of the owning team shared it with the
    team. A pool already sitting there grants nothing.
    """
    if team.pk == cluster.team_id or cluster.shared_with.filter(pk=team.pk).exists():
        return ""
    return (
        f"Cluster {cluster.name} belongs to team {cluster.team} and is not shared with team {team}; "
        f"an admin of {cluster.team} can share it."
    )


def check_may_change(
    user: AbstractBaseUser | AnonymousUser,
    team: Team | None,
    cluster: Cluster | None,
    role: str,
    *,
    field: str = "cluster",
    lock: bool = False,
) -> None:
    """Refuse (AccessDenied) unless `user` holds `role` in the object's `team` and, for an object that
    acts in a `cluster`, that team may use the cluster (see `cluster_refusal`).

    The one rule behind every change and action on pools and what belongs to them, in the API, the web
    UI and Slack: the object's team says who may act, the cluster's owner says which teams may act there.
    With `lock`, the cluster row stays locked until the caller's transaction ends, so a share revoked
    at the same moment is either seen here or waits for this change.
    """
    if team is None or not has_role(user, team, role):
        raise AccessDenied(f"You need the {role} role in team '{team}' for this change.")
    if cluster is None:
        return
    if lock:
        cluster = Cluster.objects.select_for_update().select_related("team").get(pk=cluster.pk)
    refusal = cluster_refusal(cluster, team)
    if refusal:
        raise AccessDenied(refusal, field)


def may_act_in(user: AbstractBaseUser | AnonymousUser, team: Team, cluster: Cluster, role: str) -> bool:
    """`check_may_change` as a yes/no, for showing or hiding buttons."""
    return has_role(user, team, role) and not cluster_refusal(cluster, team)


def usable_clusters(user: AbstractBaseUser | AnonymousUser, role: str) -> models.QuerySet:
    """Clusters owned by, or shared with, a team where the user holds `role`: where they may place pools."""
    team_ids = visible_team_ids(user, min_role=role)
    if team_ids is None:
        return Cluster.objects.all()
    return Cluster.objects.filter(models.Q(team__in=team_ids) | models.Q(shared_with__in=team_ids)).distinct()


def set_sharing(actor: Actor, cluster: Cluster, teams: list[Team]) -> None:
    """Share `cluster` with exactly `teams` (its owning team needs none); audited when it changes.

    The caller has checked that the actor is an admin of the cluster's team.
    """
    with transaction.atomic():
        locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
        before = snapshot(locked)
        locked.shared_with.set([team for team in teams if team.pk != locked.team_id])
        if snapshot(locked) != before:
            record(actor, AuditAction.UPDATE, locked, before=before)


def set_membership(user: AbstractBaseUser, team: Team, role: str, actor: Actor) -> Membership:
    with transaction.atomic():
        membership = Membership.objects.select_for_update().filter(user=user, team=team).first()
        before = snapshot(membership) if membership else None
        if membership is None:
            membership = Membership.objects.create(user=user, team=team, role=role)
        elif membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
        else:
            return membership
        record(actor, AuditAction.UPDATE if before else AuditAction.CREATE, membership, before=before, team=team)
    return membership


def visible_audit_events(user: AbstractBaseUser) -> models.QuerySet:
    """Events about a team's objects follow the team; events with no team are the actor's own."""
    team_ids = visible_team_ids(user)
    if team_ids is None:
        return AuditEvent.objects.all()
    return AuditEvent.objects.filter(models.Q(team__in=team_ids) | models.Q(team__isnull=True, actor=user))


# --- audit ------------------------------------------------------------------------------------


# Fields whose values the append-only audit log never keeps (secrets, or settings that hold one): the
# snapshot names them, so a change still shows, but not what they hold.
UNRECORDED_FIELDS = {"auth.user": ("password",), "incidents.channel": ("settings",), "controlplane.apitoken": ("digest",)}
UNRECORDED = "(not recorded)"


def snapshot(obj: models.Model | None) -> dict[str, Any] | None:
    """A JSON-safe copy of a model's fields, for the audit log's before/after (secrets left out)."""
    if obj is None:
        return None
    fields = json.loads(serializers.serialize("json", [obj]))[0]["fields"]
    for name in UNRECORDED_FIELDS.get(obj._meta.label_lower, ()):
        fields[name] = UNRECORDED
    return fields | {"id": obj.pk}


def _team_of(obj: models.Model) -> Team | None:
    for path in ("team", "pool.team"):
        current: Any = obj
        for attribute in path.split("."):
            current = getattr(current, attribute, None)
        if isinstance(current, Team):
            return current
    return obj if isinstance(obj, Team) else None


def record(
    actor: Actor,
    action: str,
    obj: models.Model,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None | bool = True,
    team: Team | None = None,
) -> AuditEvent:
    """Append one audit event. `after=True` (the default) snapshots `obj` as it is now."""
    return AuditEvent.objects.create(
        actor=actor.user,
        actor_name=actor.name,
        channel=actor.channel,
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk or before and before.get("id") or ""),
        object_repr=str(obj)[:300],
        before=before,
        after=snapshot(obj) if after is True else (after or None),
        request_id=actor.request_id,
        team=team or _team_of(obj),
    )


def credentials_refusal(user: AbstractBaseUser | AnonymousUser, cluster: Cluster | None, credentials_ref: str) -> str:
    """Why `user` may not name these credentials for `cluster` ('' when they may). `in-cluster` is Headroom's own
    service account, with the scale rights deploy/ gives it across its home cluster: a team admin naming it for a
    cluster of their own would act with the platform's rights, so only a superuser names it (a cluster that already
    has it keeps it through other edits)."""
    if credentials_ref.strip() != "in-cluster" or getattr(user, "is_superuser", False):
        return ""
    if cluster is not None and cluster.pk is not None and \
            Cluster.objects.filter(pk=cluster.pk, credentials_ref="in-cluster").exists():
        return ""
    return ("Only a superuser may name in-cluster: it is Headroom's own service account, with the platform's rights "
            "in its home cluster. Ask whoever runs Headroom, or name a token or kubeconfig mounted for your cluster.")


def save_with_audit(
    actor: Actor,
    obj: models.Model,
    before: dict[str, Any] | None = None,
    *,
    save_related: Callable[[], None] | None = None,
) -> models.Model:
    """Save a validated object and record the change, in one transaction.

    `save_related` (a form's `save_m2m`) runs before the record, so the audit shows the new sharing too.
    """
    with transaction.atomic():
        obj.save()
        if save_related is not None:
            save_related()
        record(actor, AuditAction.UPDATE if before else AuditAction.CREATE, obj, before=before)
    return obj


def upsert_with_audit(actor: Actor, model: type[models.Model], lookup: dict[str, Any], defaults: dict[str, Any]):  # noqa: ANN201
    """Create or update one object by `lookup`; records an event only when something changed."""
    with transaction.atomic():
        obj = model.objects.select_for_update().filter(**lookup).first()
        if obj is None:
            obj = model(**lookup, **defaults)
            obj.full_clean()
            return save_with_audit(actor, obj)
        before = snapshot(obj)
        for name, value in defaults.items():
            setattr(obj, name, value)
        obj.full_clean()
        if snapshot(obj) != before:
            save_with_audit(actor, obj, before=before)
        return obj


def delete_with_audit(actor: Actor, obj: models.Model) -> None:
    with transaction.atomic():
        before = snapshot(obj)
        team = _team_of(obj)
        object_id = obj.pk
        obj.delete()
        obj.pk = object_id  # so the event names what was deleted
        record(actor, AuditAction.DELETE, obj, before=before, after=None, team=team)


# --- API tokens -------------------------------------------------------------------------------


def _digest(raw_token: str) -> str:
    # Tokens carry 256 random bits, so a plain SHA-256 is enough (no password-style stretching).
    return hashlib.sha256(raw_token.encode()).hexdigest()


def latest_token_expiry() -> datetime | None:
    """The latest expiry a token issued now may have (API_TOKEN_MAX_DAYS), or None: no cap."""
    return timezone.now() + timedelta(days=settings.API_TOKEN_MAX_DAYS) if settings.API_TOKEN_MAX_DAYS else None


def issue_token(
    user: AbstractBaseUser, actor: Actor, *, name: str = "", expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token; the raw value is returned once and never stored.

    Without `expires_at` it lives API_TOKEN_DEFAULT_DAYS (0 in the settings: until revoked). The API and the
    command check a given `expires_at` against `latest_token_expiry()` first, each naming its own field."""
    if expires_at is None and settings.API_TOKEN_DEFAULT_DAYS:
        expires_at = timezone.now() + timedelta(days=settings.API_TOKEN_DEFAULT_DAYS)
    raw = settings.API_TOKEN_PREFIX + secrets.token_urlsafe(32)
    prefix = raw[: len(settings.API_TOKEN_PREFIX) + 6]
    with transaction.atomic():
        token = ApiToken.objects.create(user=user, name=name, prefix=prefix, digest=_digest(raw), expires_at=expires_at)
        record(actor, AuditAction.ISSUE_TOKEN, token, after={"prefix": prefix, "user": user.get_username(),
                                                           "expires_at": expires_at.isoformat() if expires_at else None})
    return token, raw


def revoke_token(token: ApiToken, actor: Actor) -> None:
    with transaction.atomic():
        updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if updated:
            record(actor, AuditAction.REVOKE_TOKEN, token, after={"prefix": token.prefix})


def user_for_token(raw_token: str) -> tuple[AbstractBaseUser, ApiToken] | None:
    """The active user a token belongs to, or None (unknown, expired, revoked, inactive user)."""
    if not raw_token.startswith(settings.API_TOKEN_PREFIX):
        return None
    token = ApiToken.objects.select_related("user").filter(digest=_digest(raw_token)).first()
    now = timezone.now()
    if token is None or token.revoked_at is not None or not token.user.is_active:
        return None
    if token.expires_at is not None and token.expires_at <= now:
        return None
    if token.last_used_at is None or now - token.last_used_at > TOKEN_LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user, token

