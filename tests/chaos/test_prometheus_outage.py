"""Chaos: Prometheus (Debian's binary) is SIGKILLed while a pool serves a surge on several replicas.

What must hold (issue #18, chaos 1; design.md §6): the loop reads unknown, never zero; nothing scales down;
after 60 s without a fresh sample it falls back to the schedule and the last good target; at 90 s the
stale-signals alert fires; when Prometheus is back the signals are read again, the alert resolves (after its
resolve hold) and the
planner decides from fresh load. The loop's clock is stepped past the timers (`tick(now=…)`); everything
else is real: the sandbox's vLLM emulators and Kubernetes API, the official client, Prometheus.
"""
from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.models import Cluster, Pool
from incidents.choices import AlertState
from incidents.models import Alert
from scaling import loop
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.drivers.registry import workload_of
from scaling.engine.planner import SIGNALS_FALLBACK, STALENESS_ALERT
from scaling.models import Proposal

from tests.core.conftest import alice, ml_team  # noqa: F401


@pytest.mark.prometheus
@pytest.mark.django_db(transaction=True)
def test_a_prometheus_killed_mid_surge_holds_falls_back_alerts_and_recovers(alice: User, settings) -> None:  # noqa: ANN001, F811, E501
    from sandbox.registration import register
    from sandbox.replica import wait_until
    from sandbox.runtime import Sandbox, SandboxConfig

    settings.KUBERNETES_ENABLED = settings.PROMETHEUS_ENABLED = True
    config = SandboxConfig(pools=1, scenario="surge", speed=8.0, cold_start_s=2.0, scrape_interval_s=1.0,
                           max_num_seqs=2)
    with Sandbox(config) as sandbox:
        register(sandbox)

        def fresh_pool() -> Pool:
            return Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules").get()

        pool = fresh_pool()
        kube = KubernetesDriver(sandbox.cluster.url)

        def scaled_up() -> bool:
            loop.tick([pool])
            return kube.status(workload_of(pool)).desired >= 3

        assert wait_until(scaled_up, 120, interval=2.0), "the surge never scaled the pool to 3 replicas"
        desired = kube.status(workload_of(pool)).desired
        last_proposal = Proposal.objects.order_by("-pk").values_list("pk", flat=True).first() or 0

        process = sandbox.prometheus._process  # the real server: killed, not asked to stop
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

        started = timezone.now()
        offset = timedelta(0)  # the loop's clock runs ahead of the wall clock by this much, never back

        def tick(after_s: float | None = None) -> loop.PoolTick:
            """One tick at `after_s` past the kill (or now, on the stepped clock)."""
            nonlocal offset
            if after_s is not None:
                offset = max(offset, started + timedelta(seconds=after_s) - timezone.now())
            [ticked] = loop.tick([fresh_pool()], now=timezone.now() + offset).pools
            return ticked

        # At once: unknown is held, never read as an idle pool.
        first = tick(5)
        assert first.read["queue_depth"] is None and first.read["request_rate_rps"] is None
        assert first.decided["hold"] and first.decided["target_replicas"] >= desired, first.decided
        assert SIGNALS_FALLBACK not in first.decided["reasons"] and STALENESS_ALERT not in first.decided["reasons"]
        # 60 s after the last fresh sample: the schedule and the last good target, still no scale-down.
        fallback = tick(70)
        assert SIGNALS_FALLBACK in fallback.decided["reasons"], fallback.decided
        assert fallback.decided["target_replicas"] >= desired
        assert not Alert.objects.filter(rule="stale_signals", state=AlertState.FIRING).exists()
        # 90 s: the stale-signals alert fires (and would page through the channels).
        stale = tick(100)
        assert STALENESS_ALERT in stale.decided["reasons"]
        alert = Alert.objects.get(rule="stale_signals", pool=pool, state=AlertState.FIRING)
        assert alert.state == AlertState.FIRING, alert.summary
        # Through the whole outage nothing asked for fewer replicas, and the Deployment kept its size.
        assert not Proposal.objects.filter(pk__gt=last_proposal, target_replicas__lt=desired).exists()
        assert kube.status(workload_of(pool)).desired >= desired

        # Prometheus comes back (rescheduled: a new address, its data directory kept).
        sandbox.prometheus.start()
        Cluster.objects.filter(pk=pool.cluster_id).update(prometheus_url=sandbox.prometheus.url)

        # A Prometheus that has just started (replaying its WAL on a busy machine) can miss a read's
        # deadline once more: such a tick holds again, rightly. Wait for a tick that reads and decides.
        recovered: loop.PoolTick | None = None

        def read_again() -> bool:
            nonlocal recovered
            recovered = tick()
            return (recovered.read["request_rate_rps"] is not None and recovered.read["queue_depth"] is not None
                    and not recovered.decided["hold"])

        assert wait_until(read_again, 60, interval=2.0), f"the signals never came back: {recovered and recovered.decided}"
        assert recovered is not None and recovered.decided["signals_unknown_for_s"] == 0, recovered.decided
        assert SIGNALS_FALLBACK not in recovered.decided["reasons"]
        assert STALENESS_ALERT not in recovered.decided["reasons"]
        # Its condition is clear: the alert holds two minutes (its resolve hold, docs/alerts.md), then resolves.
        alert.refresh_from_db()
        assert alert.state == AlertState.FIRING and alert.clear_since is not None, alert.summary
        held = tick((timezone.now() + offset - started).total_seconds() + 125)
        assert held.read["queue_depth"] is not None and not held.decided["hold"], held.decided
        alert.refresh_from_db()
        assert alert.state == AlertState.RESOLVED, alert.summary
