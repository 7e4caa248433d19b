"""Left running for a year: what a tick reads of a pool does not grow with the pool's decided history (its old
proposals and measured cold starts), only with what is active or recent."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import loop, services
from scaling.choices import ProposalKind, ProposalState
from scaling.engine.signals import PoolSignals, Reading
from scaling.models import ColdStart, Proposal, SignalSample

from tests.history_reads import grown, reads_of

PROPOSALS_A_DAY = 100


def add_decided_day(pool: Pool, day: datetime) -> None:
    """A busy day of a pool, long decided: scale-ups applied and measured, a pre-scale whose floor has passed."""
    proposals = Proposal.objects.bulk_create(
        Proposal(pool=pool, kind=ProposalKind.PRESCALE if i % 10 == 0 else ProposalKind.REACTIVE,
                 state=ProposalState.SUCCEEDED, current_replicas=2, target_replicas=3,
                 idempotency_key=f"{day:%Y%m%d}-{i}", requested_channel=Channel.AUTO, expires_at=day,
                 decided_at=day, applied_at=day + timedelta(minutes=10 * i), finished_at=day + timedelta(minutes=10 * i),
                 floor_until=day + timedelta(minutes=30) if i % 10 == 0 else None)
        for i in range(PROPOSALS_A_DAY))
    Proposal.objects.filter(pk__in=[p.pk for p in proposals]).update(created_at=day)
    measured = ColdStart.objects.bulk_create(ColdStart(pool=pool, proposal=p, seconds=60.0) for p in proposals[:30])
    ColdStart.objects.filter(pk__in=[c.pk for c in measured]).update(measured_at=day)


@pytest.fixture
def ticking(pool: Pool, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """The loop's tick of `pool` on signals read from memory: a pool whose replicas are arriving (so the decide
    step asks for the scale-ups applied in the last hour)."""
    fresh = lambda value: Reading(float(value), 0.0)  # noqa: E731
    signals = PoolSignals(pool=pool.name, queue_depth=fresh(0), request_rate_rps=fresh(1.0), ready_replicas=fresh(2),
                          desired_replicas=fresh(3), arriving_replicas=fresh(1), ttft_p95_s=fresh(0.3),
                          waiting_per_ready_replica=(fresh(0), fresh(0)))
    monkeypatch.setattr(loop, "read_cluster", lambda cluster, pools, at: ({p.pk: signals for p in pools}, {}))
    monkeypatch.setattr(loop, "backfill_history", lambda cluster, pools, at: {})
    now = timezone.now()
    SignalSample.objects.bulk_create(SignalSample(pool=pool, at=now - timedelta(seconds=15 * k), request_rate_rps=1.0)
                                     for k in range(1, 240))

    def tick() -> None:
        loop.tick(list(loop.loop_pools()), now=now)
        services.advance(now)

    return now, tick


def test_it_reads_no_more_of_a_pool_with_ten_days_of_decided_proposals_than_with_one(pool: Pool, ticking) -> None:  # noqa: ANN001
    now, tick = ticking
    add_decided_day(pool, now - timedelta(days=1))
    one_day = reads_of(tick)
    for days_ago in range(2, 11):
        add_decided_day(pool, now - timedelta(days=days_ago))
    ten_days = reads_of(tick)
    assert grown(one_day, ten_days) == {}


def test_the_pool_page_and_the_inbox_read_no_more_with_ten_days_of_decided_proposals(pool: Pool, alice) -> None:  # noqa: ANN001
    from django.test import Client

    client = Client()
    client.force_login(alice)
    now = timezone.now()

    def pages() -> None:
        for url in (f"/pools/{pool.pk}/", f"/pools/{pool.pk}/decisions/", "/approvals/", "/approvals/history/"):
            assert client.get(url).status_code == 200, url

    add_decided_day(pool, now - timedelta(days=1))
    one_day = reads_of(pages)
    for days_ago in range(2, 11):
        add_decided_day(pool, now - timedelta(days=days_ago))
    assert grown(one_day, reads_of(pages)) == {}
