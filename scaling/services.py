"""Proposal workflows: propose, approve, reject, expire, execute, track to Ready.

Every transition locks the proposal row (or updates it conditionally), re-checks the state, appends
a ProposalEvent and an audit record in the same transaction. Views, the API, Slack handlers and
Celery tasks only call these.
"""
from __future__ import annotations

import logging
import random
import secrets
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from controlplane import metrics, permissions, services as core
from controlplane.choices import Channel, Role
from controlplane.config import ApprovalPolicy
from controlplane.errors import ServiceError
from controlplane.models import Cluster, Pool
from scaling.choices import (
    ACTIVE_STATES,
    PRESCALE_TRACK,
    TERMINAL_STATES,
    ProposalKind,
    ProposalState,
    can_move,
    same_track,
)
from scaling.drivers.cluster import ClusterDriver, DriverError, PremiseChanged, ReplicaStatus, ScalePremise, Workload
from scaling.drivers.registry import cluster_driver, workload_of
from scaling.engine.planner import WARM_FLOOR, PlannerState, PoolPlan, record_scale_event
from scaling.models import ColdStart, PlannerMemory, PoolStatus, Proposal, ProposalEvent

logger = logging.getLogger(__name__)

COLD_START_SAMPLES = 20  # the pool's p50/p95 come from this many latest measurements
# No model loads faster: a Ready transition this soon after the write is a pod that was already starting.
COLD_START_FLOOR_S = 0.25
# The control loop's own idempotency keys; callers cannot use the prefix, so they cannot pre-empt them.
LOOP_KEY_PREFIX = "loop:"
# Transient execution failures are retried with this backoff (doubling, capped, jittered).
RETRY_BASE_S = 5.0
RETRY_CAP_S = 120.0
# A scale-up past the guardrail runs its share at once under the same key with this suffix.
SHARE_KEY_SUFFIX = ":share"
SHARE_REASON = "guardrail_share"
# The planner keeps recommendations newer than the window's start, one a tick: the oldest may be a
# tick (or two, for a late tick) younger than the window and still cover it.
SETTLE_SLACK_S = 30.0
# How often the tick asks whether a pool's scaling target would refuse a write (one or two reads per pool).
SCALABLE_CHECK_S = 600.0
# A person's self-approved changes to one pool add up over this window for the two-person rule.
APPROVED_STATES = (ProposalState.APPROVED, ProposalState.EXECUTING, ProposalState.SUCCEEDED)


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
    if target in TERMINAL_STATES:  # counted here: a scrape counting the table would read its whole history
        transaction.on_commit(lambda: metrics.record_proposal_finished(target))


def _locked(proposal_id: int) -> Proposal:
    return Proposal.objects.select_for_update().select_related("pool__cluster", "pool__team").get(pk=proposal_id)


# --- proposing ---------------------------------------------------------------------------------


def current_replicas(pool: Pool) -> int:
    """What the cluster last said it runs (desired), else the pool's minimum."""
    status = PoolStatus.objects.filter(pool=pool).first()
    return status.desired_replicas if status else pool.min_replicas


def covering_prescale(pool: Pool, target: int) -> Proposal | None:
    """A pre-scale of the pool in flight that asks for at least `target`: it answers a new pre-scale of that size,
    which proposed anyway would supersede it (pending, or even approved) with a smaller one."""
    return Proposal.objects.filter(pool=pool, kind__in=PRESCALE_TRACK, state__in=ACTIVE_STATES,
                                   target_replicas__gte=target).order_by("-target_replicas", "pk").first()


def loop_idempotency_key(pool: Pool, kind: str, target: int, now: datetime) -> str:
    """The control loop's key for one decision: one proposal per pool, kind, target and minute."""
    return f"{LOOP_KEY_PREFIX}{pool.pk}:{kind}:{target}:{now:%Y%m%d%H%M}"


def decided_workload(pool: Pool) -> dict[str, Any]:
    """The pool's scaling target as a proposal records it: what its change is decided for."""
    workload = workload_of(pool)
    decided = {"cluster": pool.cluster_id, "namespace": workload.namespace, "deployment": workload.deployment,
               "scaled_object": workload.scaled_object}
    # Only where set: the proposals recorded before HPAs were a scaling target stay equal to their pool.
    return decided | ({"hpa": True} if workload.hpa else {})


def written_workload(proposal: Proposal) -> Workload:
    """What the change was decided for, and so written to and followed (`Proposal.workload`): an admin who repoints
    the pool after the write must not make its tracking read another Deployment. The pool's own where a proposal
    recorded none (made before proposals recorded their workload)."""
    recorded = proposal.workload or {}
    if not recorded.get("deployment"):
        return workload_of(proposal.pool)
    return Workload(namespace=str(recorded.get("namespace", "")), deployment=str(recorded["deployment"]),
                    scaled_object=str(recorded.get("scaled_object") or ""), hpa=bool(recorded.get("hpa")))


