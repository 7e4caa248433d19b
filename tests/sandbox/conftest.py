"""Fixtures for the sandbox tier: real servers on loopback, short cold starts."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from scaling.sim.profiles import PoolProfile, get_profile
from sandbox.fleet import Fleet

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
