"""Web forms for the inventory. Validation is the models' own (full_clean runs clean and constraints)."""
from __future__ import annotations

from django import forms

from controlplane import permissions, services
from controlplane.choices import Role
from controlplane.models import SLO, Cluster, Pool, ScheduleWindow, Team


class ScopedModelForm(forms.ModelForm):
    """Offers only related objects the user can see, and teams where they are admins."""

    def __init__(self, *args, user, **kwargs) -> None:  # noqa: ANN002, ANN003, ANN001
        super().__init__(*args, **kwargs)
        self.user = user
        for field in self.fields.values():
            queryset = getattr(field, "queryset", None)
            if queryset is None:
                continue
            if queryset.model is Team:
                admin_teams = services.visible_team_ids(user, min_role=Role.ADMIN)
                field.queryset = queryset if admin_teams is None else queryset.filter(id__in=admin_teams)
            elif queryset.model in permissions.TEAM_LOOKUPS:
                field.queryset = permissions.scoped(queryset, user)


class ClusterForm(ScopedModelForm):
    class Meta:
        model = Cluster
        fields = [
            "name", "team", "region", "kube_api_url", "credentials_ref", "prometheus_url",
            "time_zone", "off_hours", "gpu_prices",
        ]


class PoolForm(ScopedModelForm):
    class Meta:
        model = Pool
        fields = [
            "cluster", "name", "team", "namespace", "deployment", "model_name", "gpu_type",
            "gpus_per_replica", "min_replicas", "max_replicas", "warm_pool_fraction",
            "target_queue_per_replica", "scaling_target", "scaled_object", "route_name", "route_backend",
            "fallback_pool", "priority",
        ]


class SLOForm(ScopedModelForm):
    class Meta:
        model = SLO
        fields = ["pool", "indicator", "threshold", "objective", "window_days"]


class ScheduleWindowForm(ScopedModelForm):
    class Meta:
        model = ScheduleWindow
        fields = ["pool", "name", "weekday", "start", "end", "time_zone", "prescale_factor", "lead_minutes"]
        widgets = {"start": forms.TimeInput(attrs={"type": "time"}), "end": forms.TimeInput(attrs={"type": "time"})}
