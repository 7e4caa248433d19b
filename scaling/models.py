"""Capacity proposals, their event history, measured cold starts, traffic shifts and warm-pool reports."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.choices import Channel
from controlplane.models import Cluster, Pool
from scaling.choices import (
    FALLBACK_OPEN_PHASES,
    SHIFT_ACTIVE_PHASES,
    BreakerScope,
    BreakerState,
    FallbackPhase,
    PeakBasis,
    ProposalKind,
    ProposalState,
    ReportState,
    RouterKind,
    ShiftPhase,
)


class Proposal(models.Model):
    """A change of a pool's replicas, from proposal through approval to ready capacity."""

    team_lookups = ("pool__team",)  # who owns it (see controlplane.permissions)

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="proposals")
    kind = models.CharField(max_length=16, choices=ProposalKind.choices)
    state = models.CharField(max_length=16, choices=ProposalState.choices, default=ProposalState.PENDING)
    # The premise: the replica count the change was decided against. Execution writes only while the
    # live count still lets the change go this way (scaling.drivers.cluster.ScalePremise).
    current_replicas = models.PositiveIntegerField(help_text="Replicas when proposed (desired, as the cluster said).")
    target_replicas = models.PositiveIntegerField()
    reasons = models.JSONField(default=list, blank=True, help_text="[{code, detail}] from the planner or a person.")
    signals = models.JSONField(default=dict, blank=True, help_text="The signal snapshot that justified it.")
    evidence = models.JSONField(default=dict, blank=True, help_text="Forecast and capacity series for the chart.")
    idempotency_key = models.CharField(max_length=100)  # unique per pool (see Meta)
    # What the change was decided for: the pool's cluster and scaled object then. Execution writes
    # only to the same one (an admin may repoint the pool meanwhile). Empty on proposals made before.
    workload = models.JSONField(default=dict, blank=True, help_text="{cluster, namespace, deployment, scaled_object}.")
    # An approved pre-scale holds its target as the planner's floor until the forecast window it was
    # decided for has passed, whether or not its execution already finished.
    floor_until = models.DateTimeField(null=True, blank=True)

    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    requested_channel = models.CharField(max_length=16, choices=Channel.choices)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_channel = models.CharField(max_length=16, choices=Channel.choices, blank=True)
    decision_comment = models.TextField(blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    execution_started_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True, help_text="When the cluster accepted the new replicas.")
    applied_from_replicas = models.PositiveIntegerField(
        null=True, blank=True, help_text="Replicas the cluster ran just before this proposal's write (null: it wrote nothing).")
    finished_at = models.DateTimeField(null=True, blank=True)
    # A worker holds an execution until this time; past it, the next tick may resume it. After a
    # transient failure it is the earliest time of the next attempt (the backoff).
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    measured_cold_start_s = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # At most one proposal per pool and track waits for approval; a newer one supersedes it.
            # Pre-scales are a track of their own, so a pending one never blocks the reactive safety net.
            models.UniqueConstraint(
                fields=["pool"], condition=Q(state=ProposalState.PENDING) & ~Q(kind=ProposalKind.PRESCALE),
                name="proposal_one_pending_per_pool",
            ),
            models.UniqueConstraint(
                fields=["pool"], condition=Q(state=ProposalState.PENDING) & Q(kind=ProposalKind.PRESCALE),
                name="proposal_one_pending_prescale_per_pool",
            ),
            # A caller's key means one request per pool; another pool (another team) may use the same key.
            models.UniqueConstraint(fields=["pool", "idempotency_key"], name="proposal_idempotency_key_per_pool"),
            models.CheckConstraint(condition=~Q(current_replicas=models.F("target_replicas")) | Q(kind="manual"),
                                   name="proposal_changes_something"),
        ]
        indexes = [
            models.Index(fields=["state", "expires_at"]),
            # What a tick reads of a pool's proposals (the active ones, the approved pre-scales' floors, the last
            # hour's applied changes) by these, not by the pool alone: a pool's decided history grows for good.
            models.Index(fields=["pool", "state", "floor_until"], name="proposal_pool_state_floor"),
            models.Index(fields=["pool", "applied_at"], name="proposal_pool_applied"),
            # The pool page's and the API's latest decisions of a pool, newest first, without sorting its history.
            models.Index(fields=["pool", "-created_at", "-id"], name="proposal_pool_newest"),
            models.Index(fields=["-created_at", "-id"], name="proposal_newest"),  # the inbox's history, the API's list
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.pool}: {self.current_replicas} → {self.target_replicas} ({self.state})"

    @property
    def delta(self) -> int:
        return self.target_replicas - self.current_replicas

    @property
    def cost_per_hour_usd(self) -> float | None:
        """Extra (or saved) on-demand GPU cost per hour of the change, from the cluster's prices."""
        price = self.pool.cluster.prices.get(self.pool.gpu_type)
        if price is None:
            return None
        return self.delta * self.pool.gpus_per_replica * price.on_demand_usd_per_hour