def _written_cluster(proposal: Proposal) -> Cluster:
    recorded = (proposal.workload or {}).get("cluster")
    if recorded in (None, proposal.pool.cluster_id):
        return proposal.pool.cluster
    return Cluster.objects.get(pk=recorded)


def _target_text(workload: dict[str, Any]) -> str:
    scaled = workload.get("scaled_object") or workload.get("deployment")
    through = " (its HorizontalPodAutoscaler)" if workload.get("hpa") else ""
    return f"{workload.get('namespace')}/{scaled}{through} in cluster {workload.get('cluster')}"


def pool_changed(proposal: Proposal) -> str:
    """Why the pool is no longer what the proposal was decided for ('' when it is): an admin repointed
    it at another scaled object, or its replica range no longer holds the target."""
    pool = proposal.pool
    now_scaling = decided_workload(pool)
    if proposal.workload and proposal.workload != now_scaling:
        return (f"the pool now scales {_target_text(now_scaling)}, not {_target_text(proposal.workload)} "
                f"as when it was proposed")
    if not pool.min_replicas <= proposal.target_replicas <= pool.max_replicas:
        return (f"the pool's replicas are now bounded to {pool.min_replicas}-{pool.max_replicas}, "
                f"which {proposal.target_replicas} is outside")
    return ""


def supersede_what_an_edit_changed(sender: type, instance: Pool, created: bool, **kwargs: Any) -> None:
    """`post_save` of a pool: its pending proposals that the edit made wrong (another scaled object, a
    replica range that no longer holds the target) end superseded in the same transaction, so the inbox
    and Slack stop offering them. Approved ones are the worker's to re-check before it writes."""
    if created:
        return
    with transaction.atomic():
        for proposal in Proposal.objects.select_for_update().filter(pool=instance, state=ProposalState.PENDING):
            proposal.pool = instance
            if changed := pool_changed(proposal):
                _transition(proposal, ProposalState.SUPERSEDED, core.Actor(None, Channel.AUTO), changed)


def check_caller_key(key: str) -> None:
    """Callers choose their own keys, but not in the loop's space (they could pre-empt its proposals)."""
    if key.startswith(LOOP_KEY_PREFIX):
        raise InvalidProposal("idempotency_key", f"Keys starting with '{LOOP_KEY_PREFIX}' are reserved for the control loop.")


def _replay(pool: Pool, key: str, target: int, kind: str) -> Proposal | None:
    """The proposal an idempotency key already made for this pool; 409 when the key asked for something else."""
    existing = Proposal.objects.filter(pool=pool, idempotency_key=key).first()
    if existing is not None and (existing.target_replicas, existing.kind) != (target, kind):
        raise ProposalConflict(existing, (
            f"The idempotency key '{key}' was used for proposal #{existing.pk} ({existing.kind}, "
            f"{existing.target_replicas} replicas); use a new key for a different change."))
    return existing


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
    floor_until: datetime | None = None,
    now: datetime | None = None,
) -> Proposal:
    """Create a proposal and auto-approve it if policy allows.

    It supersedes the pool's older proposals of its track (pre-scales, or everything else) that
    wait for a person or for execution. With an `idempotency_key` already used for this pool,
    returns that proposal unchanged (409 if the key asked for a different change).
    """
    now = now or timezone.now()
    if idempotency_key and (existing := _replay(pool, idempotency_key, target_replicas, kind)):
        return existing
    if refusal := core.cluster_refusal(pool.cluster, pool.team):
        # A person or the loop acts through the pool's team, in a cluster owned by or shared with it.
        raise ProposalForbidden(refusal)
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
    key = idempotency_key or secrets.token_hex(16)
    share_target = guardrail_share(policy, kind, actor, current, target_replicas)
    # A pre-scale is for its forecast window: approved after the window's end it would add replicas for a peak
    # that has passed, so it expires then at the latest, whatever the pool's expiry says.
    expires_at = now + timedelta(minutes=policy.expiry_minutes)
    if floor_until is not None:
        expires_at = max(now, min(expires_at, floor_until))

    def create(target: int, key: str, reasons: list[dict[str, Any]]) -> Proposal:
        proposal = Proposal.objects.create(
            pool=pool, kind=kind, current_replicas=current, target_replicas=target,
            reasons=reasons, signals=signals or {}, evidence=evidence or {}, idempotency_key=key,
            requested_by=actor.user, requested_channel=actor.channel,
            expires_at=expires_at, floor_until=floor_until,
            workload=decided_workload(pool),
        )
        _event(proposal, "", actor)
        core.record(actor, "propose", proposal, team=pool.team)
        return proposal

    try:
        with transaction.atomic():
            Pool.objects.select_for_update().filter(pk=pool.pk).first()  # one proposer per pool at a time
            waiting = Proposal.objects.select_for_update().filter(
                pool=pool, state__in=[ProposalState.PENDING, ProposalState.APPROVED])
            for older in waiting:
                if same_track(older.kind, kind):
                    _transition(older, ProposalState.SUPERSEDED, actor, "a newer proposal replaced it")
            if share_target is not None:
                # As the HPA's rate policies would: the guardrail's share now, the rest to a person. The
                # share is approved before the rest exists, so one pending proposal per track still holds.
                note = _share_note(current, share_target, target_replicas)
                share = create(share_target, f"{key}{SHARE_KEY_SUFFIX}", [note, *(reasons or [])])
                approve(share.pk, core.Actor(user=None, channel=Channel.AUTO), comment=(
                    f"the guardrail's share: +{share_target - current} of +{target_replicas - current} at once "
                    f"(guardrail {policy.guardrail(current)})"), now=now)
                reasons = [note | {"share": share.pk}, *(reasons or [])]
            proposal = create(target_replicas, key, reasons or [])
    except IntegrityError:
        # A concurrent proposer with the same key won; answer with its proposal.
        if idempotency_key and (existing := _replay(pool, idempotency_key, target_replicas, kind)):
            return existing
        raise
    reason = auto_approval_reason(proposal, now)
    if reason:
        approve(proposal.pk, core.Actor(user=None, channel=Channel.AUTO), comment=reason, now=now)
        proposal.refresh_from_db()
    return proposal


