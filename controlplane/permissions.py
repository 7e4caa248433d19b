"""Role checks and team scoping shared by every API viewset and web view.

A user sees the objects of the teams they belong to; what they may change depends on their role in
the object's team and, for what acts in a cluster, on the cluster's owner having shared it with that
team (`services.check_may_change`). The scoping lives here, in one place, so no view can forget it.
"""
from __future__ import annotations

from django.db import models
from django.db.models import Q
from rest_framework import permissions

from controlplane import services
from controlplane.choices import Role
from controlplane.models import Cluster, Pool, Team


def team_lookups(model: type[models.Model]) -> tuple[str, ...]:
    """Paths from a model to the team(s) that own it (its `team_lookups`); () if it has no team."""
    return getattr(model, "team_lookups", ())


def scoped(queryset: models.QuerySet, user) -> models.QuerySet:  # noqa: ANN001
    """Restrict a queryset to the objects the user's teams own."""
    team_ids = services.visible_team_ids(user)
    if team_ids is None:
        return queryset
    lookups = team_lookups(queryset.model)
    condition = Q()
    for lookup in lookups:
        condition |= Q(**{f"{lookup}__in": team_ids})
    queryset = queryset.filter(condition)
    return queryset.distinct() if any(_many_valued(queryset.model, lookup) for lookup in lookups) else queryset


def _many_valued(model: type[models.Model], lookup: str) -> bool:
    """Whether following `lookup` can meet several rows (and so repeat the object in a join)."""
    for name in lookup.split("__"):
        field = model._meta.get_field(name)
        if field.many_to_many or field.one_to_many:
            return True
        if field.related_model is None:
            return False
        model = field.related_model
    return False


def owning_team(obj: models.Model) -> Team | None:
    """The team whose role rules changes to this object (the first lookup path)."""
    if isinstance(obj, Team):
        return obj
    current = obj
    for attribute in team_lookups(type(obj))[0].split("__"):
        current = getattr(current, attribute, None)
    return current


def owning_cluster(obj: models.Model) -> Cluster | None:
    """The cluster an object acts in (its model's `cluster_lookup`); None for what acts in none."""
    lookup = getattr(type(obj), "cluster_lookup", "")
    current = obj if lookup else None
    for attribute in lookup.split("__") if lookup else ():
        current = getattr(current, attribute, None)
    return current


def check_may_write(user, obj: models.Model, role: str, *, lock: bool = False) -> None:  # noqa: ANN001
    """Refuse (services.AccessDenied) a change to `obj` unless the user holds `role` in its team and,
    when it acts in a cluster, the cluster is owned by or shared with that team."""
    lookup = getattr(type(obj), "cluster_lookup", "cluster")
    services.check_may_change(user, owning_team(obj), owning_cluster(obj), role,
                              field=lookup.split("__")[0], lock=lock)
    if isinstance(obj, Pool):
        _check_may_name_fallback(user, obj)


def _check_may_name_fallback(user, pool: Pool) -> None:  # noqa: ANN001
    """Naming another team's pool as the fallback sends this pool's overflow to it: the operator role in
    that team, as a traffic shift between the two needs. Checked when the fallback changes, not on every edit."""
    fallback = pool.fallback_pool
    if fallback is None or fallback.team_id == pool.team_id:
        return
    if pool.pk and Pool.objects.filter(pk=pool.pk, fallback_pool=fallback).exists():
        return
    if not services.has_role(user, fallback.team, Role.OPERATOR):
        raise services.AccessDenied(
            f"{fallback} belongs to team '{fallback.team}': naming it as the fallback needs the operator role "
            "there (its replicas would take this pool's traffic).", "fallback_pool")


class RolePermission(permissions.BasePermission):
    """Reads need a login; each write action needs the role the view names for it.

    Views set `action_roles` (action name -> role). The object-level check uses the role in the
    object's own team; creation is checked by the view once the payload names a team.
    """

    message = "Your role in this team does not allow this action."
    default_write_role = Role.ADMIN

    def _required_role(self, request, view) -> str | None:  # noqa: ANN001
        action = getattr(view, "action", None)
        roles = getattr(view, "action_roles", {})
        if action in roles:
            return roles[action]
        if request.method in permissions.SAFE_METHODS:
            return None
        return self.default_write_role

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        if not request.user or not request.user.is_authenticated:
            return False
        role = self._required_role(request, view)
        if role is None or request.user.is_superuser:
            return True
        # Fail fast for users who hold the role in no team at all.
        return services.visible_team_ids(request.user, min_role=role).exists()

    def has_object_permission(self, request, view, obj) -> bool:  # noqa: ANN001
        role = self._required_role(request, view)
        if role is None:
            return True
        return services.has_role(request.user, owning_team(obj), role)
