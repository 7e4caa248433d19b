"""Template helpers for traffic shifts and fallbacks on the pool page."""
from __future__ import annotations

from typing import Any

from django import template

from controlplane import services as core
from controlplane.choices import Role
from scaling.models import FallbackActivation, TrafficShift

register = template.Library()


@register.filter
def may_move_traffic(shift: TrafficShift, user: Any) -> bool:
    """Whether the user may pause, resume, roll back or approve this shift (operator of both ends' teams)."""
    return all(core.may_act_in(user, pool.team, pool.cluster, Role.OPERATOR) for pool in (shift.from_pool, shift.to_pool))


@register.filter
def may_fall_back(activation: FallbackActivation, user: Any) -> bool:
    """Whether the user may restore this fallback or decide its entry (operator of both pools' teams)."""
    pools = (activation.pool, activation.fallback_pool)
    return all(core.may_act_in(user, pool.team, pool.cluster, Role.OPERATOR) for pool in pools if pool is not None)
