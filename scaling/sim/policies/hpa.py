"""Kubernetes HPA (autoscaling/v2) semantics used by the reactive baselines.

Raw proposal: ceil(metric / target x replicas) unless within the 0.1 tolerance. Default behaviour:
scale-up stabilisation 0 s and at most max(+100 %, +4 pods) per 15 s; scale-down takes the highest
recommendation of the last 300 s and at most -100 % per 15 s; then min/max replicas.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

TOLERANCE = 0.1


@dataclass(frozen=True)
class HpaBehavior:
    scale_up_window_s: float = 0.0
    scale_down_window_s: float = 300.0
    scale_up_percent: float = 100.0
    scale_up_pods: int = 4
    scale_down_percent: float = 100.0
    period_s: float = 15.0


@dataclass
class HpaState:
    recommendations: deque[tuple[float, int]] = field(default_factory=deque)
    scale_events: deque[tuple[float, int]] = field(default_factory=deque)  # (time, replica change)


def proposal(current_replicas: int, usage_ratio: float) -> int:
    """Replicas the metric asks for; `usage_ratio` is metric / target per replica."""
    if abs(1.0 - usage_ratio) <= TOLERANCE:
        return current_replicas
    return math.ceil(round(usage_ratio * current_replicas, 9))


def stabilise(
    now: float, current: int, recommended: int, state: HpaState, behavior: HpaBehavior, min_replicas: int, max_replicas: int
) -> int:
    """Stabilisation windows, rate policies and bounds: the replica count the HPA would set."""
    state.recommendations.append((now, recommended))
    horizon = max(behavior.scale_up_window_s, behavior.scale_down_window_s)
    while state.recommendations and state.recommendations[0][0] < now - horizon:
        state.recommendations.popleft()
    up_candidates = [r for t, r in state.recommendations if t >= now - behavior.scale_up_window_s]
    down_candidates = [r for t, r in state.recommendations if t >= now - behavior.scale_down_window_s]
    desired = current
    if current < min(up_candidates):
        desired = min(up_candidates)
    elif current > max(down_candidates):
        desired = max(down_candidates)

    while state.scale_events and state.scale_events[0][0] <= now - behavior.period_s:
        state.scale_events.popleft()
    added = sum(c for _, c in state.scale_events if c > 0)
    removed = -sum(c for _, c in state.scale_events if c < 0)
    if desired > current:
        base = current - added  # replicas at the start of the period
        limit = max(base * (1 + behavior.scale_up_percent / 100), base + behavior.scale_up_pods)
        desired = min(desired, math.floor(limit))
    elif desired < current:
        base = current + removed
        desired = max(desired, math.ceil(base * (1 - behavior.scale_down_percent / 100)))
    desired = max(min_replicas, min(max_replicas, desired))
    if desired != current:
        state.scale_events.append((now, desired - current))
    return desired