class ProposalEvent(models.Model):
    """One transition of a proposal (or a note on it): the timeline, and the notification outbox."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True, db_index=True)  # the notification sweep reads recent rows
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    actor_name = models.CharField(max_length=150)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    comment = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.proposal_id}: {self.from_state or '∅'} → {self.to_state} by {self.actor_name}"


class ColdStart(models.Model):
    """One measured cold start: from the cluster accepting a scale-up to the replicas being Ready."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="cold_starts")
    proposal = models.OneToOneField(Proposal, on_delete=models.SET_NULL, null=True, related_name="cold_start")
    seconds = models.FloatField()
    measured_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-measured_at"]
        # Every tick reads a pool's latest measurement (the cold-start alert), each scale-up its latest 20.
        indexes = [models.Index(fields=["pool", "-measured_at", "-id"], name="coldstart_pool_newest")]


class PoolStatus(models.Model):
    """The last replica counts read from the cluster: what the UI shows and proposals start from."""

    pool = models.OneToOneField(Pool, on_delete=models.CASCADE, related_name="status", primary_key=True)
    desired_replicas = models.PositiveIntegerField()
    ready_replicas = models.PositiveIntegerField()
    # The Deployment's --max-num-seqs as its pod template stated it at that read (null: it did not).
    batch_slots = models.PositiveIntegerField(
        null=True, blank=True, help_text="The --max-num-seqs the Deployment's vLLM container stated at the last read.")
    observed_at = models.DateTimeField()
    # Whether a write of the pool's replicas would be refused, found by the tick before any surge needs one
    # (services.check_scalable): an HPA owning a Deployment written directly, a missing or foreign ScaledObject.
    scale_refusal = models.TextField(blank=True, help_text="Why a write of the pool's replicas would be refused, as "
                                                           "the last check found it (empty: it would be written).")
    scale_checked_at = models.DateTimeField(null=True, blank=True)
    scale_checked_for = models.JSONField(default=dict, blank=True,
                                         help_text="The pool's scaling target that check was made for.")

    @property
    def arriving_replicas(self) -> int:
        return max(0, self.desired_replicas - self.ready_replicas)


class PlannerMemory(models.Model):
    """What the planner must remember between ticks (its PlannerState), and its latest answer.

    Persisted so a restarted worker resumes with the same stabilization window and scale events;
    the real HPA loses them on restart, Headroom must not.
    """

    pool = models.OneToOneField(Pool, on_delete=models.CASCADE, related_name="planner", primary_key=True)
    state = models.JSONField(default=dict)
    last_decision = models.JSONField(default=dict, blank=True)
    last_signals = models.JSONField(default=dict, blank=True, help_text="What the last tick read (null: unknown).")
    seasonal_forecast = models.JSONField(default=dict, blank=True)  # refreshed every few minutes
    # Set once the pool's past request rate was read from Prometheus, so forecasts start from history.
    history_backfilled_at = models.DateTimeField(null=True, blank=True)
    # The last tick that failed for this pool (the others were still planned); cleared by a good tick.
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    # What the last tick could not read for this pool, by source ("prometheus queue_depth": why), so the pool
    # page names the failing query or API call instead of a bare "unknown".
    read_errors = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)


class TickLease(models.Model):
    """One tick per cluster at a time: the worker named here holds the cluster until `until`.

    A row and a conditional UPDATE rather than a Redis lock, so the embedded demo (SQLite, no
    Redis) and production share the rule; a holder that died frees the cluster when `until` passes.
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="tick_lease", primary_key=True)
    holder = models.CharField(max_length=100, blank=True)
    until = models.DateTimeField()


class SignalSample(models.Model):
    """One tick's key signals for one pool: the history forecasts and charts are made from."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField(db_index=True)
    request_rate_rps = models.FloatField(null=True)  # the demand (an open fallback's too); null: unknown, never 0
    queue_depth = models.FloatField(null=True)
    ttft_p95_s = models.FloatField(null=True)
    e2e_p95_s = models.FloatField(null=True)
    ttft_p99_s = models.FloatField(null=True)
    e2e_p99_s = models.FloatField(null=True)
    error_rate = models.FloatField(null=True)  # 0..1 of the requests answered
    kv_cache_usage = models.FloatField(null=True)  # 0..1, the mean over ready replicas
    prefix_cache_hit_rate = models.FloatField(null=True)  # 0..1 of the prompt tokens queried
    # 0..1 of the pool's route weight on its fallback pool (an open activation's, as read back); 0 with none.
    fallback_share = models.FloatField(null=True)
    # 0..1 of the route's requests its fallback pool answered, by the weights or the gateway's spill-over
    # (the two pools' rates); None without a fallback pool or a known rate.
    fallback_answered_share = models.FloatField(null=True)
    ready_replicas = models.IntegerField(null=True)
    desired_replicas = models.IntegerField(null=True)
    target_replicas = models.IntegerField(null=True)

    class Meta:
        ordering = ["at"]
        indexes = [models.Index(fields=["pool", "at"])]


