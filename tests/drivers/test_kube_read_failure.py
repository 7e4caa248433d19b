"""Unknown is never current, against the real parts: Prometheus (Debian's) answers about a pool during a
surge while the Kubernetes API fails every read; the loop proposes nothing, auto-approved or not."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane.models import Pool
from scaling import loop
from scaling.models import Proposal

from tests.core.conftest import alice, ml_team  # noqa: F401


@pytest.mark.prometheus
@pytest.mark.django_db(transaction=True)
def test_a_failing_kubernetes_read_while_prometheus_answers_proposes_nothing(alice: User, settings) -> None:  # noqa: ANN001, F811
    from sandbox.registration import register
    from sandbox.replica import wait_until
    from sandbox.runtime import Sandbox, SandboxConfig

    settings.KUBERNETES_ENABLED = settings.PROMETHEUS_ENABLED = True
    config = SandboxConfig(pools=1, scenario="surge", speed=8.0, cold_start_s=4.0, scrape_interval_s=1.0,
                           max_num_seqs=2)
    with Sandbox(config) as sandbox:
        register(sandbox)
        pool = Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules").get()
        sandbox.cluster.api.faults.error_rate = 1.0  # every Kubernetes API request answers 500

        def prometheus_sees_load() -> bool:
            [ticked] = loop.tick([pool]).pools
            return (ticked.read["queue_depth"] or 0) > 0 and (ticked.read["request_rate_rps"] or 0) > 0

        assert wait_until(prometheus_sees_load, 60, interval=2.0), "Prometheus never showed the surge"
        report = loop.tick([pool])
        [ticked] = report.pools
        assert ticked.read["ready_replicas"] is not None  # Prometheus still counts the serving replicas
        assert ticked.read["desired_replicas"] is None and ticked.decided["current_replicas"] is None
        assert any("HTTP 500" in error for where, error in report.errors.items() if "kubernetes" in where)
        assert ticked.did == [] and not Proposal.objects.exists()
