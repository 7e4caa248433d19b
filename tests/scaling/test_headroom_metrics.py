"""Headroom's own /metrics: who may read it, and that it tells the loop's timing, its decisions by reason,
proposals by state and notification failures (issue 18, "Running Headroom itself")."""
from __future__ import annotations

import json
import logging
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.utils import timezone

from controlplane import logs, metrics
from controlplane.choices import Channel
from controlplane import services as core
from controlplane.middleware import RequestIdMiddleware
from controlplane.models import Pool
from sandbox.kube.cluster import SandboxCluster
from scaling import loop, services
from scaling.choices import ProposalKind
from scaling.models import SignalSample

TOKEN = "metrics-token-for-tests-0123"  # noqa: S105


def _value(text: str, sample: str) -> float | None:
    """The value of one exposition line, e.g. 'headroom_proposals{state="pending"}'."""
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def _scrape(client: Client | None = None, **headers: str) -> str:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return response.content.decode()


@pytest.fixture
def staff(db) -> Client:  # noqa: ANN001
    client = Client()
    client.force_login(User.objects.create_user("ops", password="pw-ops-long", is_staff=True))
    return client


def test_only_staff_and_the_metrics_token_may_read_it(settings, alice: User, staff: Client) -> None:  # noqa: ANN001
    settings.METRICS_TOKEN = TOKEN
    anonymous = Client().get("/metrics")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    operator = Client()
    operator.force_login(alice)  # an operator of one team: the metrics describe every team's fleet
    assert operator.get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong-token-0123456789").status_code == 401
    assert "headroom_proposals" in _scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert "headroom_proposals" in _scrape(staff)
    settings.METRICS_TOKEN = ""  # no token configured: the empty bearer opens nothing
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_it_counts_proposals_by_state(staff: Client, pool: Pool, alice: User,
                                      django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    actor = core.Actor(user=alice, channel=Channel.API)
    with django_capture_on_commit_callbacks(execute=True):
        services.propose(pool, 4, ProposalKind.PRESCALE, actor, current=1)
        services.propose(pool, 6, ProposalKind.PRESCALE, actor, current=1)  # supersedes the first
    text = _scrape(staff)
    assert _value(text, 'headroom_proposals{state="pending"}') == 1
    assert _value(text, 'headroom_proposals{state="superseded"}') is None  # active states only: a gauge
    assert _value(text, 'headroom_proposals_finished_total{state="superseded"}') == 1
    assert _value(text, 'headroom_notifications{state="pending"}') == 0


def test_a_scrape_reads_no_more_with_ten_days_of_decided_proposals(staff: Client, pool: Pool) -> None:
    """Left running for a year, the scrape (every 15-30 s, from each web pod) reads what is active, not history."""
    from incidents.models import Channel as NotifyChannel, Notification
    from scaling.models import Proposal
    from tests.history_reads import grown, reads_of
    from tests.scaling.test_reads_over_history import add_decided_day

    channel = NotifyChannel.objects.create(team=pool.team, name="on-call", kind="webhook",
                                           settings={"url": "https://hooks.example.com/x"})

    def add_day(day) -> None:  # noqa: ANN001
        add_decided_day(pool, day)
        Notification.objects.bulk_create(Notification(channel=channel, proposal=proposal, kind="post", state="delivered",
                                                      next_attempt_at=day)
                                         for proposal in Proposal.objects.filter(created_at=day))

    now = timezone.now()
    add_day(now - timedelta(days=1))
    one_day = reads_of(lambda: metrics.exposition(now))
    for days_ago in range(2, 11):
        add_day(now - timedelta(days=days_ago))
    assert grown(one_day, reads_of(lambda: metrics.exposition(now))) == {}


def test_a_tick_records_its_duration_lateness_and_decisions_by_reason(staff: Client, kube_pool: Pool,
                                                                      kube: SandboxCluster) -> None:
    report = loop.tick([kube_pool])
    assert report.errors == {}
    [ticked] = report.pools
    loop.tick([kube_pool])
    text = _scrape(staff)
    assert _value(text, "headroom_tick_duration_seconds_count") == 2
    assert _value(text, 'headroom_tick_duration_seconds_bucket{le="+Inf"}') == 2
    assert (_value(text, "headroom_tick_duration_seconds_sum") or 0) > 0
    assert _value(text, "headroom_tick_lateness_seconds_count") == 1  # the second tick, measured from the first
    assert _value(text, f'headroom_decisions_total{{reason="{ticked.decided["binding"]}"}}') == 2
    assert _value(text, f'headroom_cluster_last_tick_age_seconds{{cluster="{kube_pool.cluster.name}"}}') is not None


def test_lateness_is_the_delay_past_one_period(staff: Client) -> None:
    metrics.record_tick(1000.0, 1000.5, [])
    metrics.record_tick(1035.0, 1036.0, [{"binding": "ReactiveQueueDepth", "reasons": ["CappedByMaxReplicas"]}])  # 20 s late
    text = _scrape(staff)
    assert _value(text, "headroom_tick_lateness_seconds_sum") == 20
    assert _value(text, 'headroom_tick_lateness_seconds_bucket{le="15"}') == 0
    assert _value(text, 'headroom_tick_lateness_seconds_bucket{le="30"}') == 1
    assert _value(text, 'headroom_decisions_total{reason="CappedByMaxReplicas"}') == 1
    assert _value(text, "headroom_tick_duration_seconds_sum") == 1.5


def test_the_last_tick_age_per_cluster_comes_from_the_database(staff: Client, pool: Pool) -> None:
    now = timezone.now()
    SignalSample.objects.create(pool=pool, at=now - timedelta(seconds=40))
    text = metrics.exposition(now).decode()
    assert _value(text, f'headroom_cluster_last_tick_age_seconds{{cluster="{pool.cluster.name}"}}') == 40


def test_a_cluster_whose_pools_never_ticked_reads_as_stalled(staff: Client, pool: Pool) -> None:
    """A fresh install whose beat never ran: the age is +Inf, so HeadroomLoopStalled (> 60 for 1m) pages
    instead of finding no series at all."""
    text = metrics.exposition(timezone.now()).decode()
    assert _value(text, f'headroom_cluster_last_tick_age_seconds{{cluster="{pool.cluster.name}"}}') == float("inf")


def test_notification_failures_are_counted_by_kind_and_outcome(staff: Client) -> None:
    metrics.record_notification_failure("webhook", final=False)
    metrics.record_notification_failure("webhook", final=False)
    metrics.record_notification_failure("slack", final=True)
    text = _scrape(staff)
    assert _value(text, 'headroom_notification_failures_total{kind="webhook",outcome="retrying"}') == 2
    assert _value(text, 'headroom_notification_failures_total{kind="slack",outcome="final"}') == 1


def test_a_broken_cache_costs_numbers_not_ticks(monkeypatch, caplog) -> None:  # noqa: ANN001
    def broken(*args: object, **kwargs: object) -> None:
        raise ConnectionError("redis is gone")

    monkeypatch.setattr(cache, "add", broken)
    metrics.record_tick(1.0, 2.0, [{"binding": "HoldCurrent"}])  # does not raise
    assert "could not record record_tick" in caplog.text


def test_json_logs_carry_the_request_id() -> None:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Collect()
    handler.addFilter(logs.RequestIdFilter())
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("headroom.test")
    logger.addHandler(handler)
    try:
        def view(request: object) -> HttpResponse:
            logger.warning("scaling %s", "chat-8b")
            return HttpResponse("ok")

        request = RequestFactory().get("/", HTTP_X_REQUEST_ID="req-1234567890")
        response = RequestIdMiddleware(view)(request)
        logger.warning("after the request")
    finally:
        logger.removeHandler(handler)
    inside, after = (json.loads(line) for line in lines)
    assert response["X-Request-ID"] == "req-1234567890"
    assert (inside["message"], inside["request_id"], inside["level"]) == ("scaling chat-8b", "req-1234567890", "WARNING")
    assert after["request_id"] == ""
