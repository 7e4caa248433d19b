"""Core inventory: teams and their members, clusters, pools, SLOs, schedules; API tokens; audit log."""
from __future__ import annotations

from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from controlplane import config, netguard
from scaling.engine import constants
from controlplane.choices import (
    Channel,
    PriorityTier,
    Role,
    ScalingTarget,
    SloIndicator,
    Weekday,
)

k8s_name_validators = [
    # RFC 1123 label, as Kubernetes requires for namespaces and most object names.
    models.fields.validators.RegexValidator(
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        "Use lowercase letters, digits and '-', starting and ending with a letter or digit.",
    ),
]


class Team(models.Model):

    team_lookups = ("id",)  # who owns it (see controlplane.permissions)
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's role in a team. Object access follows team membership."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team")]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.team}"


CREDENTIALS_CLAIMED = ("Another cluster already uses these credentials; a credential belongs to one cluster (ask "
                       "whoever mounts the credentials for one of your own).")


class Cluster(models.Model):
    """A Kubernetes cluster. Its team owns it; its admins may share it with other teams' pools."""

    # Who sees it (see controlplane.permissions): the owning team first (its role rules changes), then
    # the teams it is shared with. A pool sitting in it grants nothing: sharing is explicit.
    team_lookups = ("team", "shared_with")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="clusters")
    shared_with = models.ManyToManyField(
        Team, blank=True, related_name="shared_clusters",
        help_text="Other teams whose pools may sit in this cluster. Only the owning team's admins change this.",
    )
    name = models.CharField(max_length=63, unique=True, validators=k8s_name_validators)
    region = models.CharField(max_length=64, blank=True)
    kube_api_url = models.URLField("Kubernetes API URL", max_length=300)
    # The name of a secret holding the credentials, never the credentials themselves.
    credentials_ref = models.CharField(
        max_length=200, blank=True, error_messages={"unique": CREDENTIALS_CLAIMED},
        help_text="Where the credentials are, never the credentials: token:NAME, kubeconfig:NAME (files in the "
                  "mounted credentials directory), in-cluster, or empty.")
    prometheus_url = models.URLField("Prometheus URL", max_length=300, blank=True)
    prometheus_rate_window = models.CharField(
        "Prometheus rate window", max_length=16, default="1m",
        help_text="The window of every rate() Headroom asks this Prometheus for (request rate, latency "
                  "percentiles, errors): about four scrape intervals; 1m for the common 15 s scrape.")
    time_zone = models.CharField(max_length=64, default="UTC")
    off_hours = models.JSONField(
        default=list, blank=True, help_text='Auto-approval windows: [{"weekdays": [5, 6], "start": "00:00", "end": "23:59"}]'
    )
    gpu_prices = models.JSONField(
        default=dict, blank=True, help_text='USD per GPU-hour: {"H100": {"on_demand": 4.0, "spot": 1.9}}'
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            # A credential is one cluster's: another team naming it would act in that cluster with its rights.
            models.UniqueConstraint(
                fields=["credentials_ref"], condition=~models.Q(credentials_ref=""), name="cluster_credentials_claimed_once",
                violation_error_message=CREDENTIALS_CLAIMED),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = {}
        for field, parse in (
            ("time_zone", config.parse_time_zone),
            ("off_hours", config.parse_off_hours),
            ("gpu_prices", config.parse_gpu_prices),
            ("credentials_ref", config.parse_credentials_ref),
            ("prometheus_rate_window", config.parse_rate_window),
        ):
            try:
                parse(getattr(self, field))
            except ValueError as exc:
                errors[field] = str(exc)
        # A courtesy at save time; the guard that counts runs at every connect (host names, DNS rebinding).
        for field in ("kube_api_url", "prometheus_url"):
            url = getattr(self, field)
            reason = netguard.literal_refusal(url, netguard.CLUSTERS) if url else None
            if reason:
                errors[field] = f"Headroom does not connect there: {reason}."
        if errors:
            raise ValidationError(errors)

    @property
    def tz(self) -> ZoneInfo:
        return config.parse_time_zone(self.time_zone)

    @property
    def off_hours_windows(self) -> list[config.OffHoursWindow]:
        return config.parse_off_hours(self.off_hours)

    @property
    def prices(self) -> dict[str, config.GpuPrice]:
        return config.parse_gpu_prices(self.gpu_prices)

    @property
    def rate_window_s(self) -> float:
        """The window the cluster's rates and latency percentiles are read over, in seconds."""
        return config.parse_rate_window(self.prometheus_rate_window)


# A Deployment's pods are named <deployment>-<hash of up to 10>-<5>, cut at 63 characters
# (scaling/drivers/prometheus.py DEPLOYMENT_OF_POD).
MAX_DEPLOYMENT_NAME = 46


class Pool(models.Model):
    """One vLLM deployment serving one model in one cluster."""

    team_lookups = ("team",)  # who owns it (see controlplane.permissions)
    cluster_lookup = "cluster"  # where it acts: its team must own the cluster or have it shared

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="pools")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="pools")
    name = models.CharField(max_length=63, validators=k8s_name_validators)
    namespace = models.CharField(max_length=63, validators=k8s_name_validators)
    deployment = models.CharField(max_length=253, validators=k8s_name_validators)
    model_name = models.CharField("served model name", max_length=200)
    gpu_type = models.CharField("GPU type", max_length=50)
    gpus_per_replica = models.PositiveSmallIntegerField("GPUs per replica", default=1, validators=[MinValueValidator(1)])
    min_replicas = models.PositiveIntegerField(default=1)
    max_replicas = models.PositiveIntegerField(default=10, validators=[MinValueValidator(1)])
    warm_pool_fraction = models.FloatField(
        default=0.4,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of the expected peak of the next 30 minutes (the forecast) held as a floor. The forecast term "
        "already plans for that forecast, so the floor rarely binds; to hold capacity through quiet hours, raise "
        "min replicas (a warm-pool report's day-peak mode shows what that costs).",
    )
    target_queue_per_replica = models.FloatField(
        default=5.0, validators=[MinValueValidator(0.1)], help_text="Waiting requests per ready replica to aim for."
    )
    replica_capacity_rps = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.001)],
        help_text="Requests/s one ready replica serves within the SLO (a load test; corrected online by latency).",
    )
    # What the work share is read against (scaling/engine/signals.py, `work_share`): unset, that part is unknown.
    batch_slots = models.PositiveIntegerField(
        "batch slots", null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Requests one replica runs at once: vLLM's --max-num-seqs. Empty: the value the Deployment's "
                  "command line states, if it does. With the prefill throughput, what the busy share term reads the "
                  "pool's work share against.",
    )
    prefill_tokens_per_s = models.FloatField(
        "prefill throughput (prompt tokens/s)", null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="Prompt tokens one replica prefills per second at full load (a load test).",
    )
    cold_start_p50_s = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0.0)])
    cold_start_p95_s = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0.0)])
    scaling_target = models.CharField(max_length=16, choices=ScalingTarget.choices, default=ScalingTarget.DEPLOYMENT)
    scaled_object = models.CharField("KEDA ScaledObject", max_length=253, blank=True)
    route_name = models.CharField("HTTPRoute", max_length=253, blank=True)
    route_backend = models.CharField("route backend (Service)", max_length=253, blank=True)
    fallback_pool = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="fallback_for"
    )
    priority = models.CharField(max_length=16, choices=PriorityTier.choices, default=PriorityTier.STANDARD)
    approval_policy = models.JSONField(
        default=dict, blank=True,
        help_text='Overrides of {"expiry_minutes": 10, "two_person_min_delta": null, "auto_approve_off_hours": true, '
                  '"auto_approve_reactive": true, "reactive_max_step": 4, "reactive_max_percent": 100}',
    )
    planner_constants = models.JSONField(
        default=dict, blank=True,
        help_text='Overrides of the planner\'s constants for this pool, e.g. {"request_rate_margin": 1.25}; '
                  'names, defaults and bounds in docs/engine.md, "Constants".',
    )

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="pool_unique_name_per_cluster"),
            # Two pools scaling one Deployment would fight (and one team could scale another's to zero).
            models.UniqueConstraint(
                fields=["cluster", "namespace", "deployment"], name="pool_unique_deployment_per_cluster",
                violation_error_message="Another pool already manages this Deployment in this cluster.",
            ),
            models.CheckConstraint(condition=Q(min_replicas__lte=F("max_replicas")), name="pool_min_le_max"),
            models.CheckConstraint(condition=Q(max_replicas__gte=1), name="pool_max_ge_1"),
            models.CheckConstraint(condition=Q(gpus_per_replica__gte=1), name="pool_gpus_ge_1"),
            models.CheckConstraint(
                condition=Q(warm_pool_fraction__gte=0) & Q(warm_pool_fraction__lte=1), name="pool_warm_fraction_0_1"
            ),
            models.CheckConstraint(condition=Q(target_queue_per_replica__gt=0), name="pool_target_queue_gt_0"),
            models.CheckConstraint(condition=Q(replica_capacity_rps__gt=0), name="pool_capacity_gt_0"),
            models.CheckConstraint(
                condition=Q(cold_start_p50_s__isnull=True)
                | Q(cold_start_p95_s__isnull=True)
                | Q(cold_start_p50_s__lte=F("cold_start_p95_s")),
                name="pool_cold_start_p50_le_p95",
            ),
            models.CheckConstraint(condition=~Q(fallback_pool=F("id")), name="pool_fallback_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}" if self.cluster_id else self.name

    def clean(self) -> None:
        errors = {}
        if self.min_replicas is not None and self.max_replicas is not None and self.min_replicas > self.max_replicas:
            errors["min_replicas"] = (
                f"min_replicas ({self.min_replicas}) must not exceed max_replicas ({self.max_replicas})."
            )
        if (
            self.cold_start_p50_s is not None
            and self.cold_start_p95_s is not None
            and self.cold_start_p50_s > self.cold_start_p95_s
        ):
            errors["cold_start_p50_s"] = "The cold-start p50 must not exceed the p95."
        if self.fallback_pool_id is not None:
            if self.pk is not None and self.fallback_pool_id == self.pk:
                errors["fallback_pool"] = "A pool cannot be its own fallback."
            elif self.cluster_id is not None and self.fallback_pool.cluster_id != self.cluster_id:
                errors["fallback_pool"] = "The fallback pool must be in the same cluster."
        if self.pk is not None and self.cluster_id is not None:
            # The same rule seen from the fallback: moving it would leave its primaries falling back across clusters.
            primaries = Pool.objects.filter(fallback_pool=self).exclude(cluster_id=self.cluster_id)
            if primaries.exists():
                names = ", ".join(sorted(str(pool) for pool in primaries[:5]))
                errors["cluster"] = (f"A fallback must stay in its primary's cluster, and these pools fall back to "
                                     f"this one: {names}.")
        try:
            config.parse_approval_policy(self.approval_policy)
        except ValueError as exc:
            errors["approval_policy"] = str(exc)
        try:
            overrides = constants.parse_overrides(self.planner_constants)
        except ValueError as exc:
            errors["planner_constants"] = str(exc)
        else:
            # The busy share term reads the work share, known only against one of these: without any, the
            # setting would silently do nothing.
            if overrides.get("busy_share_target", 0) > 0 and not (
                    self.batch_slots_in_use or self.prefill_tokens_per_s):
                errors["planner_constants"] = (
                    "busy_share_target needs the pool's batch slots or prefill throughput (or a Deployment whose "
                    "command line states --max-num-seqs, which the last read did not find): the busy share term "
                    "reads the work share against them")
        if len(self.deployment) > MAX_DEPLOYMENT_NAME:
            errors["deployment"] = (
                f"At most {MAX_DEPLOYMENT_NAME} characters: Kubernetes cuts the names of a longer Deployment's pods, "
                "and Headroom finds a pool's metrics by the Deployment name in its pods' names.")
        elif self._deployment_claimed():
            errors["deployment"] = (
                f"Another pool already manages Deployment {self.namespace}/{self.deployment} in this cluster; "
                "two pools must not scale the same Deployment."
            )
        if self.scaling_target == ScalingTarget.KEDA and not self.scaled_object:
            errors["scaled_object"] = "Name the KEDA ScaledObject when the pool is scaled through KEDA."
        elif self.scaling_target == ScalingTarget.KEDA and self._scaled_object_claimed():
            errors["scaled_object"] = (
                f"Another pool already scales through ScaledObject {self.namespace}/{self.scaled_object} in this "
                "cluster; a ScaledObject scales one Deployment, so two pools must not name it.")
        if self.scaling_target == ScalingTarget.HPA and self.min_replicas is not None and self.min_replicas < 1:
            errors["min_replicas"] = ("At least 1 when the pool is scaled through its HorizontalPodAutoscaler: "
                                      "an HPA's minReplicas cannot be 0.")
        if errors:
            raise ValidationError(errors)

    def _deployment_claimed(self) -> bool:
        # Checked here (not only by the constraint) so the error names the field to fix.
        if self.cluster_id is None or not self.namespace or not self.deployment:
            return False
        claims = Pool.objects.filter(cluster_id=self.cluster_id, namespace=self.namespace, deployment=self.deployment)
        return claims.exclude(pk=self.pk).exists() if self.pk else claims.exists()

    def _scaled_object_claimed(self) -> bool:
        if self.cluster_id is None or not self.namespace:
            return False
        claims = Pool.objects.filter(cluster_id=self.cluster_id, namespace=self.namespace,
                                     scaling_target=ScalingTarget.KEDA, scaled_object=self.scaled_object)
        return claims.exclude(pk=self.pk).exists() if self.pk else claims.exists()

    @property
    def approval(self) -> config.ApprovalPolicy:
        return config.parse_approval_policy(self.approval_policy)

    @property
    def batch_slots_in_use(self) -> int | None:
        """The batch slots the work share is read against: the pool's own, else the --max-num-seqs its
        Deployment's command line stated at the last read (None: neither, or no read yet)."""
        status = getattr(self, "status", None)  # scaling.PoolStatus: absent until the loop first reads the cluster
        return self.batch_slots or (status.batch_slots if status is not None else None)

    @property
    def planner_overrides(self) -> dict[str, float]:
        """The validated `planner_constants` (scaling/engine/constants.py)."""
        return constants.parse_overrides(self.planner_constants)


class SLO(models.Model):
    """A service-level objective: `objective` of requests must meet `threshold` over `window_days`."""

    team_lookups = ("pool__team",)  # who owns it (see controlplane.permissions)
    cluster_lookup = "pool__cluster"

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="slos")
    indicator = models.CharField(max_length=32, choices=SloIndicator.choices)
    threshold = models.FloatField(
        validators=[MinValueValidator(0.0)], help_text="Milliseconds for latency indicators, a fraction for error rate."
    )
    objective = models.FloatField(
        default=0.99,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of requests (or time) that must meet the threshold, e.g. 0.99.",
    )
    window_days = models.PositiveSmallIntegerField(default=28, validators=[MinValueValidator(1), MaxValueValidator(90)])

    class Meta:
        verbose_name = "SLO"
        ordering = ["pool_id", "indicator"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "indicator"], name="slo_unique_indicator_per_pool"),
            models.CheckConstraint(condition=Q(threshold__gt=0), name="slo_threshold_gt_0"),
            models.CheckConstraint(condition=Q(objective__gt=0) & Q(objective__lt=1), name="slo_objective_0_1"),
            models.CheckConstraint(condition=Q(window_days__gte=1) & Q(window_days__lte=90), name="slo_window_1_90"),
        ]

    def __str__(self) -> str:
        unit = " ms" if SloIndicator.is_latency(self.indicator) else ""
        return f"{self.pool}: {self.indicator} ≤ {self.threshold:g}{unit} for {self.objective:.2%}"

    @property
    def short(self) -> str:
        """A compact form for tables: 'TTFT p95 ≤ 1000 ms', 'errors ≤ 1 %'."""
        names = {"e2e_p95": "e2e p95", "e2e_p99": "e2e p99", "ttft_p95": "TTFT p95", "queue_time_p95": "queue p95"}
        if self.indicator == SloIndicator.ERROR_RATE:
            return f"errors ≤ {self.threshold * 100:g} %"
        return f"{names.get(self.indicator, self.indicator)} ≤ {self.threshold:g} ms"

    def clean(self) -> None:
        errors = {}
        if self.threshold is not None and self.threshold <= 0:
            errors["threshold"] = "The threshold must be greater than 0."
        if self.indicator == SloIndicator.ERROR_RATE and self.threshold is not None and self.threshold >= 1:
            errors["threshold"] = "An error-rate threshold is a fraction below 1 (e.g. 0.01 for 1 %)."
        if self.objective is not None and not 0 < self.objective < 1:
            errors["objective"] = "The objective is a fraction strictly between 0 and 1 (e.g. 0.99)."
        if errors:
            raise ValidationError(errors)


