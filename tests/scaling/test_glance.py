"""A pool "now" at a glance (issue 16): readings against objectives with their 5-minute trend, the replica
ceiling, what waits for a person and since when, data freshness with its reason; inventory-only pools apart."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone as tz

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import glance, services
from scaling.choices import ProposalKind
from scaling.drivers.cluster import ReplicaStatus
from scaling.models import PlannerMemory, Proposal, SignalSample

NOW = datetime(2026, 12, 1, 4, 56, tzinfo=tz.utc)


@pytest.mark.parametrize(
    ("value", "objective", "expected"),
    [(0.5, 1.0, "ok"), (0.8, 1.0, "ok"), (0.9, 1.0, "warn"), (1.0, 1.0, "warn"), (78.0, 1.0, "bad"),
     (None, 1.0, "unknown"), (3.0, None, "ok")],
)
def test_a_reading_is_coloured_by_its_objective(value, objective, expected) -> None:  # noqa: ANN001
    assert glance.level(value, objective) == expected


@pytest.mark.parametrize(
    ("now", "before", "expected"),
    [(2.0, 1.0, "worse"), (0.5, 1.0, "better"), (1.05, 1.0, "steady"), (1.0, None, ""), (None, 1.0, ""),
     (5.0, 0.0, "worse")],
)
def test_the_trend_compares_with_five_minutes_ago(now, before, expected) -> None:  # noqa: ANN001
    assert glance.trend(now, before) == expected


def test_it_says_what_waits_for_a_person_and_since_when() -> None:
    line = glance.waiting(NOW - timedelta(minutes=4, seconds=10), NOW, "needs a second person because …")
    assert line == "waiting for approval since 04:51 UTC (4 min): needs a second person because …"
    assert glance.waiting(None, NOW, "x") == ""


@pytest.mark.parametrize(
    ("observed_ago_s", "error", "unknown_s", "expected", "fresh"),
    [
        (12, "", None, "read 12 s ago", True),
        (None, "", None, "not read: Headroom has never read it from its cluster", False),
        (None, "connection refused", None, "not read: connection refused", False),
        (300, "", None, "not read for 5 min: the control loop has not read this pool since (is the worker running?)",
         False),
        (10, "", 75.0, "replicas read 10 s ago; signals unknown for 75 s (no fresh vLLM series from Prometheus for this "
                       "pool: is the cluster's Prometheus set, and are the pool's pods scraped?): holding, never scaling "
                       "down", False),
        (10, "", float("inf"), "replicas read 10 s ago; signals unknown (no fresh vLLM series from Prometheus for "
                               "this pool: is the cluster's Prometheus set, and are the pool's pods scraped?): "
                               "holding, never scaling down", False),
    ],
)
def test_freshness_says_why(observed_ago_s, error, unknown_s, expected, fresh) -> None:  # noqa: ANN001
    observed = None if observed_ago_s is None else NOW - timedelta(seconds=observed_ago_s)
    assert glance.freshness(observed, NOW, error, unknown_s) == (expected, fresh)


def test_the_ceiling() -> None:
    assert glance.ceiling(8, 8) == "at its replica ceiling (8)"
    assert glance.ceiling(7, 8) == "" and glance.ceiling(None, 8) == ""


def _login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_fleet_and_pool_pages_show_now_at_a_glance(pool: Pool, alice: User) -> None:
    Pool.objects.create(cluster=pool.cluster, team=pool.team, name="embed", namespace="inference",
                        deployment="vllm-embed", model_name="bge", gpu_type="L4", min_replicas=1, max_replicas=2)
    now = timezone.now()
    services.record_status(pool, ReplicaStatus(desired=8, ready=4), now)
    PlannerMemory.objects.create(pool=pool, last_decision={"target_replicas": 8})
    SignalSample.objects.create(pool=pool, at=now - timedelta(minutes=6), ttft_p95_s=0.5, queue_depth=10,
                                ready_replicas=4)
    SignalSample.objects.create(pool=pool, at=now - timedelta(seconds=10), ttft_p95_s=78.0, queue_depth=180,
                                ready_replicas=4)
    waiting = services.propose(pool, 6, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=8)
    Proposal.objects.filter(pk=waiting.pk).update(created_at=now - timedelta(minutes=4))
    client = _login(alice)
    fleet = client.get("/").content.decode()
    row = fleet.split("Inventory only")[0]
    assert '<span class="reading bad"' in row and "TTFT p95 <b>78 s</b>" in row and "≤ 1 s" in row
    assert "↑ worse" in row and "180 waiting (45.0/replica)" in row
    assert "at its replica ceiling (8)" in row
    assert "waiting for approval since" in row and "(4 min)" in row and "alice asked for it" in row
    assert re.search(r"read \d+ s ago", row)
    # A pool never read from its cluster is listed apart, and says so.
    assert "Inventory only" in fleet and "Headroom has never read it from its cluster" in fleet.split("Inventory only")[1]
    page = client.get(f"/pools/{pool.pk}/").content.decode()
    assert "TTFT p95 <b>78 s</b>" in page and "at its replica ceiling (8): more load cannot be met" in page
    assert "waiting for approval since" in page


def test_the_fleet_fragment_holds_both_groups(alice: User, pool: Pool) -> None:
    body = _login(alice).get("/", HTTP_HX_REQUEST="true").content.decode()
    assert body.lstrip().startswith('<div id="fleet-table"') and "<html" not in body and "Inventory only" in body


def _read_pool(pool: Pool, name: str) -> Pool:
    extra = Pool.objects.create(cluster=pool.cluster, team=pool.team, name=name, namespace="inference",
                                deployment=f"vllm-{name}", model_name=name, gpu_type="L4", max_replicas=2)
    services.record_status(extra, ReplicaStatus(desired=1, ready=1), timezone.now())
    return extra


def test_the_fleet_page_costs_the_same_queries_whatever_its_pools(pool: Pool, alice: User) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = _login(alice)
    services.record_status(pool, ReplicaStatus(desired=2, ready=2), timezone.now())

    def queries() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/", HTTP_HX_REQUEST="true").status_code == 200
        return [query["sql"] for query in captured.captured_queries]

    one = queries()
    for name in ("embed", "rerank-2", "code-7b"):
        extra = _read_pool(pool, name)
        SignalSample.objects.create(pool=extra, at=timezone.now(), ttft_p95_s=0.3, queue_depth=1, ready_replicas=1)
        services.propose(extra, 2, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
    many = queries()
    assert len(many) == len(one)
    # Never the proposals' JSON snapshots nor the planner's forecaster state (tens of KB a pool).
    reads = " ".join(many)
    assert '"signals"' not in reads and '"evidence"' not in reads and '"seasonal_forecast"' not in reads


def test_the_fleet_is_paged_and_its_refresh_keeps_the_page(pool: Pool, alice: User, monkeypatch) -> None:  # noqa: ANN001
    from controlplane import views

    monkeypatch.setattr(views, "FLEET_PAGE_SIZE", 2)
    services.record_status(pool, ReplicaStatus(desired=2, ready=2), timezone.now())
    for name in ("embed", "rerank-2"):
        _read_pool(pool, name)
    client = _login(alice)
    first = client.get("/").content.decode()
    assert "pools 1–2 of 3" in first and 'href="?page=2&amp;inventory_page=1"' in first
    second = client.get("/?page=2", HTTP_HX_REQUEST="true").content.decode()
    assert "rerank-2" in second and "chat-8b" not in second and "embed" not in second
    # The every-15-s refresh asks for the page it shows.
    assert re.search(r'hx-get="/\?page=2&amp;inventory_page=1"', second)
    # A page past the end shows the last one; a word shows the first (no 404, no 500).
    assert "rerank-2" in client.get("/?page=99").content.decode()
    assert "chat-8b" in client.get("/?page=abc").content.decode()
