"""Proposal fixtures: the core personas plus a sandbox Kubernetes API that the pools live in."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from controlplane.models import Cluster, Pool
from sandbox.fleet import Fleet
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from scaling.sim.profiles import get_profile

from tests.core.conftest import alice, bob, charlie, cluster, ml_team, pool, search_pool, search_team  # noqa: F401

NS = "inference"


@pytest.fixture
def kube(settings) -> Iterator[SandboxCluster]:  # noqa: ANN001
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=2)
    with Fleet() as fleet, SandboxCluster(fleet, route_namespace=NS) as running:
        running.add_pool(PoolSpec(name="vllm-chat-8b", profile=profile, namespace=NS, replicas=1, cold_start_s=0.5,
                                  max_replicas=8))
        settings.KUBERNETES_ENABLED = True
        yield running


@pytest.fixture
def kube_pool(pool: Pool, cluster: Cluster, kube: SandboxCluster) -> Pool:  # noqa: F811
    Cluster.objects.filter(pk=cluster.pk).update(kube_api_url=kube.url)
    return Pool.objects.select_related("cluster", "team").get(pk=pool.pk)
