"""Proposal workflows: propose, approve, reject, expire, execute, track to Ready.

Every transition locks the proposal row (or updates it conditionally), re-checks the state, appends
a ProposalEvent and an audit record in the same transaction. Views, the API, Slack handlers and
Celery tasks only call these.
"""
from __future__ import annotations

import statistics
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel, Role
from controlplane.errors import ServiceError
from controlplane.models import Pool
from scaling.choices import ProposalKind, ProposalState, can_move
from scaling.drivers.cluster import ClusterDriver, DriverError
from scaling.drivers.registry import cluster_driver, workload_of
from scaling.models import ColdStart, PoolStatus, Proposal, ProposalEvent

COLD_START_SAMPLES = 20  # the pool's p50/p95 come from this many latest measurements


class ProposalError(ServiceError):
    """Base of the errors a caller turns into an answer (400, 403, 409)."""


class InvalidProposal(ProposalError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def payload(self) -> dict[str, Any]:
        return {self.field: [str(self)]}


class ProposalForbidden(ProposalError):
    status_code = 403


class ProposalConflict(ProposalError):
    status_code = 409

    def __init__(self, proposal: Proposal, message: str) -> None:
        super().__init__(message)
        self.proposal = proposal

    def payload(self) -> dict[str, Any]:
        return {"detail": str(self), "state": self.proposal.state, "id": self.proposal.pk}


def _event(proposal: Proposal, source: str, actor: core.Actor, comment: str = "", **data: Any) -> None:
    ProposalEvent.objects.create(
        proposal=proposal, from_state=source, to_state=proposal.state, actor_name=actor.name,
        channel=actor.channel, comment=comment, data=data,
    )


def _transition(proposal: Proposal, target: str, actor: core.Actor, comment: str = "", **data: Any) -> None:
    """Move a locked proposal to `target`, with its event and audit record. Refuses illegal moves."""
    source = proposal.state
    if not can_move(source, target):
        raise ProposalConflict(proposal, f"Proposal #{proposal.pk} is {source}; it cannot become {target}.")
    before = core.snapshot(proposal)
    proposal.state = target
    proposal.save()
    _event(proposal, source, actor, comment, **data)
    core.record(actor, target, proposal, before=before, team=proposal.pool.team)


def _locked(proposal_id: int) -> Proposal:
    return Proposal.objects.select_for_update().select_related("pool__cluster", "pool__team").get(pk=proposal_id)


# --- proposing ---------------------------------------------------------------------------------


def current_replicas(pool: Pool) -> int:
    """What the cluster last said it runs (desired), else the pool's minimum."""
    status = PoolStatus.objects.filter(pool=pool).first()
    return status.desired_replicas if status else pool.min_replicas


def propose(
    pool: Pool,
    target_replicas: int,
    kind: str,
    actor: core.Actor,
    *,
    current: int | None = None,
    reasons: list[dict[str, Any]] | None = None,
    signals: dict[str, Any] | None = None,
    evidence: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    now: datetime | None = None,
) -> Proposal:
    """Create a proposal (superseding the pool's pending one) and auto-approve it if policy allows.

    With an `idempotency_key` already used, returns that proposal unchanged.
    """
    now = now or timezone.now()
    if idempotency_key:
        existing = Proposal.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing
    if actor.user is not None and (refusal := core.cluster_refusal(pool.cluster, pool.team)):
        raise ProposalForbidden(refusal)  # a person acts through the pool's team, in a cluster open to it
    if not pool.min_replicas <= target_replicas <= pool.max_replicas:
        raise InvalidProposal(
            "target_replicas",
            f"target_replicas must be between the pool's min_replicas ({pool.min_replicas}) "
            f"and max_replicas ({pool.max_replicas}); got {target_replicas}.",
        )
    current = current_replicas(pool) if current is None else current
    if target_replicas == current and kind != ProposalKind.MANUAL:
        raise InvalidProposal("target_replicas", f"The pool already runs {current} replicas.")
    policy = pool.approval
    try:
        with transaction.atomic():
            Pool.objects.select_for_update().filter(pk=pool.pk).first()  # one proposer per pool at a time
            for older in Proposal.objects.select_for_update().filter(pool=pool, state=ProposalState.PENDING):
                _transition(older, ProposalState.SUPERSEDED, actor, "a newer proposal replaced it")
            proposal = Proposal.objects.create(
                pool=pool, kind=kind, current_replicas=current, target_replicas=target_replicas,
                reasons=reasons or [], signals=signals or {}, evidence=evidence or {},
                idempotency_key=idempotency_key or uuid.uuid4().hex,
                requested_by=actor.user, requested_channel=actor.channel,
                expires_at=now + timedelta(minutes=policy.expiry_minutes),
            )
            _event(proposal, "", actor)
            core.record(actor, "propose", proposal, team=pool.team)
    except IntegrityError:
        # A concurrent proposer with the same key won; answer with its proposal.
        if idempotency_key and (existing := Proposal.objects.filter(idempotency_key=idempotency_key).first()):
            return existing
        raise
    reason = auto_approval_reason(proposal, now)
    if reason:
        approve(proposal.pk, core.Actor(user=None, channel=Channel.AUTO), comment=reason)
        proposal.refresh_from_db()
    return proposal


def auto_approval_reason(proposal: Proposal, now: datetime) -> str:
    """Why policy approves this proposal without a person, or '' when a person must."""
    policy = proposal.pool.approval
    cluster = proposal.pool.cluster
    if policy.auto_approve_reactive and proposal.kind == ProposalKind.REACTIVE and 0 < proposal.delta <= policy.reactive_max_step:
        return f"reactive scale-up of {proposal.delta} within the guardrail of {policy.reactive_max_step}"
    if policy.auto_approve_off_hours and cluster.off_hours_windows:
        local = now.astimezone(cluster.tz)
        if any(window.contains(local.weekday(), local.time()) for window in cluster.off_hours_windows):
            return f"inside the off-hours window of {cluster.name} ({local:%a %H:%M} {cluster.time_zone})"
    return ""


# --- deciding ----------------------------------------------------------------------------------


def _check_may_decide(proposal: Proposal, actor: core.Actor) -> None:
    if actor.channel == Channel.AUTO:
        return
    if actor.user is None or not core.has_role(actor.user, proposal.pool.team, Role.OPERATOR):
        raise ProposalForbidden(f"Approving needs the operator role in team {proposal.pool.team}.")
    if refusal := core.cluster_refusal(proposal.pool.cluster, proposal.pool.team):
        raise ProposalForbidden(refusal)
    threshold = proposal.pool.approval.two_person_min_delta
    if threshold is not None and proposal.delta >= threshold and proposal.requested_by_id == actor.user.pk:
        raise ProposalForbidden(
            f"A change of {proposal.delta} replicas needs a second person: you requested it, someone else approves."
        )


def approve(proposal_id: int, actor: core.Actor, comment: str = "", now: datetime | None = None) -> Proposal:
    """Approve a pending proposal; execution is queued once the transaction commits."""
    now = now or timezone.now()
    with transaction.atomic():
        proposal = _locked(proposal_id)
        _check_may_decide(proposal, actor)
        expired = proposal.state == ProposalState.PENDING and proposal.expires_at <= now
        if expired:
            # Recorded (committed) before refusing, so the next reader sees it expired too.
            _transition(proposal, ProposalState.EXPIRED, core.Actor(None, Channel.AUTO), "expired before approval")
        elif proposal.state != ProposalState.PENDING:
            raise ProposalConflict(proposal, f"Proposal #{proposal.pk} is already {proposal.state}.")
        else:
            proposal.decided_by, proposal.decided_channel = actor.user, actor.channel
            proposal.decided_at, proposal.decision_comment = now, comment
            _transition(proposal, ProposalState.APPROVED, actor, comment)
            transaction.on_commit(lambda: _enqueue_execution(proposal.pk))
    if expired:
        raise ProposalConflict(proposal, f"Proposal #{proposal.pk} expired at {proposal.expires_at:%H:%M:%S} UTC.")
    return proposal


def reject(proposal_id: int, actor: core.Actor, comment: str = "", now: datetime | None = None) -> Proposal:
    now = now or timezone.now()
    with transaction.atomic():
        proposal = _locked(proposal_id)
        _check_may_decide(proposal, actor)
        if proposal.state != ProposalState.PENDING:
            raise ProposalConflict(proposal, f"Proposal #{proposal.pk} is already {proposal.state}.")
        proposal.decided_by, proposal.decided_channel = actor.user, actor.channel
        proposal.decided_at, proposal.decision_comment = now, comment
        _transition(proposal, ProposalState.REJECTED, actor, comment)
    return proposal


def expire_due(now: datetime | None = None) -> int:
    """Expire pending proposals past their expiry. Returns how many."""
    now = now or timezone.now()
    expired = 0
    for proposal_id in Proposal.objects.filter(state=ProposalState.PENDING, expires_at__lte=now).values_list("pk", flat=True):
        with transaction.atomic():
            proposal = _locked(proposal_id)
            if proposal.state == ProposalState.PENDING and proposal.expires_at <= now:
                _transition(proposal, ProposalState.EXPIRED, core.Actor(None, Channel.AUTO), "nobody decided in time")
                expired += 1
    return expired


# --- executing ---------------------------------------------------------------------------------


def _enqueue_execution(proposal_id: int) -> None:
    from scaling import tasks  # tasks import services; import here to keep the graph one-way

    tasks.execute_proposal.delay(proposal_id)


def claim_execution(proposal_id: int, now: datetime | None = None) -> Proposal | None:
    """Take an approved proposal (or one whose worker died before applying it) for execution.

    Returns None when another worker holds it or it needs no execution: safe to call twice.
    """
    now = now or timezone.now()
    auto = core.Actor(None, Channel.AUTO)
    with transaction.atomic():
        proposal = _locked(proposal_id)
        lease = now + timedelta(seconds=settings.EXECUTION_LEASE_S)
        if proposal.state == ProposalState.APPROVED:
            proposal.execution_started_at, proposal.lease_until = now, lease
            proposal.attempts += 1
            _transition(proposal, ProposalState.EXECUTING, auto, "execution started", attempt=proposal.attempts)
            return proposal
        resumable = (
            proposal.state == ProposalState.EXECUTING
            and proposal.applied_at is None
            and (proposal.lease_until is None or proposal.lease_until <= now)
        )
        if resumable:
            proposal.lease_until = lease
            proposal.attempts += 1
            proposal.save(update_fields=["lease_until", "attempts"])
            ProposalEvent.objects.create(
                proposal=proposal, from_state=proposal.state, to_state=proposal.state, actor_name=auto.name,
                channel=auto.channel, comment="resumed after the previous attempt stopped", data={"attempt": proposal.attempts},
            )
            return proposal
    return None


def apply_change(proposal: Proposal, driver: ClusterDriver, now: datetime | None = None) -> Proposal:
    """Write the target replicas to the cluster (idempotent: the driver skips a write already made)."""
    auto = core.Actor(None, Channel.AUTO)
    try:
        outcome = driver.scale(workload_of(proposal.pool), proposal.target_replicas)
    except DriverError as exc:
        return _record_failure(proposal, exc)
    with transaction.atomic():
        locked = _locked(proposal.pk)
        if locked.state == ProposalState.EXECUTING and locked.applied_at is None:
            locked.applied_at = now or timezone.now()
            locked.last_error = ""
            locked.save(update_fields=["applied_at", "last_error"])
            ProposalEvent.objects.create(
                proposal=locked, from_state=locked.state, to_state=locked.state, actor_name=auto.name,
                channel=auto.channel,
                comment=f"cluster accepted {outcome.previous} → {outcome.target} replicas"
                + ("" if outcome.wrote else " (already applied)"),
                data={"wrote": outcome.wrote, "conflicts": outcome.conflicts},
            )
            core.record(auto, "scale", locked, after={"previous": outcome.previous, "target": outcome.target,
                                                       "wrote": outcome.wrote}, team=locked.pool.team)
    return locked


def _record_failure(proposal: Proposal, exc: DriverError) -> Proposal:
    """A failed call: permanent, or the last allowed attempt, fails the proposal; else the next tick retries."""
    with transaction.atomic():
        locked = _locked(proposal.pk)
        locked.last_error = str(exc)
        if exc.permanent or locked.attempts >= settings.EXECUTION_MAX_ATTEMPTS:
            locked.finished_at, locked.lease_until = timezone.now(), None
            _transition(locked, ProposalState.FAILED, core.Actor(None, Channel.AUTO), str(exc))
        else:
            locked.lease_until = None
            locked.save(update_fields=["last_error", "lease_until"])
    return locked


def track_readiness(proposal: Proposal, driver: ClusterDriver, now: datetime | None = None) -> Proposal:
    """Follow an applied change until its replicas are Ready; record the measured cold start."""
    now = now or timezone.now()
    try:
        status = driver.status(workload_of(proposal.pool))
    except DriverError as exc:
        Proposal.objects.filter(pk=proposal.pk).update(last_error=str(exc))
        return proposal
    record_status(proposal.pool, status.desired, status.ready, now)
    auto = core.Actor(None, Channel.AUTO)
    with transaction.atomic():
        locked = _locked(proposal.pk)
        if locked.state != ProposalState.EXECUTING or locked.applied_at is None:
            return locked
        scaling_down = locked.target_replicas < locked.current_replicas
        done = status.desired <= locked.target_replicas if scaling_down else status.ready >= locked.target_replicas
        if done:
            locked.finished_at = now
            seconds = (now - locked.applied_at).total_seconds()
            if not scaling_down:
                # The pods' own Ready transition, not this tick's time: the tick may be up to 15 s late.
                try:
                    ready_at = driver.last_ready_at(workload_of(locked.pool))
                except DriverError:
                    ready_at = None
                if ready_at is not None and ready_at > locked.applied_at:
                    seconds = min(seconds, (ready_at - locked.applied_at).total_seconds())
            if not scaling_down:
                locked.measured_cold_start_s = seconds
                ColdStart.objects.create(pool=locked.pool, proposal=locked, seconds=seconds)
                _refresh_cold_start_stats(locked.pool)
            _transition(locked, ProposalState.SUCCEEDED, auto, f"{status.ready} replicas ready after {seconds:.0f} s",
                        ready=status.ready)
        elif (now - locked.applied_at).total_seconds() > settings.READY_TIMEOUT_S:
            locked.finished_at = now
            locked.last_error = f"only {status.ready} of {locked.target_replicas} replicas ready after {settings.READY_TIMEOUT_S} s"
            _transition(locked, ProposalState.FAILED, auto, locked.last_error)
    return locked


def execute(proposal_id: int, driver: ClusterDriver | None = None) -> Proposal | None:
    """Claim, apply and check once. Safe to run from many workers: one claims, the rest return None."""
    proposal = claim_execution(proposal_id)
    if proposal is None:
        return None
    try:
        driver = driver or cluster_driver(proposal.pool.cluster)
    except DriverError as exc:
        return _record_failure(proposal, exc)
    proposal = apply_change(proposal, driver)
    if proposal.state == ProposalState.EXECUTING and proposal.applied_at is not None:
        proposal = track_readiness(proposal, driver)
    return proposal


def record_status(pool: Pool, desired: int, ready: int, now: datetime) -> None:
    PoolStatus.objects.update_or_create(
        pool=pool, defaults={"desired_replicas": desired, "ready_replicas": ready, "observed_at": now}
    )


def _refresh_cold_start_stats(pool: Pool) -> None:
    samples = list(ColdStart.objects.filter(pool=pool).values_list("seconds", flat=True)[:COLD_START_SAMPLES])
    if not samples:
        return
    p50 = statistics.median(samples)
    p95 = statistics.quantiles(samples, n=20, method="inclusive")[18] if len(samples) > 1 else samples[0]
    Pool.objects.filter(pk=pool.pk).update(cold_start_p50_s=round(p50, 1), cold_start_p95_s=round(max(p50, p95), 1))