def _by_the_planner(proposal: Proposal) -> bool:
    return proposal.requested_by_id is None and proposal.requested_channel == Channel.AUTO


def _within_guardrail_kind(policy: ApprovalPolicy, kind: str) -> bool:
    """The planner's kinds whose scale-ups policy approves up to the guardrail."""
    return (kind == ProposalKind.REACTIVE and policy.auto_approve_reactive) or (
        kind == ProposalKind.PREDICTIVE and policy.auto_approve_predictive)


def guardrail_share(policy: ApprovalPolicy, kind: str, actor: core.Actor, current: int, target: int) -> int | None:
    """The replicas the planner's scale-up past the guardrail runs at once (None: no split)."""
    by_the_planner = actor.user is None and actor.channel == Channel.AUTO
    guardrail = policy.guardrail(current)
    if by_the_planner and _within_guardrail_kind(policy, kind) and target - current > guardrail:
        return current + guardrail
    return None


def _share_note(current: int, share_target: int, target: int) -> dict[str, Any]:
    return {"code": SHARE_REASON, "detail": (
        f"+{share_target - current} of +{target - current} ran at once ({current} → {share_target}, within the "
        f"guardrail); the remaining +{target - share_target} waits for a person")}


def scale_down_settled(proposal: Proposal, now: datetime) -> str:
    """Why the planner's scale-down may go without a person ('' when it may not): every recommendation
    over the whole stabilization window allowed it, and it keeps the warm floor. Read from the decision
    that made it (the planner's memory), so a scale-down from a state that has not seen the window waits."""
    memory = PlannerMemory.objects.filter(pool=proposal.pool).first()
    decision = (memory.last_decision or {}) if memory else {}
    if decision.get("target_replicas") != proposal.target_replicas or not memory.state:
        return ""
    window_s = proposal.pool.planner_overrides.get("scale_down_window_s", PoolPlan.scale_down_window_s)
    recommendations = PlannerState.from_dict(memory.state).recommendations
    oldest = min((at for at, _ in recommendations), default=None)
    if oldest is None or oldest > now.timestamp() - window_s + SETTLE_SLACK_S:
        return ""
    if max(raw for _, raw in recommendations) > proposal.target_replicas:
        return ""
    warm_floor = next((t.get("replicas") for t in decision.get("terms", []) if t.get("name") == WARM_FLOOR), None)
    if warm_floor is None or proposal.target_replicas < warm_floor:
        return ""
    return (f"scale-down held through the {window_s / 60:g}-minute stabilization window and keeps the "
            f"warm floor of {warm_floor}")


def auto_approval_reason(proposal: Proposal, now: datetime) -> str:
    """Why policy approves this proposal without a person, or '' when a person must.

    The planner's reactive and predictive scale-ups inside the guardrail, its settled scale-downs
    and off-hours changes are approved by policy; a person's proposal is approved off-hours only
    while it stays under the two-person threshold (counting that person's other self-approved
    changes to the pool within the window).
    """
    policy = proposal.pool.approval
    cluster = proposal.pool.cluster
    planner_made = _by_the_planner(proposal)
    guardrail = policy.guardrail(proposal.current_replicas)
    if planner_made and _within_guardrail_kind(policy, proposal.kind) and 0 < proposal.delta <= guardrail:
        return f"{proposal.kind} scale-up of {proposal.delta} within the guardrail of {guardrail}"
    if planner_made and policy.auto_approve_scale_down and proposal.delta < 0 and proposal.kind != ProposalKind.PRESCALE:
        if settled := scale_down_settled(proposal, now):
            return settled
    if not (policy.auto_approve_off_hours and cluster.off_hours_windows):
        return ""
    if not planner_made and _needs_second_person(proposal, proposal.requested_by, now):
        return ""
    local = now.astimezone(cluster.tz)
    if any(window.contains_instant(now, cluster.tz) for window in cluster.off_hours_windows):
        # The zone's abbreviation tells the two passes of a repeated hour apart (01:15 EDT, 01:15 EST).
        return f"inside the off-hours window of {cluster.name} ({local:%a %H:%M %Z}, {cluster.time_zone})"
    return ""


