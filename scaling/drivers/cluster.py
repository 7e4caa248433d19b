"""The ClusterDriver port: read a pool's replicas and change them. Backends live beside it."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class Workload:
    """What a driver needs to know about a pool, as plain data."""

    namespace: str
    deployment: str
    scaled_object: str = ""  # set when KEDA owns the Deployment's replica range


@dataclass(frozen=True)
class ReplicaStatus:
    desired: int  # what the cluster is asked to run (spec.replicas)
    ready: int  # Ready pods: model loaded, serving
    updated_at_resource_version: str = ""

    @property
    def arriving(self) -> int:
        return max(0, self.desired - self.ready)


@dataclass(frozen=True)
class ScaleOutcome:
    previous: int
    target: int
    wrote: bool  # False when the cluster already had the target (an idempotent re-run)
    conflicts: int = 0  # 409s retried on the way


class DriverError(Exception):
    """A failed call. `permanent` failures are not retried (not found, forbidden, invalid)."""

    def __init__(self, message: str, *, permanent: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.status = status


class ClusterDriver(Protocol):
    def status(self, workload: Workload) -> ReplicaStatus: ...

    def scale(self, workload: Workload, replicas: int) -> ScaleOutcome: ...

    def last_ready_at(self, workload: Workload) -> datetime | None:
        """When the most recent of the pool's Ready pods became Ready (None if none is)."""
        ...
