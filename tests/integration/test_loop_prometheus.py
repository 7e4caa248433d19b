"""The control loop reading a real Prometheus (Debian's binary) that scrapes the sandbox: a surge becomes an
executed scale-up, and a new pool gets its past request rate once. Service tier: needs `make system-deps`."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from controlplane.models import Pool
from incidents import alerts
from incidents.models import HourlyRollup
from scaling import loop
from scaling.choices import ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.drivers.registry import workload_of
from scaling.models import PlannerMemory, Proposal, SignalSample

@pytest.mark.prometheus
@pytest.mark.django_db(transaction=True)
def test_a_surge_seen_through_prometheus_becomes_an_executed_scale_up(alice: User, settings) -> None:
    from sandbox.registration import register
    from sandbox.runtime import Sandbox, SandboxConfig
    from sandbox.replica import wait_until

    settings.KUBERNETES_ENABLED = settings.PROMETHEUS_ENABLED = True
    config = SandboxConfig(pools=1, scenario="surge", speed=8.0, cold_start_s=4.0, scrape_interval_s=1.0,
                           max_num_seqs=2)
    with Sandbox(config) as sandbox:
        register(sandbox)
        pool = Pool.objects.select_related("cluster").prefetch_related("slos", "schedules").get()

        def scaled_up() -> bool:
            loop.tick([pool])
            return Proposal.objects.filter(pool=pool, target_replicas__gt=1).exists()

        assert wait_until(scaled_up, 90, interval=2.0), "no scale-up proposal during the surge"
        proposal = Proposal.objects.filter(pool=pool).order_by("created_at").first()
        assert proposal.kind == "reactive" and proposal.decided_channel == "auto"
        assert any(reason["code"] == "ReactiveQueueDepth" for reason in proposal.reasons)
        # The queue, the arriving rate (which counts requests before they finish, and those given up on) or the
        # work share may see the surge first: whichever bound the proposal read it.
        read_by = {"ReactiveQueueDepth": "queue_depth", "ReactiveRequestRate": "request_rate_rps",
                   "ReactiveGpuBusyShare": "work_share"}
        binding = next(reason["code"] for reason in proposal.reasons if reason["detail"].startswith("binding:"))
        assert binding in read_by and proposal.signals[read_by[binding]] > 0, (proposal.reasons, proposal.signals)
        # The work share, from vLLM's running requests over the batch slots (the sandbox registers none: the
        # loop read the Deployment's --max-num-seqs, 2) and the prompt tokens at the tick: requests wait, so the
        # batch is full, or nearly (a replica the cluster calls ready that Prometheus has not scraped yet counts
        # empty).
        assert pool.batch_slots is None and Pool.objects.get(pk=pool.pk).batch_slots_in_use == 2
        assert proposal.signals["work_share"] is not None and proposal.signals["work_share"] > 0.5
        assert proposal.state in (ProposalState.EXECUTING, ProposalState.SUCCEEDED), proposal.last_error
        status = KubernetesDriver(sandbox.cluster.url).status(workload_of(pool))
        assert status.desired >= proposal.target_replicas
        # What the incident view charts, as the ticks stored it from Prometheus: the p99s, KV-cache use, the
        # error rate and prefix-cache hits of the surge. (Samples backfilled from Prometheus' history have
        # only a request rate: those columns are None there, never 0.)
        samples = SignalSample.objects.filter(pool=pool)
        columns = ("ttft_p99_s", "e2e_p99_s", "kv_cache_usage", "error_rate", "prefix_cache_hit_rate")

        def every_column_stored() -> bool:
            # A scale-up can come on the queue before any request finished: latency is unknown until one has.
            loop.tick([pool])
            return all(samples.filter(**{f"{column}__isnull": False}).exists() for column in columns)

        assert wait_until(every_column_stored, 60, interval=2.0), \
            [column for column in columns if not samples.filter(**{f"{column}__isnull": False}).exists()]
        assert samples.filter(kv_cache_usage__gt=0).exists()
        assert samples.filter(fallback_share=0.0).exists() and not samples.filter(fallback_share__gt=0).exists()


@pytest.mark.prometheus
@pytest.mark.django_db(transaction=True)
def test_a_new_pool_gets_its_past_request_rate_from_prometheus_once(alice: User, settings) -> None:  # noqa: ANN001
    from sandbox.registration import register
    from sandbox.runtime import Sandbox, SandboxConfig

    settings.KUBERNETES_ENABLED = settings.PROMETHEUS_ENABLED = True
    config = SandboxConfig(pools=1, scenario="steady", cold_start_s=0.5, scrape_interval_s=1.0, history_hours=3.0)
    with Sandbox(config) as sandbox:
        register(sandbox)
        pool = Pool.objects.select_related("cluster").prefetch_related("slos", "schedules").get()
        alerts.evaluate_alerts([pool])  # the beat may evaluate a new pool before its first tick
        assert HourlyRollup.objects.get(pool=pool).hours == []
        report = loop.tick([pool])
        assert not any("history" in where for where in report.errors), report.errors
        from django.utils import timezone

        old = SignalSample.objects.filter(pool=pool, at__lt=timezone.now() - timedelta(hours=1))
        assert old.count() >= 5 and all(rate > 0 for rate in old.values_list("request_rate_rps", flat=True))
        assert PlannerMemory.objects.get(pool=pool).history_backfilled_at is not None
        # The alert rules over days start afresh from the backfilled hours too (3 past hours, complete ones kept).
        assert len(HourlyRollup.objects.get(pool=pool).hours) >= 2
        before = SignalSample.objects.filter(pool=pool).count()
        loop.tick([pool])
        assert SignalSample.objects.filter(pool=pool).count() == before + 1  # only the new tick's sample


@pytest.mark.prometheus
@pytest.mark.django_db(transaction=True)
def test_two_pools_of_one_model_each_read_their_own_traffic(alice: User, settings) -> None:  # noqa: ANN001
    """The sandbox's fallback pool serves the model of its second primary (the smaller one) and takes no traffic of
    its own: each reads its own signals. (Keyed by the served model, one of the two read nothing at all, and the
    other the model's whole traffic.)"""
    from sandbox.registration import register
    from sandbox.replica import wait_until
    from sandbox.runtime import Sandbox, SandboxConfig

    settings.KUBERNETES_ENABLED = settings.PROMETHEUS_ENABLED = True
    config = SandboxConfig(pools=2, fallback_replicas=1, scenario="steady", speed=4.0, cold_start_s=0.5,
                           scrape_interval_s=1.0)
    with Sandbox(config) as sandbox:
        register(sandbox)
        pools = list(Pool.objects.select_related("cluster").prefetch_related("slos", "schedules"))
        fallback = next(pool for pool in pools if pool.deployment.endswith("-fallback"))
        primary = next(pool for pool in pools if pool.model_name == fallback.model_name and pool != fallback)
        samples = SignalSample.objects.filter(request_rate_rps__isnull=False)

        def both_read() -> bool:
            loop.tick(pools)
            return (samples.filter(pool=primary, request_rate_rps__gt=0).exists()
                    and samples.filter(pool=fallback).exists())

        assert wait_until(both_read, 90, interval=2.0), "no request rate read for the two pools"
        primary_rate = samples.filter(pool=primary).latest("at").request_rate_rps
        fallback_rate = samples.filter(pool=fallback).latest("at").request_rate_rps
        assert primary_rate > 0 and fallback_rate < 0.1 * primary_rate, (primary_rate, fallback_rate)