# --- deciding ----------------------------------------------------------------------------------


def _net_change_by(proposal: Proposal, user: Any, now: datetime) -> int:
    """This change plus the user's own changes to the pool, requested and approved by them (or by
    policy) within the two-person window: small steps add up to one large change."""
    window = timedelta(minutes=proposal.pool.approval.two_person_window_minutes)
    earlier = Proposal.objects.filter(
        pool=proposal.pool, requested_by=user, state__in=APPROVED_STATES, decided_at__gte=now - window,
    ).exclude(pk=proposal.pk).filter(Q(decided_by=user) | Q(decided_channel=Channel.AUTO))
    return proposal.delta + sum(p.delta for p in earlier)


def _needs_second_person(proposal: Proposal, user: Any, now: datetime) -> str:
    """Why `user` may not approve this alone ('' when they may)."""
    threshold = proposal.pool.approval.two_person_min_delta
    if threshold is None or user is None or proposal.requested_by_id != user.pk:
        return ""
    net = _net_change_by(proposal, user, now)
    if abs(net) < threshold:
        return ""
    if net != proposal.delta:
        return (f"With your other changes to this pool in the last {proposal.pool.approval.two_person_window_minutes} "
                f"minutes this makes {net:+d} replicas: you requested it, someone else approves.")
    return f"A change of {proposal.delta:+d} replicas needs a second person: you requested it, someone else approves."


def _check_may_decide(proposal: Proposal, actor: core.Actor, now: datetime) -> None:
    if actor.channel == Channel.AUTO:
        return
    if actor.user is None or not core.has_role(actor.user, proposal.pool.team, Role.OPERATOR):
        raise ProposalForbidden(f"Approving needs the operator role in team {proposal.pool.team}.")
    if refusal := core.cluster_refusal(proposal.pool.cluster, proposal.pool.team):
        raise ProposalForbidden(refusal)
    if reason := _needs_second_person(proposal, actor.user, now):
        raise ProposalForbidden(reason)


def approve(proposal_id: int, actor: core.Actor, comment: str = "", now: datetime | None = None) -> Proposal:
    """Approve a pending proposal; execution is queued once the transaction commits."""
    now = now or timezone.now()
    with transaction.atomic():
        proposal = _locked(proposal_id)
        _check_may_decide(proposal, actor, now)
        expired = proposal.state == ProposalState.PENDING and proposal.expires_at <= now
        changed = pool_changed(proposal) if proposal.state == ProposalState.PENDING and not expired else ""
        if expired:
            # Recorded (committed) before refusing, so the next reader sees it expired too.
            _transition(proposal, ProposalState.EXPIRED, core.Actor(None, Channel.AUTO), "expired before approval")
        elif changed:
            _transition(proposal, ProposalState.SUPERSEDED, core.Actor(None, Channel.AUTO), changed)
        elif proposal.state != ProposalState.PENDING:
            raise ProposalConflict(proposal, f"Proposal #{proposal.pk} is already {proposal.state}.")
        else:
            proposal.decided_by, proposal.decided_channel = actor.user, actor.channel
            proposal.decided_at, proposal.decision_comment = now, comment
            _transition(proposal, ProposalState.APPROVED, actor, comment)
            # robust: a broker that is down must not undo the approval; advance_executions picks it up.
            transaction.on_commit(lambda: _enqueue_execution(proposal.pk), robust=True)
    if expired:
        raise ProposalConflict(proposal, f"Proposal #{proposal.pk} expired at {proposal.expires_at:%H:%M:%S} UTC.")
    if changed:
        raise ProposalConflict(proposal, f"Proposal #{proposal.pk} no longer applies: {changed}.")
    return proposal


def reject(proposal_id: int, actor: core.Actor, comment: str = "", now: datetime | None = None) -> Proposal:
    now = now or timezone.now()
    with transaction.atomic():
        proposal = _locked(proposal_id)
        _check_may_decide(proposal, actor, now)
        if proposal.state != ProposalState.PENDING:
            raise ProposalConflict(proposal, f"Proposal #{proposal.pk} is already {proposal.state}.")
        proposal.decided_by, proposal.decided_channel = actor.user, actor.channel
        proposal.decided_at, proposal.decision_comment = now, comment
        _transition(proposal, ProposalState.REJECTED, actor, comment)
    return proposal


