"""Chaos: a Celery worker is SIGKILLed while it posts a notification (the receiver has the request and has not
answered yet). Nothing is lost: the notification stays pending, held for one send, and the next sweep posts it
again with the same delivery id, so a receiver that keys on it sees the message once."""
from __future__ import annotations

import os
import signal
from datetime import timedelta

import pytest
from celery import Celery
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.models import Pool
from incidents import services
from incidents.choices import ChannelKind, NotificationState
from incidents.models import Channel, Notification
from sandbox.replica import wait_until

from tests.incidents.conftest import Receiver, propose
from tests.integration.test_incidents_worker import WORKER_ENV, tasks_through_redis  # noqa: F401

pytestmark = pytest.mark.celery_worker


def test_a_worker_killed_while_posting_leaves_the_notification_to_the_next_sweep(
    broker: Celery, start_worker, tasks_through_redis: None,  # noqa: ANN001, F811
    pool: Pool, alice: User, receiver: Receiver, allow_loopback: None,
) -> None:
    Channel.objects.create(team=pool.team, name="pager", kind=ChannelKind.WEBHOOK,
                           settings={"url": receiver.url("/pager"), "secret": "chaos-test-secret-0123456789"})
    receiver.delay_s = 20.0  # the receiver holds its answer: the worker dies waiting for it
    worker = start_worker(**WORKER_ENV | {"OUTBOUND_TIMEOUT_S": "30"})
    proposal = propose(pool, alice)  # its commit queues the dispatch on Redis; the worker posts it
    assert wait_until(lambda: len(receiver.at("/pager")) == 1, 30), list(Notification.objects.values_list("state", "last_error"))
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(10)

    held = Notification.objects.get()
    assert held.state == NotificationState.PENDING and held.attempts == 1  # not lost, not marked delivered
    killed_at = timezone.now()
    assert services.due_notifications(killed_at) == []  # held for one send: no second post while it may land
    receiver.delay_s = 0.0
    assert held.next_attempt_at >= killed_at + timedelta(seconds=25)  # the worker's send timeout, and a margin
    later = held.next_attempt_at + timedelta(seconds=1)
    for pk in services.due_notifications(later):  # what the next sweep after the hold does
        services.deliver(pk, later)
    delivered = Notification.objects.get()
    assert delivered.state == NotificationState.DELIVERED and delivered.attempts == 2
    first, second = receiver.at("/pager")
    assert first.json()["delivery"] == second.json()["delivery"] == delivered.pk
    assert str(proposal.pk) in second.body.decode()
