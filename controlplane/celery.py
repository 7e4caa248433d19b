"""The Celery application. The beat schedule and tasks arrive with the control loop (design.md §6)."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("headroom")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
