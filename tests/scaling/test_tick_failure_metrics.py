"""A tick that fails is not a tick that did not happen: the loop's heartbeat (`headroom_cluster_last_tick_age_seconds`)
counts a recorded failure as a tick, so a pool whose planning raises on every tick, or a cluster that cannot be read,
keeps the heartbeat fresh. `headroom_tick_failures_total` is what tells Headroom's operator."""
from __future__ import annotations

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from controlplane import metrics
from controlplane.models import Pool
from sandbox.kube.cluster import SandboxCluster
from scaling import loop


def _samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = metrics.exposition().decode()
    return {tuple(sorted(sample.labels.items())): sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == name}


def test_a_pool_whose_every_tick_raises_is_counted_while_the_heartbeat_stays_fresh(monkeypatch, kube_pool: Pool,  # noqa: ANN001
                                                                                   kube: SandboxCluster) -> None:
    def planning_bug(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(loop, "tick_pool", planning_bug)
    loop.tick([kube_pool])
    loop.tick([kube_pool])
    cluster = kube_pool.cluster.name
    [age] = _samples("headroom_cluster_last_tick_age_seconds").values()
    assert age < 60  # HeadroomLoopStalled stays quiet: the failures count as ticks
    assert _samples("headroom_tick_failures_total") == {(("cluster", cluster), ("stage", "pool")): 2}


def test_a_cluster_whose_read_fails_is_counted_once_a_tick(monkeypatch, kube_pool: Pool,  # noqa: ANN001
                                                           kube: SandboxCluster) -> None:
    def unreachable(*args: object, **kwargs: object) -> None:
        raise ConnectionError("kubernetes API refused the connection")

    monkeypatch.setattr(loop, "read_cluster", unreachable)
    loop.tick([kube_pool])
    assert _samples("headroom_tick_failures_total") == {(("cluster", kube_pool.cluster.name), ("stage", "read")): 1}


def test_a_clean_tick_counts_no_failure(kube_pool: Pool, kube: SandboxCluster, client: Client) -> None:
    assert loop.tick([kube_pool]).errors == {}
    assert _samples("headroom_tick_failures_total") == {}
