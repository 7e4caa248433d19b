"""A warm-pool report from the history a real Prometheus (Debian's binary) recorded of the sandbox:
the loop backfills the pool's past request rate on its first tick, and the report replays it.
Service tier: needs `make system-deps`."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import loop, report_service
from scaling.choices import ReportState
from scaling.models import SignalSample


@pytest.mark.prometheus
@pytest.mark.django_db(transaction=True)
def test_a_report_replays_the_history_prometheus_recorded(alice: User, settings) -> None:  # noqa: ANN001
    from sandbox.registration import register
    from sandbox.runtime import Sandbox, SandboxConfig

    settings.KUBERNETES_ENABLED = settings.PROMETHEUS_ENABLED = True
    config = SandboxConfig(pools=1, scenario="steady", cold_start_s=0.5, scrape_interval_s=1.0, history_hours=3.0)
    with Sandbox(config) as sandbox:
        register(sandbox)
        pool = Pool.objects.select_related("cluster").prefetch_related("slos", "schedules").get()
        tick = loop.tick([pool])
        assert not any("history" in where for where in tick.errors), tick.errors
    assert SignalSample.objects.filter(pool=pool).count() >= 20
    report = report_service.request_report(pool, core.Actor(alice, Channel.API), days=2.5 / 24, sizes_pct=(0, 60),
                                           enqueue=False)
    report = report_service.run(report.pk)
    assert report.state == ReportState.SUCCEEDED, report.error
    rows = report.result["rows"]
    assert [row["warm_pool_pct"] for row in rows] == [0, 40, 60] and all(row["requests"] > 0 for row in rows)
    assert "stored request rates" in report.result["period"]["source"]
    assert 0 < rows[0]["slo_attainment"] <= 1 and rows[0]["gpu_hours"] > 0
