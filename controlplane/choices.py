"""Choices for the core models: roles, channels, SLO indicators, pool tiers."""
from django.db import models


class Role(models.TextChoices):
    """A member's role in a team. Each role includes the rights of the ones before it."""

    VIEWER = "viewer", "Viewer"  # read everything of the team
    OPERATOR = "operator", "Operator"  # on call: approve, reject, execute
    ADMIN = "admin", "Admin"  # configure clusters, pools, SLOs, schedules

    @classmethod
    def rank(cls, role: str | None) -> int:
        order = [cls.VIEWER, cls.OPERATOR, cls.ADMIN]
        return order.index(role) + 1 if role in order else 0


class Channel(models.TextChoices):
    """Where an action came from, as recorded in the audit log."""

    WEB = "web", "Web UI"
    API = "api", "REST API"
    SLACK = "slack", "Slack"
    AUTO = "auto", "Automatic (policy)"
    CLI = "cli", "Command line"


class AuditAction(models.TextChoices):
    CREATE = "create", "Created"
    UPDATE = "update", "Updated"
    DELETE = "delete", "Deleted"
    ISSUE_TOKEN = "issue_token", "Issued API token"
    REVOKE_TOKEN = "revoke_token", "Revoked API token"


class SloIndicator(models.TextChoices):
    E2E_P95 = "e2e_p95", "End-to-end latency p95 (ms)"
    E2E_P99 = "e2e_p99", "End-to-end latency p99 (ms)"
    TTFT_P95 = "ttft_p95", "Time to first token p95 (ms)"
    QUEUE_TIME_P95 = "queue_time_p95", "Queue time p95 (ms)"
    ERROR_RATE = "error_rate", "Error rate (fraction of requests)"

    @classmethod
    def is_latency(cls, value: str) -> bool:
        return value != cls.ERROR_RATE


class PriorityTier(models.TextChoices):
    CRITICAL = "critical", "Critical (user-facing)"
    STANDARD = "standard", "Standard"
    BATCH = "batch", "Batch (may be shed first)"


class ScalingTarget(models.TextChoices):
    """What Headroom writes to change a pool's replicas."""

    DEPLOYMENT = "deployment", "Deployment /scale subresource"
    KEDA = "keda", "KEDA ScaledObject minReplicaCount"
    HPA = "hpa", "HorizontalPodAutoscaler minReplicas"


class Weekday(models.IntegerChoices):
    MONDAY = 0, "Monday"
    TUESDAY = 1, "Tuesday"
    WEDNESDAY = 2, "Wednesday"
    THURSDAY = 3, "Thursday"
    FRIDAY = 4, "Friday"
    SATURDAY = 5, "Saturday"
    SUNDAY = 6, "Sunday"
