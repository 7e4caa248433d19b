"""The Celery application and the one beat schedule (design.md §6).

Every entry has an expiry shorter than its period, so a backlog after an outage runs the next tick
instead of a pile of stale ones.
"""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("headroom")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    # Executions whose worker died are resumed, applied ones followed to Ready: a lost worker costs one tick.
    "advance-executions": {"task": "scaling.tasks.advance_executions", "schedule": 15.0, "options": {"expires": 14}},
    # Proposals nobody decided on expire; a minute of resolution is enough for a 10-minute expiry.
    "expire-proposals": {"task": "scaling.tasks.expire_proposals", "schedule": 60.0, "options": {"expires": 55}},
}