BULK_MAX = 50  # proposals decided in one request


@dataclass(frozen=True)
class BulkOutcome:
    """One proposal's answer in a bulk decision: its state after, or why it was refused."""

    proposal_id: int
    ok: bool
    state: str | None
    error: str = ""
    status_code: int = 200


def decide_many(proposal_ids: list[int], verdict: str, actor: core.Actor, comment: str = "",
                now: datetime | None = None) -> list[BulkOutcome]:
    """Approve or reject several proposals, each on its own with every rule of one decision.

    Each decision is its own transaction: one that is refused (already decided, a second person
    needed, another team's) leaves the others decided. Proposals the actor cannot see answer 404,
    as they would one by one.
    """
    decide_one = {"approve": approve, "reject": reject}[verdict]
    visible = set(permissions.scoped(Proposal.objects.filter(pk__in=proposal_ids), actor.user)
                  .values_list("pk", flat=True))
    outcomes = []
    for proposal_id in dict.fromkeys(proposal_ids):  # each once, in the order given
        if proposal_id not in visible:
            outcomes.append(BulkOutcome(proposal_id, False, None, f"Proposal #{proposal_id} not found.", 404))
            continue
        try:
            decided = decide_one(proposal_id, actor, comment, now=now)
            outcomes.append(BulkOutcome(proposal_id, True, decided.state))
        except ProposalError as exc:
            state = Proposal.objects.filter(pk=proposal_id).values_list("state", flat=True).first()
            outcomes.append(BulkOutcome(proposal_id, False, state, str(exc), exc.status_code))
    return outcomes


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

    try:
        tasks.execute_proposal.delay(proposal_id)
    except Exception:  # noqa: BLE001 - any broker failure; the proposal stays approved and is picked up
        logger.warning("could not queue the execution of proposal #%s; advance_executions will run it",
                       proposal_id, exc_info=True)


def _note(proposal: Proposal, comment: str, **data: Any) -> None:
    """An event that changes no state: an attempt, a retry, a write confirmed."""
    _event(proposal, proposal.state, core.Actor(None, Channel.AUTO), comment, **data)


