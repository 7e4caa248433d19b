"""A Prometheus that answers garbage, seen from where the on-call looks: the pool page names the failing
queries and why, the log says it once per cluster and tick, and the next good read clears it."""
from __future__ import annotations

import logging

from django.contrib.auth.models import User
from django.test import Client

from controlplane.models import Pool
from scaling import loop
from scaling.models import PlannerMemory

from tests.drivers.test_prometheus_answers import FakePrometheus, healthy

PAGE_502 = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1>nginx</body></html>"


def test_the_pool_page_names_the_queries_a_bad_prometheus_failed(kube_pool: Pool, alice: User, settings,  # noqa: ANN001
                                                                    caplog) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = True
    settings.CLUSTER_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    prometheus = FakePrometheus()
    prometheus.answer = lambda query, at: (502, PAGE_502)
    try:
        kube_pool.cluster.prometheus_url = prometheus.url
        kube_pool.cluster.save()
        with caplog.at_level(logging.WARNING, logger="scaling.loop"):
            report = loop.tick([Pool.objects.select_related("cluster", "team").get(pk=kube_pool.pk)])
        [ticked] = report.pools
        assert ticked.read["queue_depth"] is None and ticked.decided["hold"] is True  # unknown, never zero
        errors = PlannerMemory.objects.get(pool=kube_pool).read_errors
        assert errors["prometheus queue_depth"].startswith("HTTP 502, not Prometheus' JSON (a proxy's page?)")
        assert "kubernetes" not in errors  # the replicas were read
        assert "reads failed this tick" in caplog.text and "prometheus queue_depth" in caplog.text
        assert "<html" not in caplog.text  # a sentence, not the proxy's page

        client = Client()
        client.force_login(alice)
        page = client.get(f"/pools/{kube_pool.pk}/").content.decode()
        assert "signals unknown" in page and "HTTP 502, not Prometheus&#x27;s JSON" not in page
        assert "more: HTTP 502, not Prometheus&#x27; JSON (a proxy&#x27;s page?): 502 Bad Gateway" in page
        assert "&lt;html" not in page and page.count("502 Bad Gateway") == 2  # queries and history, not one per query

        prometheus.answer = healthy  # Prometheus recovers: the next tick reads it and the reason goes
        loop.tick([Pool.objects.select_related("cluster", "team").get(pk=kube_pool.pk)])
        assert PlannerMemory.objects.get(pool=kube_pool).read_errors == {}
    finally:
        prometheus.close()
