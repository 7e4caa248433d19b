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
    # Read signals, plan and propose for every pool. 15 s matches the scrape interval: reading
    # faster sees the same samples, slower lets a surge grow a queue for longer before we react.
    "tick": {"task": "scaling.tasks.tick", "schedule": 15.0, "options": {"expires": 14}},
    # Executions whose worker died are resumed, applied ones followed to Ready: a lost worker costs one tick.
    "advance-executions": {"task": "scaling.tasks.advance_executions", "schedule": 15.0, "options": {"expires": 14}},
    # One step of each active traffic shift. 15 s: one scrape, so each guard check sees fresh signals,
    # and a failing step rolls back within failure_threshold × 15 s.
    "advance-shifts": {"task": "scaling.tasks.advance_shifts", "schedule": 15.0, "options": {"expires": 14}},
    # One fallback decision per pool with a policy, on the signals the loop stored at its last tick.
    "advance-fallbacks": {"task": "scaling.tasks.advance_fallbacks", "schedule": 15.0, "options": {"expires": 14}},
    # Circuit breakers from each pod's answers over Prometheus (a 1-min window; probes over the last 15 s).
    "evaluate-breakers": {"task": "scaling.tasks.evaluate_breakers", "schedule": 15.0, "options": {"expires": 14}},
    # Proposals nobody decided on expire; a minute of resolution is enough for a 10-minute expiry.
    "expire-proposals": {"task": "scaling.tasks.expire_proposals", "schedule": 60.0, "options": {"expires": 55}},
    # The notification outbox's safety net: events missed after commit, and retries whose backoff has passed.
    # New events go out at once (on commit); this bounds the delay after a worker or broker outage to 15 s.
    "sweep-notification-outbox": {"task": "incidents.tasks.sweep_outbox", "schedule": 15.0, "options": {"expires": 14}},
    # Alert rules from the loop's last tick, and the heartbeat that notices the loop itself stopped. It runs
    # apart from the tick on purpose: a dead tick cannot report its own death. 15 s: one scrape, one tick.
    "evaluate-alerts": {"task": "incidents.tasks.evaluate_alerts", "schedule": 15.0, "options": {"expires": 14}},
    # Warm-pool reports whose worker died (running past their 30-min lease) or whose task was lost (pending
    # 10 min) go to a worker again. A minute is plenty against a 30-minute lease; handing one out twice is harmless.
    "retake-stalled-reports": {"task": "scaling.tasks.retake_stalled_reports", "schedule": 60.0,
                               "options": {"expires": 55}},
    # One reminder per pending proposal a few minutes before expiry; minute resolution is plenty.
    "remind-pending-proposals": {"task": "incidents.tasks.remind_proposals", "schedule": 60.0, "options": {"expires": 55}},
}
