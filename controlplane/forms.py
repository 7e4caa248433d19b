"""Web forms for the inventory. Validation is the models' own (full_clean runs clean and constraints)."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.db import models
from django.forms.fields import InvalidJSONInput

from controlplane import jsonlimits, login_throttle, permissions, services
from controlplane.choices import Role
from controlplane.models import SLO, Cluster, Pool, ScheduleWindow, Team


class LimitedJSONField(forms.JSONField):
    """Django's JSON field within `jsonlimits`: too deep or a NUL character is a form error, not a 500."""

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except RecursionError:
            converted = None
            reason: str | None = f"nests deeper than {jsonlimits.MAX_JSON_DEPTH} levels"
        else:
            reason = jsonlimits.problem(converted)
        if reason:
            raise forms.ValidationError(f"Not accepted: the JSON {reason}.", code="invalid")
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:  # shown back as typed, with the error above
            return InvalidJSONInput(data)


def _formfield(field: models.Field, **kwargs) -> forms.Field | None:  # noqa: ANN003
    if isinstance(field, models.URLField):
        kwargs.setdefault("assume_scheme", "https")  # Django 6's default, chosen now
    if isinstance(field, models.JSONField):
        kwargs.setdefault("form_class", LimitedJSONField)
    return field.formfield(**kwargs)


class ScopedModelForm(forms.ModelForm):
    """Offers only related objects the user can see, and teams where they are admins."""

    class Meta:
        formfield_callback = _formfield

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
            elif permissions.team_lookups(queryset.model):
                field.queryset = permissions.scoped(queryset, user)


class ClusterForm(ScopedModelForm):
    class Meta(ScopedModelForm.Meta):
        model = Cluster
        fields = [
            "name", "team", "shared_with", "region", "kube_api_url", "credentials_ref", "prometheus_url",
            "prometheus_rate_window",
            "time_zone", "off_hours", "gpu_prices",
        ]
        widgets = {"shared_with": forms.CheckboxSelectMultiple}

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        # Any team may be shared with, not only the editor's own; saving needs the owning team's admin.
        self.fields["shared_with"].queryset = Team.objects.all()

    def clean_credentials_ref(self) -> str:
        value = self.cleaned_data.get("credentials_ref") or ""
        if refusal := services.credentials_refusal(self.user, self.instance, value):
            raise forms.ValidationError(refusal)
        return value


class PoolForm(ScopedModelForm):
    class Meta(ScopedModelForm.Meta):
        model = Pool
        fields = [
            "cluster", "name", "team", "namespace", "deployment", "model_name", "gpu_type",
            "gpus_per_replica", "min_replicas", "max_replicas", "warm_pool_fraction",
            "target_queue_per_replica", "replica_capacity_rps", "batch_slots", "prefill_tokens_per_s", "scaling_target", "scaled_object", "route_name", "route_backend",
            "fallback_pool", "priority", "approval_policy", "planner_constants",
        ]

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        # Only clusters the user's admin teams own or have been shared: where a pool may be placed.
        self.fields["cluster"].queryset = services.usable_clusters(self.user, Role.ADMIN)


class SLOForm(ScopedModelForm):
    class Meta(ScopedModelForm.Meta):
        model = SLO
        fields = ["pool", "indicator", "threshold", "objective", "window_days"]


class ScheduleWindowForm(ScopedModelForm):
    class Meta(ScopedModelForm.Meta):
        model = ScheduleWindow
        fields = ["pool", "name", "weekday", "start", "end", "time_zone", "prescale_factor", "lead_minutes"]
        widgets = {"start": forms.TimeInput(attrs={"type": "time"}), "end": forms.TimeInput(attrs={"type": "time"})}


class ThrottledLoginMixin:
    """Refuses a login while its user name or address is throttled, and counts failed ones."""

    throttled_message = ""

    def clean(self) -> dict:
        username = self.cleaned_data.get("username") or ""
        address = login_throttle.client_address(self.request)
        throttled = login_throttle.check(username, address)
        if throttled is not None:
            self.throttled_message = throttled.message
            raise forms.ValidationError(throttled.message, code="throttled")
        try:
            cleaned = super().clean()
        except forms.ValidationError as exc:
            if exc.code == "invalid_login":
                login_throttle.record_failure(username, address)
            raise
        login_throttle.record_success(username)
        return cleaned


class LoginForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class AdminLoginForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass
