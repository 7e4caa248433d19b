"""Errors stored before redaction may quote a webhook's secret path or query: cut them to scheme and host.

The audit log is append-only (a trigger refuses updates), so the disable reasons it already holds stay.
"""
from django.db import migrations


def redact_stored_errors(apps, schema_editor):  # noqa: ANN001, ANN201
    from incidents.outbound import redact

    Channel = apps.get_model("incidents", "Channel")
    Notification = apps.get_model("incidents", "Notification")
    for channel in Channel.objects.all():
        urls = [str(channel.settings.get(key) or "") for key in ("url", "webhook_url")] if isinstance(channel.settings, dict) else []
        Channel.objects.filter(pk=channel.pk).update(last_error=redact(channel.last_error, *urls),
                                                     disabled_reason=redact(channel.disabled_reason, *urls))
        for notification in Notification.objects.filter(channel=channel).exclude(last_error=""):
            error = redact(notification.last_error, *urls, notification.response_url)
            if error != notification.last_error:
                Notification.objects.filter(pk=notification.pk).update(last_error=error)


class Migration(migrations.Migration):
    dependencies = [("incidents", "0001_initial")]
    operations = [migrations.RunPython(redact_stored_errors, migrations.RunPython.noop)]