def claim_execution(proposal_id: int, now: datetime | None = None) -> Proposal | None:
    """Take an approved proposal (or one whose worker died or whose backoff passed) for execution.

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
        elif (proposal.state == ProposalState.EXECUTING and proposal.applied_at is None
              and (proposal.lease_until is None or proposal.lease_until <= now)):
            proposal.lease_until = lease
            proposal.attempts += 1
            proposal.save(update_fields=["lease_until", "attempts"])
            _note(proposal, "resumed after the previous attempt stopped", attempt=proposal.attempts)
        else:
            return None
        if ended := _no_longer_writable(proposal):
            state, reason = ended
            proposal.finished_at, proposal.lease_until = now, None
            proposal.last_error = f"{reason}; {_nothing_written(proposal)}"
            _transition(proposal, state, auto, proposal.last_error)
            return None
    return proposal


def _no_longer_writable(proposal: Proposal) -> tuple[str, str] | None:
    """Why a claimed change must not be written, and the state it ends in (None: it may be written).

    Between approval and a worker (or a retry after its backoff) the world may have moved: the
    pool's team may no longer act in the cluster, the pool may have been edited, or a later
    decision of the same track may have been approved. Writing then would act on a premise that
    is gone, or undo the later decision.
    """
    pool = proposal.pool
    if refusal := core.cluster_refusal(pool.cluster, pool.team):
        return ProposalState.FAILED, f"refused: {refusal}"
    if changed := pool_changed(proposal):
        return ProposalState.STALE, f"stale: {changed}"
    # A guardrail's share runs before the rest of its change (made and approved after it), not instead of it.
    rest_key = proposal.idempotency_key.removesuffix(SHARE_KEY_SUFFIX)
    later = Proposal.objects.filter(pool=pool, pk__gt=proposal.pk, state__in=APPROVED_STATES) \
        .exclude(idempotency_key=rest_key).only("pk", "kind")
    if newer := next((p for p in later if same_track(p.kind, proposal.kind)), None):
        return ProposalState.STALE, f"stale: proposal #{newer.pk}, decided later, replaced it"
    return None


def _nothing_written(proposal: Proposal) -> str:
    """What a change that ends before its write left on the cluster. An earlier attempt whose answer
    was lost may have landed (its intent is on record), so say so rather than 'nothing'."""
    earlier = ProposalEvent.objects.filter(
        proposal=proposal, from_state=ProposalState.EXECUTING, to_state=ProposalState.EXECUTING,
        data__has_key="decided_from", data__attempt__lt=proposal.attempts).exists()
    if earlier:
        return "nothing written by this attempt (an earlier attempt's write may have landed: see its scale-intent)"
    return "nothing written"


def _record_intent(proposal: Proposal, now: datetime, generation: int | None) -> None:
    """Committed before the call: a write that lands while the worker dies is still on record, with the
    generation of the object it writes as read just before (see `_earlier_generation`)."""
    auto = core.Actor(None, Channel.AUTO)
    with transaction.atomic():
        _note(proposal, f"writing {proposal.target_replicas} replicas (attempt {proposal.attempts})",
              attempt=proposal.attempts, target=proposal.target_replicas, decided_from=proposal.current_replicas,
              generation=generation)
        core.record(auto, "scale-intent", proposal, after={
            "target": proposal.target_replicas, "decided_from": proposal.current_replicas, "attempt": proposal.attempts,
            "generation": generation, "at": now.isoformat()}, team=proposal.pool.team)


def _earlier_generation(proposal: Proposal) -> int | None:
    """The generation the first attempt of this proposal read before its write (None on a first attempt).

    An attempt that is resumed or retried never learnt whether the earlier write landed. Finding the count it
    was decided from, it cannot tell "never written" from "written and set back by a person"; a generation
    moved since says the object was changed, and the write is not made again (ScalePremise.undone). The first
    attempt's, not the last one's: an attempt that read the generation after the undo and died before its
    check must not make the undo look like the starting point."""
    earlier = ProposalEvent.objects.filter(proposal=proposal, data__has_key="generation",
                                           data__attempt__lt=proposal.attempts).order_by("pk").first()
    return earlier.data["generation"] if earlier else None


def apply_change(proposal: Proposal, driver: ClusterDriver, now: datetime | None = None) -> Proposal:
    """Write the target replicas if the premise still holds (idempotent: a write already made is not repeated)."""
    now = now or timezone.now()
    workload = written_workload(proposal)
    try:
        generation = driver.generation(workload)
    except Exception as exc:  # noqa: BLE001 - as a failed write: nothing was written
        return _record_failure(proposal, exc, now)
    _record_intent(proposal, now, generation)
    premise = ScalePremise(decided_from=proposal.current_replicas, target=proposal.target_replicas,
                           earlier_generation=_earlier_generation(proposal))
    try:
        outcome = driver.scale(workload, proposal.target_replicas, premise)
    except PremiseChanged as exc:
        return _record_stale(proposal, exc, now)
    except Exception as exc:  # noqa: BLE001 - whatever broke, it is recorded and counted as an attempt
        return _record_failure(proposal, exc, now)
    auto = core.Actor(None, Channel.AUTO)
    with transaction.atomic():
        locked = _locked(proposal.pk)
        if locked.state == ProposalState.EXECUTING and locked.applied_at is None:
            locked.applied_at = now
            locked.applied_from_replicas = outcome.previous if outcome.wrote else None
            locked.last_error = ""
            locked.save(update_fields=["applied_at", "applied_from_replicas", "last_error"])
            _note(locked, f"cluster accepted {outcome.previous} → {outcome.target} replicas"
                  + ("" if outcome.wrote else " (already there: nothing written)"),
                  wrote=outcome.wrote, conflicts=outcome.conflicts, previous=outcome.previous)
            core.record(auto, "scale", locked, after={"previous": outcome.previous, "target": outcome.target,
                                                       "wrote": outcome.wrote}, team=locked.pool.team)
            if outcome.wrote:
                _count_against_rate_limits(locked.pool, now, outcome.target - outcome.previous)
    return locked


def _count_against_rate_limits(pool: Pool, at: datetime, change: int) -> None:
    """The planner's rate limits count what the cluster accepted, when it accepted it."""
    memory, _ = PlannerMemory.objects.select_for_update().get_or_create(pool=pool)
    state = PlannerState.from_dict(memory.state) if memory.state else PlannerState()
    memory.state = record_scale_event(state, at.timestamp(), change).to_dict()
    memory.save(update_fields=["state", "updated_at"])


def _record_stale(proposal: Proposal, exc: PremiseChanged, now: datetime) -> Proposal:
    with transaction.atomic():
        locked = _locked(proposal.pk)
        if locked.state != ProposalState.EXECUTING:
            return locked
        locked.finished_at, locked.lease_until = now, None
        locked.last_error = f"stale: {exc}; {_nothing_written(locked)}"
        _transition(locked, ProposalState.STALE, core.Actor(None, Channel.AUTO), locked.last_error,
                    decided_from=locked.current_replicas, target_replicas=locked.target_replicas, live=exc.live)
    return locked


def _backoff_s(attempt: int) -> float:
    """Doubling from RETRY_BASE_S, capped, with jitter so many executions do not retry in step."""
    return min(RETRY_CAP_S, RETRY_BASE_S * 2 ** max(0, attempt - 1)) * random.uniform(0.5, 1.0)


