"""States and kinds for capacity proposals."""
from django.db import models


class ProposalKind(models.TextChoices):
    PRESCALE = "prescale", "Pre-scale (forecast)"
    WARM_POOL = "warm_pool", "Warm pool"
    REACTIVE = "reactive", "Reactive (queue depth, request rate)"
    PREDICTIVE = "predictive", "Predictive (the next cold start)"
    SCHEDULED = "scheduled", "Scheduled peak"
    MANUAL = "manual", "Manual"


class ProposalState(models.TextChoices):
    PENDING = "pending", "Pending approval"
    APPROVED = "approved", "Approved"
    EXECUTING = "executing", "Executing"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"
    SUPERSEDED = "superseded", "Superseded"
    # The cluster moved between the decision and the write: the change no longer goes the approved way.
    STALE = "stale", "Stale (the cluster changed)"


ACTIVE_STATES = frozenset({ProposalState.PENDING, ProposalState.APPROVED, ProposalState.EXECUTING})
TERMINAL_STATES = frozenset(set(ProposalState) - ACTIVE_STATES)

# The only legal moves (design.md §5). Services refuse everything else.
TRANSITIONS: dict[str, frozenset[str]] = {
    ProposalState.PENDING: frozenset(
        {ProposalState.APPROVED, ProposalState.REJECTED, ProposalState.EXPIRED, ProposalState.SUPERSEDED}
    ),
    # An approved proposal not yet taken for execution is superseded by a newer decision, like a pending one.
    ProposalState.APPROVED: frozenset({ProposalState.EXECUTING, ProposalState.SUPERSEDED}),
    ProposalState.EXECUTING: frozenset({ProposalState.SUCCEEDED, ProposalState.FAILED, ProposalState.STALE}),
}


# Proposals for a forecast (pre-scales) and proposals for what the pool needs now are decided apart:
# a pre-scale waiting for a person never blocks the reactive safety net, and each supersedes only its own kind.
PRESCALE_TRACK = frozenset({ProposalKind.PRESCALE})


def same_track(kind_a: str, kind_b: str) -> bool:
    return (kind_a in PRESCALE_TRACK) == (kind_b in PRESCALE_TRACK)


def can_move(source: str, target: str) -> bool:
    return target in TRANSITIONS.get(source, frozenset())


class RouterKind(models.TextChoices):
    """Route kinds a shift can move traffic on (scaling.drivers.registry.ROUTERS serves each)."""

    HTTPROUTE = "httproute", "Gateway API HTTPRoute"
    VIRTUALSERVICE = "virtualservice", "Istio VirtualService"


class ShiftPhase(models.TextChoices):
    PENDING = "pending", "Pending"
    STEPPING = "stepping", "Writing a step"  # the step's weights are being written (persisted before the write)
    HOLDING = "holding", "Holding"
    WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
    PAUSED = "paused", "Paused"
    COMPLETED = "completed", "Completed"
    ROLLING_BACK = "rolling_back", "Rolling back"
    ROLLED_BACK = "rolled_back", "Rolled back"
    # The route changed under the shift (someone else wrote its weights), the router refused for good, or
    # the pools' teams may no longer act in the cluster.
    FAILED = "failed", "Failed"


SHIFT_ACTIVE_PHASES = frozenset({ShiftPhase.PENDING, ShiftPhase.STEPPING, ShiftPhase.HOLDING,
                                 ShiftPhase.WAITING_APPROVAL, ShiftPhase.PAUSED, ShiftPhase.ROLLING_BACK})
SHIFT_TERMINAL_PHASES = frozenset(set(ShiftPhase) - SHIFT_ACTIVE_PHASES)

# The only legal moves; `scaling.traffic` refuses everything else.
SHIFT_TRANSITIONS: dict[str, frozenset[str]] = {
    ShiftPhase.PENDING: frozenset({ShiftPhase.STEPPING, ShiftPhase.WAITING_APPROVAL, ShiftPhase.PAUSED,
                                   ShiftPhase.ROLLED_BACK, ShiftPhase.FAILED}),
    ShiftPhase.STEPPING: frozenset({ShiftPhase.HOLDING, ShiftPhase.ROLLING_BACK, ShiftPhase.FAILED}),
    ShiftPhase.HOLDING: frozenset({ShiftPhase.STEPPING, ShiftPhase.WAITING_APPROVAL, ShiftPhase.COMPLETED,
                                   ShiftPhase.PAUSED, ShiftPhase.ROLLING_BACK, ShiftPhase.FAILED}),
    ShiftPhase.WAITING_APPROVAL: frozenset({ShiftPhase.STEPPING, ShiftPhase.PAUSED, ShiftPhase.ROLLING_BACK,
                                            ShiftPhase.FAILED}),
    ShiftPhase.PAUSED: frozenset({ShiftPhase.PENDING, ShiftPhase.HOLDING, ShiftPhase.WAITING_APPROVAL,
                                  ShiftPhase.ROLLING_BACK, ShiftPhase.FAILED}),
    ShiftPhase.ROLLING_BACK: frozenset({ShiftPhase.ROLLED_BACK, ShiftPhase.FAILED}),
}


def can_shift(source: str, target: str) -> bool:
    return target in SHIFT_TRANSITIONS.get(source, frozenset())


class ReportState(models.TextChoices):
    PENDING = "pending", "Waiting for a worker"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Done"
    FAILED = "failed", "Failed"


REPORT_ACTIVE_STATES = frozenset({ReportState.PENDING, ReportState.RUNNING})


class PeakBasis(models.TextChoices):
    """What a warm-pool size is a share of (`scaling.reports.PEAK_BASES`)."""

    FORECAST = "forecast", "The 30-minute forecast's expected peak (what the planner does today)"
    DAY_PEAK = "day-peak", "The highest 1-minute rate of the last 24 hours (a proposed standing floor)"


class FallbackPhase(models.TextChoices):
    """A fallback activation's life (design.md §5): a person may have to approve the entry first."""

    WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
    ACTIVE = "active", "Active"
    RESTORING = "restoring", "Restoring"
    RESTORED = "restored", "Restored"
    REJECTED = "rejected", "Rejected"  # a waiting entry a person turned down, or the overload passed first
    # Someone else changed the route's weights under it, or the router refused for good: Headroom stepped back.
    FAILED = "failed", "Failed"


FALLBACK_OPEN_PHASES = frozenset({FallbackPhase.WAITING_APPROVAL, FallbackPhase.ACTIVE, FallbackPhase.RESTORING})


class BreakerScope(models.TextChoices):
    ENDPOINT = "endpoint", "Endpoint"
    POOL = "pool", "Pool"
    SYSTEM = "system", "System"


class BreakerState(models.TextChoices):
    CLOSED = "closed", "Closed"
    OPEN = "open", "Open"
    HALF_OPEN = "half_open", "Half-open"
