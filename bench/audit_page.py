"""How long the audit page takes over 100,000 events (16,000 proposals of 5 steps, 20,000 pool changes).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/headroom TEST_RUN_ID=bench \\
        .venv/bin/pytest -q -s -p no:cacheprovider bench/audit_page.py

Prints one line per address: the mean of three requests after a warm-up, in ms (docs/api.md).
"""
from __future__ import annotations

import time
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from controlplane.models import AuditEvent, Pool
from scaling.models import Proposal
from tests.conftest import django_db_modify_db_settings  # noqa: F401 - a test database of this run's own
from tests.core.conftest import alice, cluster, ml_team, pool  # noqa: F401


def test_audit_page_over_100000_events(alice: User, pool: Pool) -> None:  # noqa: F811
    expires = timezone.now() + timedelta(hours=1)
    Proposal.objects.bulk_create([
        Proposal(pool=pool, kind="reactive", state="executed", current_replicas=1, target_replicas=2,
                 idempotency_key=f"b{i}", requested_channel="auto", expires_at=expires) for i in range(16_000)
    ], batch_size=5000)
    events = [AuditEvent(actor_name="auto:system", channel="auto", action=action, object_type="scaling.proposal",
                         object_id=str(proposal_id), object_repr=f"#{proposal_id} chat-8b", after={"pool": pool.pk},
                         team=pool.team)
              for proposal_id in Proposal.objects.values_list("pk", flat=True)
              for action in ("propose", "approved", "executing", "scale-intent", "executed")]
    events += [AuditEvent(actor_name="bob", channel="web", action="update", object_type="controlplane.pool",
                          object_id=str(pool.pk), object_repr=str(pool), after={"id": pool.pk}, team=pool.team)
               for _ in range(20_000)]
    AuditEvent.objects.bulk_create(events, batch_size=5000)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")  # as autovacuum would have by then
    client = Client()
    client.force_login(alice)
    for url in ["/audit/", "/audit/?page=20", "/audit/?page=200", "/audit/?action=approved", "/audit/?actor=nobody",
                f"/audit/?pool={pool.pk}", "/audit/?q=chat-8b", "/audit/?object_type=scaling.proposal&within=1h",
                f"/pools/{pool.pk}/", "/api/v1/audit/", f"/api/v1/audit/?pool={pool.pk}"]:
        client.get(url)
        start = time.perf_counter()
        for _ in range(3):
            assert client.get(url).status_code == 200, url
        print(f"{url}: {(time.perf_counter() - start) / 3 * 1000:.0f} ms")