def _record_failure(proposal: Proposal, exc: Exception, now: datetime | None = None) -> Proposal:
    """Permanent errors, or the last allowed attempt, fail the proposal; else the next try waits for its backoff."""
    now = now or timezone.now()
    message = str(exc) if isinstance(exc, DriverError) else f"unexpected {type(exc).__name__}: {exc}"
    permanent = isinstance(exc, DriverError) and exc.permanent
    with transaction.atomic():
        locked = _locked(proposal.pk)
        if locked.state != ProposalState.EXECUTING:
            return locked
        if permanent or locked.attempts >= settings.EXECUTION_MAX_ATTEMPTS:
            locked.finished_at, locked.lease_until = now, None
            locked.last_error = message if permanent else (
                f"{message} (gave up after {locked.attempts} attempts)")
            _transition(locked, ProposalState.FAILED, core.Actor(None, Channel.AUTO), locked.last_error)
        else:
            wait = _backoff_s(locked.attempts)
            if isinstance(exc, DriverError) and exc.retry_after_s is not None:
                # The API server said when (API Priority and Fairness' 429): not before, within the backoff's cap.
                wait = max(wait, min(exc.retry_after_s, RETRY_CAP_S))
            locked.lease_until = now + timedelta(seconds=wait)
            locked.last_error = (f"attempt {locked.attempts} of {settings.EXECUTION_MAX_ATTEMPTS} failed: {message}; "
                                 f"next try in {wait:.0f} s")
            locked.save(update_fields=["last_error", "lease_until"])
            _note(locked, locked.last_error, attempt=locked.attempts, retry_in_s=round(wait, 1))
    return locked


def track_readiness(proposal: Proposal, driver: ClusterDriver, now: datetime | None = None) -> Proposal:
    """Follow an applied change until its replicas are Ready; record the cold start of the pods it added."""
    now = now or timezone.now()
    workload = written_workload(proposal)
    try:
        status = driver.status(workload)
    except Exception as exc:  # noqa: BLE001 - recorded; the next tick looks again, until it is no use
        return _unreadable(proposal, exc, now)
    if workload == workload_of(proposal.pool):  # not a Deployment the pool was repointed away from
        record_status(proposal.pool, status, now)
    auto = core.Actor(None, Channel.AUTO)
    with transaction.atomic():
        locked = _locked(proposal.pk)
        if locked.state != ProposalState.EXECUTING or locked.applied_at is None:
            return locked
        scaling_down = locked.target_replicas < locked.current_replicas
        # A lowered autoscaler floor is the whole change: its HPA removes replicas as its own metrics allow,
        # maybe none, so there is nothing to wait for.
        floor_lowered = scaling_down and bool(workload.hpa or workload.scaled_object)
        done = floor_lowered or (status.desired <= locked.target_replicas if scaling_down
                                 else status.ready >= locked.target_replicas)
        if done:
            locked.finished_at = now
            seconds = _cold_start_s(locked, driver, now)
            if seconds is not None:
                locked.measured_cold_start_s = seconds
                ColdStart.objects.create(pool=locked.pool, proposal=locked, seconds=seconds)
                _refresh_cold_start_stats(locked.pool)
            note = (f"floor lowered to {locked.target_replicas}: the autoscaler runs {status.desired} now and removes "
                    "replicas as its metrics allow" if floor_lowered else
                    f"{status.ready} replicas ready" + (f" after {seconds:.1f} s" if seconds is not None else ""))
            _transition(locked, ProposalState.SUCCEEDED, auto, note, ready=status.ready)
        elif (now - locked.applied_at).total_seconds() > settings.READY_TIMEOUT_S:
            locked.finished_at = now
            locked.last_error = f"only {status.ready} of {locked.target_replicas} replicas ready after {settings.READY_TIMEOUT_S} s"
            _transition(locked, ProposalState.FAILED, auto, locked.last_error)
    return locked


def _unreadable(proposal: Proposal, exc: Exception, now: datetime) -> Proposal:
    """A readiness read failed. A workload that is gone (404) or reads failing past the Ready timeout
    fail the change: it would otherwise stay executing, and block the same target, for good."""
    message = f"reading readiness: {exc}"
    with transaction.atomic():
        locked = _locked(proposal.pk)
        if locked.state != ProposalState.EXECUTING or locked.applied_at is None:
            return locked
        gone = isinstance(exc, DriverError) and exc.status == 404
        elapsed = (now - locked.applied_at).total_seconds()
        timed_out = elapsed > settings.READY_TIMEOUT_S
        locked.last_error = message
        if not (gone or timed_out):
            locked.save(update_fields=["last_error"])
            return locked
        locked.finished_at = now
        if not gone:
            locked.last_error = f"{message} ({elapsed:.0f} s after the write, past the Ready timeout of {settings.READY_TIMEOUT_S} s)"
        _transition(locked, ProposalState.FAILED, core.Actor(None, Channel.AUTO), locked.last_error)
    return locked