class ScheduleWindow(models.Model):
    """A recurring known peak: pre-scale by `prescale_factor` before it starts."""

    team_lookups = ("pool__team",)  # who owns it (see controlplane.permissions)
    cluster_lookup = "pool__cluster"

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="schedules")
    name = models.CharField(max_length=100)
    weekday = models.PositiveSmallIntegerField(choices=Weekday.choices)
    start = models.TimeField()
    end = models.TimeField(help_text="May be earlier than start: the window then runs past midnight.")
    time_zone = models.CharField(max_length=64, default="UTC")
    prescale_factor = models.FloatField(
        default=1.4, validators=[MinValueValidator(1.0), MaxValueValidator(20.0)], help_text="1.4 means +40 %."
    )
    lead_minutes = models.PositiveSmallIntegerField(
        default=10, validators=[MaxValueValidator(240)], help_text="How long before the start to pre-scale."
    )

    class Meta:
        ordering = ["pool_id", "weekday", "start"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "name"], name="schedule_unique_name_per_pool"),
            models.CheckConstraint(condition=Q(weekday__gte=0) & Q(weekday__lte=6), name="schedule_weekday_0_6"),
            models.CheckConstraint(condition=~Q(start=F("end")), name="schedule_start_ne_end"),
            models.CheckConstraint(
                condition=Q(prescale_factor__gte=1) & Q(prescale_factor__lte=20), name="schedule_factor_1_20"
            ),
        ]

    def __str__(self) -> str:
        day = Weekday(self.weekday).label if self.weekday is not None else "?"
        return f"{self.pool}: {self.name} ({day} {self.start:%H:%M}-{self.end:%H:%M} {self.time_zone})"

    def clean(self) -> None:
        errors = {}
        try:
            config.parse_time_zone(self.time_zone)
        except ValueError as exc:
            errors["time_zone"] = str(exc)
        if self.start is not None and self.start == self.end:
            errors["end"] = "The end must differ from the start."
        if errors:
            raise ValidationError(errors)


