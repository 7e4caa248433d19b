"""States and kinds for capacity proposals."""
from django.db import models


class ProposalKind(models.TextChoices):
    PRESCALE = "prescale", "Pre-scale (forecast)"
    WARM_POOL = "warm_pool", "Warm pool"
    REACTIVE = "reactive", "Reactive (queue depth, request rate)"
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


ACTIVE_STATES = frozenset({ProposalState.PENDING, ProposalState.APPROVED, ProposalState.EXECUTING})
TERMINAL_STATES = frozenset(set(ProposalState) - ACTIVE_STATES)

# The only legal moves (design.md §5). Services refuse everything else.
TRANSITIONS: dict[str, frozenset[str]] = {
    ProposalState.PENDING: frozenset(
        {ProposalState.APPROVED, ProposalState.REJECTED, ProposalState.EXPIRED, ProposalState.SUPERSEDED}
    ),
    ProposalState.APPROVED: frozenset({ProposalState.EXECUTING}),
    ProposalState.EXECUTING: frozenset({ProposalState.SUCCEEDED, ProposalState.FAILED}),
}


def can_move(source: str, target: str) -> bool:
    return target in TRANSITIONS.get(source, frozenset())