class RouteWriteIntent(models.Model):
    """The route write a shift or a fallback is about to make, committed before it (`traffic.write_intent`): the
    next attempt of the same write compares the route's generation with the one read here."""

    write_key = models.CharField(max_length=40, blank=True, help_text="Which write: its phase and step or share.")
    write_generation = models.BigIntegerField(null=True, blank=True,
                                              help_text="The route's generation read just before that write.")

    class Meta:
        abstract = True


class TrafficShift(RouteWriteIntent):
    """Traffic moved on a route from one pool's backend to another's, step by step under guards.

    `step` counts the steps whose weights are on the route (0: the weights it started from); while
    `stepping` it is the step being written, persisted before the write so a restarted worker
    finishes that step and no other. See scaling/engine/shifting.py for the rules of a tick.
    """

    team_lookups = ("to_pool__team", "from_pool__team")  # the receiving pool's team rules it
    cluster_lookup = "cluster"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="shifts")
    from_pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="shifts_giving")
    to_pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="shifts_receiving")
    router_kind = models.CharField(max_length=16, choices=RouterKind.choices, default=RouterKind.HTTPROUTE)
    route_namespace = models.CharField(max_length=63)
    route_name = models.CharField(max_length=253)
    from_backend = models.CharField(max_length=253)
    to_backend = models.CharField(max_length=253)

    steps = models.JSONField(help_text="The receiving backend's share in percent at each step, e.g. [80, 95, 100].")
    hold_s = models.FloatField(help_text="Seconds each step is held under the guard before the next.")
    max_p95_s = models.FloatField(help_text="Guard: the receiving pool's TTFT p95 must stay at or below this.")
    max_error_rate = models.FloatField(help_text="Guard: the receiving pool's error rate (0..1) must stay at or below this.")
    failure_threshold = models.PositiveSmallIntegerField(help_text="Failed checks that roll the shift back.")
    no_data_deadline_s = models.FloatField(help_text="Seconds without guard data before each tick counts as failed.")
    gated_steps = models.JSONField(default=list, blank=True, help_text="Step numbers (from 1) that wait for approval.")

    phase = models.CharField(max_length=20, choices=ShiftPhase.choices, default=ShiftPhase.PENDING)
    resume_phase = models.CharField(max_length=20, choices=ShiftPhase.choices, blank=True)  # while paused
    step = models.PositiveSmallIntegerField(default=0)
    good_step = models.PositiveSmallIntegerField(default=0, help_text="The last step that passed its hold (0: start).")
    rollback_step = models.PositiveSmallIntegerField(
        default=0, help_text="The step whose weights a rollback restores: the last good one, or 0 when a person rolls back.")
    approved_step = models.PositiveSmallIntegerField(default=0, help_text="The highest gated step a person approved.")
    step_since = models.DateTimeField(null=True, blank=True)
    failed_checks = models.PositiveSmallIntegerField(default=0)
    no_data_since = models.DateTimeField(null=True, blank=True)
    start_weights = models.JSONField(help_text="The route's weights when the shift started (backend → weight).")
    planned_weights = models.JSONField(help_text="The route's weights at each step, validated at the start.")
    current_weights = models.JSONField(help_text="The route's weights as last written and read back.")
    last_check = models.JSONField(default=dict, blank=True)  # {outcome, detail, at}
    last_error = models.TextField(blank=True)

    idempotency_key = models.CharField(max_length=100)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_channel = models.CharField(max_length=16, choices=Channel.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Two shifts writing one route's weights would undo each other.
            models.UniqueConstraint(fields=["cluster", "router_kind", "route_namespace", "route_name"],
                                    condition=Q(phase__in=sorted(SHIFT_ACTIVE_PHASES)), name="shift_one_active_per_route"),
            models.UniqueConstraint(fields=["to_pool", "idempotency_key"], name="shift_idempotency_key_per_pool"),
            models.CheckConstraint(condition=~Q(from_pool=models.F("to_pool")), name="shift_between_two_pools"),
        ]

    def __str__(self) -> str:
        return f"shift #{self.pk} {self.route_name}: {self.from_backend} → {self.to_backend} ({self.phase})"

    @property
    def is_active(self) -> bool:
        return self.phase in SHIFT_ACTIVE_PHASES

    @property
    def share_percent(self) -> int:
        """The receiving backend's share now (0 before the first step)."""
        return self.steps[self.step - 1] if self.step else 0


