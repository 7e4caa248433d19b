"""Fixtures for the sandbox tier: real servers on loopback, short cold starts."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from scaling.sim.profiles import PoolProfile, get_profile
from sandbox.fleet import Fleet
from sandbox.kube.cluster import PoolSpec, SandboxCluster

MODEL = "tiny-llama"


@pytest.fixture
def small_profile() -> PoolProfile:
    """A pool with two batch slots and 20 ms per token, so queues form with a few requests."""
    return dataclasses.replace(get_profile("llama-3.1-8b-h100"), model=MODEL, max_num_seqs=2,
                               itl_ms_base=20.0, itl_ms_per_seq=0.0)


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    with Fleet() as running:
        yield running


@pytest.fixture
def cluster(fleet: Fleet, small_profile: PoolProfile) -> Iterator[SandboxCluster]:
    """A route over two pools with a Ready replica each: `big` takes every request (weight 100), `small` none
    (weight 0). Files that need another cluster define their own `cluster`."""
    with SandboxCluster(fleet) as running:
        running.add_pool(PoolSpec(name="big", profile=small_profile, model="big-model", cold_start_s=0, weight=100))
        running.add_pool(PoolSpec(name="small", profile=small_profile, model="small-model", cold_start_s=0, weight=0))
        for pool in ("big", "small"):
            for replica in running.replicas("sandbox", pool):
                assert replica.wait_ready(timeout=5)
        yield running
