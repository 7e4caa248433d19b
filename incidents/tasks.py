"""Celery tasks for notifications and alerts: thin, take ids, call services."""
from __future__ import annotations

from celery import shared_task

from incidents import alerts, services, traffic_notify


@shared_task(ignore_result=True, acks_late=True)
def deliver_notification(notification_id: int) -> None:
    services.deliver(notification_id)


@shared_task(ignore_result=True)
def dispatch_events() -> None:
    """Fan new proposal events out to channels and send what that created."""
    for notification_id in services.fan_out():
        deliver_notification.delay(notification_id)


@shared_task(ignore_result=True)
def dispatch_traffic_events() -> None:
    """Fan new fallback, breaker and shift events out to channels and send what that created."""
    for notification_id in traffic_notify.fan_out():
        deliver_notification.delay(notification_id)


@shared_task(ignore_result=True)
def sweep_outbox() -> None:
    """The outbox's safety net: events nobody fanned out, and retries whose backoff has passed; then the
    markers of events past the outbox's horizon go."""
    services.fan_out()
    traffic_notify.fan_out()  # delivered by the retry half below: each new one is due now
    for notification_id in services.due_notifications():
        deliver_notification.delay(notification_id)
    services.prune_dispatched()


@shared_task(ignore_result=True)
def remind_proposals() -> None:
    for notification_id in services.remind_due():
        deliver_notification.delay(notification_id)


@shared_task(ignore_result=True)
def evaluate_alerts() -> None:
    """Every pool's alert rules from the loop's last tick, and the loop's own heartbeat per cluster.

    The heartbeat runs even when the pools' evaluation fails: it is what reports a broken loop."""
    try:
        alerts.evaluate_alerts()
    finally:
        alerts.evaluate_heartbeats()