class TrafficEvent(models.Model):
    """What a shift's and a fallback's events share: a transition (or a note), who made it where, and
    whether the teams' channels were told."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    from_phase = models.CharField(max_length=20, blank=True)
    to_phase = models.CharField(max_length=20)
    actor_name = models.CharField(max_length=150)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    comment = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    # The notification outbox's read cursor (incidents/traffic_notify.py): set when fanned out to channels.
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["at", "id"]


class TrafficShiftEvent(TrafficEvent):
    """One transition of a shift, or a note on it (a failed check, a confirmed write)."""

    shift = models.ForeignKey(TrafficShift, on_delete=models.CASCADE, related_name="events")
    step = models.PositiveSmallIntegerField()


class WarmPoolReport(models.Model):
    """A warm-pool report (`scaling/reports.py`): asked for, run by a worker, kept to compare over time."""

    team_lookups = ("pool__team",)  # who owns it (see controlplane.permissions)

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="warm_pool_reports")
    state = models.CharField(max_length=16, choices=ReportState.choices, default=ReportState.PENDING)
    percent_done = models.PositiveSmallIntegerField(default=0)
    days = models.FloatField(help_text="Days of traffic replayed (the last ones of the history or the trace).")
    sizes_pct = models.JSONField(default=list, help_text="Warm-pool sizes asked for, percent of the expected peak.")
    trace_name = models.CharField(max_length=200, blank=True, help_text="Empty: the pool's stored request history.")
    trace_data = models.BinaryField(null=True, blank=True, editable=False)  # an uploaded trace, as sent
    rate_scale = models.FloatField(default=1.0, help_text="Traffic multiplied by this (what-if growth; 1: as recorded).")
    peak_basis = models.CharField(max_length=16, choices=PeakBasis.choices, default=PeakBasis.FORECAST)
    # An incident's what-if replays this window of the stored history (the minutes before it are the
    # warm-up) instead of the last `days`; empty for a pool's ordinary report.
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    requested_channel = models.CharField(max_length=16, choices=Channel.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # A worker holds a running report until this time; past it (the worker died) another may take it.
    lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["pool", "-created_at"])]

    def __str__(self) -> str:
        return f"warm-pool report #{self.pk} for {self.pool} ({self.state})"

    @property
    def source(self) -> str:
        return f"trace {self.trace_name}" if self.trace_name else "stored request history"


def default_fallback_classes() -> list[str]:
    return ["standard"]  # a priority class never falls back unless configured to


class FallbackPolicy(models.Model):
    """A pool's prepared fallback: when its overflow goes to its fallback pool (`Pool.fallback_pool`) and
    how it comes back (design.md §5). Kept on the scaling side, keyed by the primary pool. `state` is the engine's FallbackState between
    ticks (over-since, calm-since, recent demand), persisted so a restarted worker decides the same.
    """

    team_lookups = ("pool__team",)
    cluster_lookup = "pool__cluster"  # a pool in a cluster no longer shared with its team cannot be changed

    pool = models.OneToOneField(Pool, on_delete=models.CASCADE, related_name="fallback_policy", primary_key=True)
    router_kind = models.CharField(max_length=16, choices=RouterKind.choices, default=RouterKind.HTTPROUTE)
    enabled = models.BooleanField(default=True, help_text="Off: the tick decides nothing and moves no traffic.")
    requires_approval = models.BooleanField(default=False, help_text="An automatic entry waits for a person.")
    entry_after_s = models.FloatField(default=15.0, help_text="Latency over the SLO this long before traffic moves.")
    exit_after_s = models.FloatField(default=180.0, help_text="Below the exit threshold this long before the return.")
    exit_latency_ratio = models.FloatField(default=0.8, help_text="Exit threshold as a share of the SLO (hysteresis).")
    max_share = models.FloatField(default=1.0, help_text="Most of the eligible traffic that may fall back (0..1).")
    return_step_hold_s = models.FloatField(default=60.0, help_text="Seconds each step of the return is held.")
    classes = models.JSONField(default=default_fallback_classes,
                               help_text='Request classes that may fall back, e.g. ["standard"]; [] for none.')
    eligible_share = models.FloatField(
        default=1.0, help_text="Share of the route's requests in those classes (the route rule's traffic: 1.0).")
    state = models.JSONField(default=dict, blank=True)
    last_decision = models.JSONField(default=dict, blank=True)  # {phase, share, reasons, at}
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)



class FallbackActivation(RouteWriteIntent):
    """One episode of a pool's traffic on its fallback pool, from entry to full return.

    `share` is of the eligible traffic; `route_percent` the fallback backend's share of the pair's route
    weight as last written and read back. `target_percent` is what the committed phase wants on the
    route: written after the commit, so a worker that died before the write finds it to do.
    """

    team_lookups = ("pool__team",)
    cluster_lookup = "pool__cluster"

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="fallbacks")
    fallback_pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="fallbacks_received")
    router_kind = models.CharField(max_length=16, choices=RouterKind.choices, default=RouterKind.HTTPROUTE)
    route_namespace = models.CharField(max_length=63)
    route_name = models.CharField(max_length=253)
    primary_backend = models.CharField(max_length=253)
    fallback_backend = models.CharField(max_length=253)
    phase = models.CharField(max_length=20, choices=FallbackPhase.choices)
    trigger = models.CharField(max_length=16, help_text="auto (the policy) or manual (a person).")
    forced = models.BooleanField(default=False, help_text="A person's activation: only a person restores it.")
    share = models.FloatField(default=0.0)
    target_percent = models.PositiveSmallIntegerField(default=0)
    route_percent = models.PositiveSmallIntegerField(default=0)
    pair_total = models.PositiveIntegerField(default=100, help_text="The pair's combined route weight at entry.")
    start_weights = models.JSONField(default=dict)
    reasons = models.JSONField(default=list, blank=True)
    last_error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_channel = models.CharField(max_length=16, choices=Channel.choices)
    started_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["pool"], condition=Q(phase__in=sorted(FALLBACK_OPEN_PHASES)),
                                    name="fallback_one_open_per_pool"),
        ]

    def __str__(self) -> str:
        return f"fallback #{self.pk} {self.pool} → {self.fallback_pool} ({self.phase}, {self.route_percent} %)"

    @property
    def is_open(self) -> bool:
        return self.phase in FALLBACK_OPEN_PHASES


class FallbackEvent(TrafficEvent):
    """One transition of a fallback activation, or a note on it (a confirmed write, a refused entry)."""

    activation = models.ForeignKey(FallbackActivation, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20)  # entered, return_started, reactivated, restored, written, ...
    share = models.FloatField()


class CircuitBreaker(models.Model):
    """A breaker at one scope: an endpoint (a pod of a pool), a pool, or the system (design.md §5).

    `forced` holds a person's open or close: the evaluation leaves a forced breaker alone until released.
    """

    team_lookups = ("pool__team",)

    scope = models.CharField(max_length=16, choices=BreakerScope.choices)
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, null=True, blank=True, related_name="breakers")
    endpoint = models.CharField(max_length=253, blank=True, help_text="The pod, for an endpoint breaker.")
    state = models.CharField(max_length=16, choices=BreakerState.choices, default=BreakerState.CLOSED)
    since = models.DateTimeField()
    probe_successes = models.PositiveSmallIntegerField(default=0)
    forced = models.BooleanField(default=False)
    failure_ratio = models.FloatField(help_text="Opens above this share of failed requests.")
    min_requests = models.PositiveIntegerField()
    open_for_s = models.FloatField()
    last_counts = models.JSONField(default=dict, blank=True)  # {requests, failures, at}
    last_reasons = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "pool_id", "endpoint"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "pool", "endpoint"], name="breaker_one_per_scope",
                                    nulls_distinct=False),
        ]

    def __str__(self) -> str:
        where = self.endpoint or (str(self.pool) if self.pool_id else "system")
        return f"{self.scope} breaker {where} ({self.state})"


class BreakerTransition(models.Model):
    breaker = models.ForeignKey(CircuitBreaker, on_delete=models.CASCADE, related_name="transitions")
    at = models.DateTimeField(db_index=True)
    from_state = models.CharField(max_length=16)
    to_state = models.CharField(max_length=16)
    actor_name = models.CharField(max_length=150)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    reason = models.TextField(blank=True)
    # The notification outbox's read cursor (incidents/traffic_notify.py): set when fanned out to channels.
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["at", "id"]