class ApiToken(models.Model):
    """An API token. Only its SHA-256 digest and a short non-secret prefix are stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):  # noqa: ANN003
        raise PermissionError("The audit log is append-only.")

    def delete(self):
        raise PermissionError("The audit log is append-only.")


class AuditEvent(models.Model):
    """Append-only record of every action: who, through which channel, on what, before and after."""

    team_lookups = ("team",)  # who owns it (see controlplane.permissions)

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    # No database constraint and no cascade: deleting a user or a team never touches their rows here
    # (the log is append-only, in PostgreSQL too); the id stays, and the names say who and what it was.
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.DO_NOTHING, db_constraint=False,
                              null=True, blank=True, related_name="+")
    actor_name = models.CharField(max_length=150, help_text="Kept when the user is deleted.")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    action = models.CharField(max_length=32)
    object_type = models.CharField(max_length=64, db_index=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=300, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    team = models.ForeignKey(Team, on_delete=models.DO_NOTHING, db_constraint=False, null=True, blank=True,
                             related_name="+")

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        # One object's events in order: the audit page folds a decision's steps into one row by these.
        indexes = [models.Index(fields=["object_type", "object_id", "at"], name="auditevent_object_at")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.object_type} {self.object_repr}"

    def save(self, *args, **kwargs):  # noqa: ANN002, ANN003
        if self.pk is not None:
            raise PermissionError("The audit log is append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):  # noqa: ANN002, ANN003
        raise PermissionError("The audit log is append-only.")
