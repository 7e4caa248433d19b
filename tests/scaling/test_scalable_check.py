"""A pool whose scaling target would refuse a write is found by the tick, before a surge needs the write.

Without the check, a Deployment an HPA owns (the setup most of our users come from) was found out at the first
proposal of a surge: it failed at once, the same change then waited 15 minutes, and the surge went unserved.
control-loop.md, "Can Headroom scale it?"; alerts.md, `cannot_scale`."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

from django.contrib.auth.models import User
from rest_framework.test import APIClient

from controlplane.choices import ScalingTarget
from controlplane.models import Pool
from incidents import alerts
from incidents.choices import AlertState
from incidents.models import Alert
from sandbox.kube import resources as res
from sandbox.kube.cluster import SandboxCluster
from scaling import loop, services
from scaling.drivers.cluster import DriverError, Workload
from scaling.models import PoolStatus

from tests.scaling.world import NS

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=tz.utc)
HPA = "chat-hpa"


def _hpa(kube: SandboxCluster, target: str = "vllm-chat-8b") -> None:
    kube.store.create(res.HPAS, {"metadata": {"name": HPA, "namespace": NS}, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "minReplicas": 1, "maxReplicas": 6}, "status": {}})


def _read(pool: Pool, at: datetime) -> PoolStatus:
    pool = Pool.objects.select_related("cluster", "team").get(pk=pool.pk)
    _, errors = loop.read_cluster(pool.cluster, [pool], at)
    assert errors == {}, errors
    return PoolStatus.objects.get(pool=pool)


def test_a_deployment_nobody_else_scales_is_found_writable_at_the_first_tick(kube_pool: Pool, settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    status = _read(kube_pool, NOW)
    assert status.scale_refusal == "" and status.scale_checked_at == NOW


def test_a_deployment_an_hpa_owns_is_found_shown_and_alerted_until_the_target_is_fixed(kube_pool: Pool, kube: SandboxCluster,
                                                                         alice: User, settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    _hpa(kube)
    status = _read(kube_pool, NOW)
    assert "is scaled by HorizontalPodAutoscaler inference/chat-hpa" in status.scale_refusal
    assert "set the pool's scaling target to HPA" in status.scale_refusal

    alerts.evaluate_alerts([kube_pool], now=NOW)
    alert = Alert.objects.get(pool=kube_pool, rule="cannot_scale")
    assert alert.state == AlertState.FIRING and alert.tier == "P2"
    assert "a change of its replicas would be refused" in alert.summary and "scaling target to HPA" in alert.summary

    client = APIClient()
    client.force_authenticate(alice)
    shown = client.get(f"/api/v1/pools/{kube_pool.pk}/").json()
    assert shown["scale_refusal"] == status.scale_refusal and shown["scale_checked_at"]
    client.force_login(alice)
    page = client.get(f"/pools/{kube_pool.pk}/live/").content.decode()
    assert "Headroom cannot scale this pool" in page and "HorizontalPodAutoscaler inference/chat-hpa" in page
    assert "Headroom cannot scale it" in client.get("/").content.decode()

    # The admin follows the fix: the next tick checks again at once, not 10 minutes later.
    pool = Pool.objects.get(pk=kube_pool.pk)
    pool.scaling_target = ScalingTarget.HPA
    pool.save()
    later = NOW + timedelta(seconds=15)
    assert _read(pool, later).scale_refusal == ""
    alerts.evaluate_alerts([pool], now=later)
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED


def test_it_checks_every_ten_minutes_not_every_tick(kube_pool: Pool, kube: SandboxCluster, settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    assert _read(kube_pool, NOW).scale_refusal == ""
    _hpa(kube)  # another team adds an HPA on the Deployment
    assert _read(kube_pool, NOW + timedelta(seconds=590)).scale_checked_at == NOW
    assert "HorizontalPodAutoscaler" in _read(kube_pool, NOW + timedelta(seconds=600)).scale_refusal


def test_a_scaled_object_of_another_deployment_is_refused(kube_pool: Pool, kube: SandboxCluster, settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    kube.store.create(res.SCALEDOBJECTS, {"metadata": {"name": "chat-so", "namespace": NS}, "spec": {
        "scaleTargetRef": {"name": "vllm-other"}, "minReplicaCount": 1, "maxReplicaCount": 8}, "status": {}})
    Pool.objects.filter(pk=kube_pool.pk).update(scaling_target=ScalingTarget.KEDA, scaled_object="chat-so")
    assert "not this pool's Deployment 'vllm-chat-8b'" in _read(kube_pool, NOW).scale_refusal


class _Unanswered:
    """The check's read times out: what the last check found is kept, and it is asked again next tick."""

    def check_writable(self, workload: Workload) -> None:
        raise DriverError("list HPAs: timed out", permanent=False)


def test_a_check_that_could_not_be_made_keeps_what_the_last_one_found(kube_pool: Pool, kube: SandboxCluster,
                                                                      settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    _hpa(kube)
    found = _read(kube_pool, NOW).scale_refusal
    services.check_scalable(kube_pool, PoolStatus.objects.get(pool=kube_pool), _Unanswered(), NOW + timedelta(hours=1))
    status = PoolStatus.objects.get(pool=kube_pool)
    assert status.scale_refusal == found and status.scale_checked_at == NOW