def _cold_start_s(proposal: Proposal, driver: ClusterDriver, now: datetime) -> float | None:
    """Seconds from this proposal's write to the Ready of the pods it added; None when it added none.

    Scale-downs and writes that found the target already in place measure nothing, and neither
    does a pool whose added pods cannot be told apart.
    """
    previous = proposal.applied_from_replicas
    if previous is None or proposal.target_replicas <= previous or proposal.applied_at is None:
        return None
    added = proposal.target_replicas - previous
    try:
        ready_at = driver.added_pods_ready_at(written_workload(proposal), proposal.applied_at, added)
    except Exception:  # noqa: BLE001 - the tick's own time bounds it
        ready_at = None
    # The pods' own Ready transition when the API has it (the tick may be up to 15 s late), else now.
    seconds = (now - proposal.applied_at).total_seconds()
    if ready_at is not None and ready_at > proposal.applied_at:  # whole-second stamps can read earlier
        seconds = min(seconds, (ready_at - proposal.applied_at).total_seconds())
    return seconds if seconds >= COLD_START_FLOOR_S else None


def execute(proposal_id: int, driver: ClusterDriver | None = None) -> Proposal | None:
    """Claim, apply and check once. Safe to run from many workers: one claims, the rest return None."""
    proposal = claim_execution(proposal_id)
    if proposal is None:
        return None
    try:
        driver = driver or cluster_driver(_written_cluster(proposal))
    except Exception as exc:  # noqa: BLE001 - recorded and counted like any failed attempt
        return _record_failure(proposal, exc)
    proposal = apply_change(proposal, driver)
    if proposal.state == ProposalState.EXECUTING and proposal.applied_at is not None:
        proposal = track_readiness(proposal, driver)
    return proposal


def advance(now: datetime | None = None) -> dict[str, int]:
    """The execution sweep: run approved proposals whose task was lost, resume executions whose lease
    or backoff ran out, and follow applied ones to Ready. One proposal's failure never stops the rest."""
    now = now or timezone.now()
    counts = {"started": 0, "resumed": 0, "tracked": 0, "errors": 0}
    executing = Proposal.objects.filter(state__in=[ProposalState.APPROVED, ProposalState.EXECUTING]) \
        .select_related("pool__cluster", "pool__team").order_by("pk")
    for proposal in executing:
        try:
            if proposal.state == ProposalState.APPROVED or proposal.applied_at is None:
                due = proposal.state == ProposalState.APPROVED or proposal.lease_until is None or proposal.lease_until <= now
                if due and execute(proposal.pk) is not None:
                    counts["started" if proposal.state == ProposalState.APPROVED else "resumed"] += 1
                continue
            track_readiness(proposal, cluster_driver(_written_cluster(proposal)))
            counts["tracked"] += 1
        except Exception:  # noqa: BLE001 - logged; the next sweep tries again
            counts["errors"] += 1
            logger.exception("advancing proposal #%s failed", proposal.pk)
    return counts


def record_status(pool: Pool, status: ReplicaStatus, now: datetime) -> PoolStatus:
    """Keep what a read of the cluster found: the replica counts and the --max-num-seqs its template states."""
    stored, _ = PoolStatus.objects.update_or_create(pool=pool, defaults={
        "desired_replicas": status.desired, "ready_replicas": status.ready, "batch_slots": status.batch_slots,
        "observed_at": now})
    return stored


def check_scalable(pool: Pool, status: PoolStatus, driver: ClusterDriver, now: datetime) -> None:
    """Find out, before a surge needs a write, whether the pool's scaling target would refuse one.

    Checked every SCALABLE_CHECK_S and at once when the pool's scaling target changed. A refusal is kept on the
    pool's `status` (the pool page, the API and the `cannot_scale` alert show it with its fix); a check that
    could not be made keeps what the last one found."""
    decided = decided_workload(pool)
    if (status.scale_checked_at is not None and status.scale_checked_for == decided
            and (now - status.scale_checked_at).total_seconds() < SCALABLE_CHECK_S):
        return
    try:
        driver.check_writable(workload_of(pool))
        refusal = ""
    except DriverError as exc:
        if not exc.permanent:
            return
        refusal = str(exc)
    except Exception:  # noqa: BLE001 - a driver bug must not stop the tick: logged, checked again next tick
        logger.exception("checking whether %s can be scaled failed", pool)
        return
    PoolStatus.objects.filter(pool=pool).update(scale_refusal=refusal, scale_checked_at=now,
                                                scale_checked_for=decided)


def _refresh_cold_start_stats(pool: Pool) -> None:
    samples = list(ColdStart.objects.filter(pool=pool, seconds__gte=COLD_START_FLOOR_S)
                   .values_list("seconds", flat=True)[:COLD_START_SAMPLES])
    if not samples:
        return
    p50 = statistics.median(samples)
    p95 = statistics.quantiles(samples, n=20, method="inclusive")[18] if len(samples) > 1 else samples[0]
    Pool.objects.filter(pk=pool.pk).update(cold_start_p50_s=round(p50, 1), cold_start_p95_s=round(max(p50, p95), 1))
