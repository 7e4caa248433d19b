"""Notifications in a real Celery worker: the outbox sweep catches up on a lost message, and a Slack click's
follow-up (the execution and the message edit) runs in the worker, not in the request that took the click."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from celery import Celery
from django.contrib.auth.models import User

from controlplane.celery import app
from controlplane.models import Pool
from incidents.choices import NotificationKind, NotificationState
from incidents.models import Channel, Notification
from sandbox.replica import wait_until
from scaling.choices import ProposalState
from scaling.models import Proposal

from tests.core.conftest import cluster, pool  # noqa: F401
from tests.incidents.conftest import (  # noqa: F401
    SIGNING_SECRET,
    Receiver,
    allow_loopback,
    click_payload,
    integrations_on,
    link,
    propose,
    receiver,
    signed_post,
    slack_channel,
)

pytestmark = pytest.mark.celery_worker
HOOK = "/services/T1/B1/hook"
RESPONSE = "/actions/T1/1/response"
WORKER_ENV = {"SLACK_ENABLED": "true", "SLACK_SIGNING_SECRET": SIGNING_SECRET, "WEBHOOKS_ENABLED": "true",
              "OUTBOUND_ALLOWED_NETWORKS": "127.0.0.1/32", "OUTBOUND_TIMEOUT_S": "3",
              "SITE_URL": "https://headroom.example", "KUBERNETES_ENABLED": "false"}


@pytest.fixture
def tasks_through_redis(redis_url: str) -> Iterator[None]:
    """This process sends its tasks to the run's Redis, as in production, instead of running them in-process:
    shared tasks bind to the current app, so an app on that broker is current until the test ends."""
    Celery("headroom-tests", broker=redis_url, set_as_current=False).set_current()
    yield
    app.set_current()


def test_the_outbox_sweep_in_a_worker_sends_what_a_lost_message_left_behind(
    broker: Celery, start_worker, redis_url: str, tasks_through_redis: None,  # noqa: ANN001
    pool: Pool, alice: User, slack_channel: Channel, receiver: Receiver,
) -> None:
    proposal = propose(pool, alice)  # its commit queues dispatch_events on Redis
    queued = redis.Redis.from_url(redis_url)
    assert queued.llen("celery") == 1
    queued.delete("celery")  # the message is lost (a broker restart without persistence)
    assert not Notification.objects.exists()

    start_worker(**WORKER_ENV)
    broker.send_task("incidents.tasks.sweep_outbox")

    assert wait_until(lambda: Notification.objects.filter(state=NotificationState.DELIVERED).exists(), 30), \
        list(Notification.objects.values_list("state", "last_error"))
    [post] = receiver.at(HOOK)
    assert str(proposal.pk) in post.body.decode()
    assert Notification.objects.get().kind == NotificationKind.POST


def test_a_slack_click_is_answered_at_once_and_its_message_edited_by_the_worker(
    client, broker: Celery, start_worker, tasks_through_redis: None,  # noqa: ANN001
    pool: Pool, alice: User, bob: User, slack_channel: Channel, receiver: Receiver,
) -> None:
    start_worker(**WORKER_ENV)
    link(bob, "UBOB")
    proposal = propose(pool, alice)
    assert wait_until(lambda: len(receiver.at(HOOK)) == 1, 30), "the worker did not post the proposal"

    response = signed_post(client, click_payload(proposal, slack_channel, "UBOB", receiver.url(RESPONSE)))

    assert response.status_code == 200
    assert proposal.events.filter(to_state=ProposalState.APPROVED).count() == 1  # decided in the request
    # Kubernetes is off in the worker, so the execution it runs fails; the edit it sends says so, with no buttons.
    assert wait_until(lambda: any(edit.json()["text"].endswith("(Failed)") for edit in receiver.at(RESPONSE)), 30), \
        [edit.json()["text"] for edit in receiver.at(RESPONSE)]
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.FAILED
    assert all(edit.json()["replace_original"] for edit in receiver.at(RESPONSE))
    assert not any(block["type"] == "actions" for block in receiver.at(RESPONSE)[-1].json()["blocks"])
    assert len(receiver.at(HOOK)) == 1  # edited in place, never posted twice
