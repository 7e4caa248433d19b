"""The `SignalSource` port: read every pool's signals at once (design.md §3, §6).

A source answers for many pools in one call (one batched query per signal, never one per pool)
and returns `scaling.engine.signals.PoolSignals`, each value with its age. A pool the source has
nothing for still gets a `PoolSignals`, with every reading missing: unknown, never zero.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scaling.engine.signals import PoolSignals


@dataclass(frozen=True)
class PoolSelector:
    """How a source finds one pool: Headroom's pool name and the label values that identify it."""

    name: str
    labels: Mapping[str, str]  # e.g. {"namespace": "prod", "deployment": "vllm-chat"}

    @classmethod
    def of_deployment(cls, name: str, namespace: str, deployment: str) -> PoolSelector:
        """A pool as the default `LabelMapping` finds it: its Deployment, not its served model."""
        return cls(name, {"namespace": namespace, "deployment": deployment})


@dataclass(frozen=True)
class SignalRead:
    """One read of many pools: their signals, and the signals that failed (name -> error)."""

    pools: dict[str, PoolSignals]
    errors: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, pool: str) -> PoolSignals:
        return self.pools[pool]


class SignalSource(Protocol):
    def read(self, pools: Sequence[PoolSelector]) -> SignalRead:
        """Every pool's signals, each reading aged; failures become unknown readings and `errors`."""
        ...
