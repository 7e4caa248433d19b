"""Django admin: configuration goes through the same audited services as the UI and API."""
from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db import models

from controlplane import services
from controlplane.forms import AdminLoginForm
from controlplane.choices import Channel
from controlplane.models import SLO, ApiToken, AuditEvent, Cluster, Membership, Pool, ScheduleWindow, Team

admin.site.login_form = AdminLoginForm  # failed logins are throttled here too


# A URL typed without a scheme is read as https: Django 6's default, chosen now.
URL_FORMFIELDS = {models.URLField: {"assume_scheme": "https"}}


class AuditedAdmin(admin.ModelAdmin):
    formfield_overrides = URL_FORMFIELDS

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001
        before = services.snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        # The form's many-to-many (a cluster's sharing) is saved before the record, so the audit shows it.
        services.save_with_audit(services.Actor.from_request(request, Channel.WEB), obj, before=before,
                                 save_related=form.save_m2m)

    def delete_model(self, request, obj) -> None:  # noqa: ANN001
        services.delete_with_audit(services.Actor.from_request(request, Channel.WEB), obj)

    def delete_queryset(self, request, queryset) -> None:  # noqa: ANN001
        for obj in queryset:
            self.delete_model(request, obj)

    def save_formset(self, request, form, formset, change) -> None:  # noqa: ANN001
        """Inline rows (a team's memberships: role grants; a pool's SLOs) are audited one by one."""
        actor = services.Actor.from_request(request, Channel.WEB)
        formset.save(commit=False)  # fills new_objects, changed_objects and deleted_objects
        for obj in formset.deleted_objects:
            services.delete_with_audit(actor, obj)
        for obj in formset.new_objects:
            services.save_with_audit(actor, obj)
        for obj, _fields in formset.changed_objects:
            services.save_with_audit(actor, obj, before=services.snapshot(type(obj).objects.get(pk=obj.pk)))
        formset.save_m2m()


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


@admin.register(Team)
class TeamAdmin(AuditedAdmin):
    list_display = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Cluster)
class ClusterAdmin(AuditedAdmin):
    list_display = ["name", "region", "team", "kube_api_url", "time_zone"]
    list_filter = ["team", "region"]
    filter_horizontal = ["shared_with"]


class SLOInline(admin.TabularInline):
    model = SLO
    extra = 0


@admin.register(Pool)
class PoolAdmin(AuditedAdmin):
    list_display = ["name", "cluster", "team", "model_name", "gpu_type", "min_replicas", "max_replicas"]
    list_filter = ["cluster", "team", "priority"]
    inlines = [SLOInline]


@admin.register(ScheduleWindow)
class ScheduleWindowAdmin(AuditedAdmin):
    list_display = ["name", "pool", "weekday", "start", "end", "time_zone", "prescale_factor"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "name", "created_at", "expires_at", "last_used_at", "revoked_at"]
    readonly_fields = ["user", "prefix", "digest", "created_at", "last_used_at"]

    def has_add_permission(self, request) -> bool:  # noqa: ANN001
        return False  # tokens are issued by `manage.py issue_token` or the API, which show them once


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["at", "actor_name", "channel", "action", "object_type", "object_repr"]
    list_filter = ["channel", "action", "object_type"]

    def has_add_permission(self, request) -> bool:  # noqa: ANN001
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False


admin.site.unregister(get_user_model())


@admin.register(get_user_model())
class AuditedUserAdmin(AuditedAdmin, UserAdmin):
    """Users: creating, editing (staff and superuser flags), deleting and setting a password are audited.

    The password hash is never recorded; deleting a user leaves their audit rows as they were."""

    def user_change_password(self, request, id, form_url=""):  # noqa: A002, ANN001, ANN201
        response = super().user_change_password(request, id, form_url)
        if request.method == "POST" and response.status_code == 302:  # the form was valid and saved
            user = self.get_object(request, id)
            services.record(services.Actor.from_request(request, Channel.WEB), "set_password", user,
                            after={"username": user.get_username()})
        return response
