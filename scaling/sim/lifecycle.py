"""Replica lifecycle shared by both modes: requested -> starting -> ready -> draining -> gone.

A replica is billed from the moment it is requested (the GPU is held while weights load) until it
is gone. It adds capacity only while ready. Scale-down first cancels replicas still starting
(newest first), then drains ready ones: a draining replica takes no new requests and is gone when
its last request finishes.
"""
from __future__ import annotations

import bisect
import enum
import heapq
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from scaling.sim.config import ColdStart


class ReplicaState(enum.Enum):
    STARTING = "starting"  # requested; the pod is scheduled and loading the model
    READY = "ready"
    DRAINING = "draining"
    GONE = "gone"


@dataclass
class Replica:
    replica_id: int
    requested_at: float
    ready_at: float
    state: ReplicaState = ReplicaState.STARTING
    gone_at: float | None = None
    stopped_at: float | None = None  # stopped taking requests (drain began)

    def ready_s(self, until: float, since: float = 0.0) -> float:
        if self.state is ReplicaState.STARTING or (self.state is ReplicaState.GONE and self.stopped_at is None):
            return 0.0  # never became ready
        end = self.stopped_at if self.stopped_at is not None else until
        return max(0.0, min(end, until) - max(min(self.ready_at, until), since))

    def billed_s(self, until: float, since: float = 0.0) -> float:
        end = self.gone_at if self.gone_at is not None else until
        return max(0.0, end - max(self.requested_at, since))


class ReplicaSet:
    def __init__(self, cold_start: ColdStart, rng: np.random.Generator) -> None:
        self.cold_start = cold_start
        self.rng = rng
        self.replicas: list[Replica] = []
        self.ready_ids: list[int] = []  # routing order is by id; kept sorted
        # Starting replicas, kept apart (a long replay creates hundreds of thousands of replicas):
        # by id in request order, and on a heap by ready time (cancelled ones are skipped lazily).
        self._starting: dict[int, Replica] = {}
        self._ready_heap: list[tuple[float, int]] = []
        self._normals: list[float] = []  # cold-start draws, taken from the generator in blocks
        self.cold_starts = 0
        self.cold_start_at: list[float] = []  # when each cold start was requested

    def start_warm(self, count: int, now: float = 0.0) -> None:
        """Replicas that were already running when the replay starts."""
        for _ in range(count):
            replica = self._new(now, now)
            replica.state = ReplicaState.READY
            self.ready_ids.append(replica.replica_id)

    @property
    def starting(self) -> list[Replica]:
        return list(self._starting.values())

    @property
    def starting_count(self) -> int:
        return len(self._starting)

    @property
    def ready_count(self) -> int:
        return len(self.ready_ids)

    @property
    def desired_count(self) -> int:
        return self.ready_count + len(self._starting)

    def next_ready_at(self) -> float:
        heap = self._ready_heap
        while heap and heap[0][1] not in self._starting:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def promote_due(self, now: float) -> list[int]:
        """Move every starting replica whose cold start is over to ready; returns their ids."""
        promoted = []
        heap = self._ready_heap
        while heap and heap[0][0] <= now:
            replica_id = heapq.heappop(heap)[1]
            if self._starting.pop(replica_id, None) is not None:
                self.replicas[replica_id].state = ReplicaState.READY
                promoted.append(replica_id)
        if promoted:
            self.ready_ids = sorted(self.ready_ids + promoted)
        return promoted

    def scale_to(self, desired: int, now: float, last_request_end: Callable[[int], float]) -> list[int]:
        """Request or remove replicas; returns the ids that stopped taking requests."""
        change = desired - self.desired_count
        if change > 0:
            for _ in range(change):
                replica = self._new(now, now + self._draw_cold_start_s())
                self._starting[replica.replica_id] = replica
                heapq.heappush(self._ready_heap, (replica.ready_at, replica.replica_id))
                self.cold_starts += 1
                self.cold_start_at.append(now)
            return []
        removed: list[int] = []
        for replica_id in list(reversed(self._starting))[: -change]:  # newest first
            replica = self._starting.pop(replica_id)
            replica.state, replica.gone_at = ReplicaState.GONE, now
            change += 1
        if change < 0:
            by_free_first = sorted(self.ready_ids, key=last_request_end)[: -change]
            for replica_id in by_free_first:
                replica = self.replicas[replica_id]
                replica.state, replica.stopped_at = ReplicaState.DRAINING, now
                replica.gone_at = max(now, last_request_end(replica_id))
                self.ready_ids.remove(replica_id)
                removed.append(replica_id)
        return removed

    def ready_seconds(self, until: float, since: float = 0.0) -> float:
        return sum(r.ready_s(until, since) for r in self.replicas)

    def replica_seconds(self, until: float, since: float = 0.0) -> float:
        return sum(r.billed_s(until, since) for r in self.replicas)

    def cold_starts_since(self, since: float) -> int:
        return self.cold_starts - bisect.bisect_left(self.cold_start_at, since)

    def max_alive(self, since: float = 0.0) -> int:
        """Most replicas billed at the same time, from `since` on."""
        events = sorted(
            [(r.requested_at, 1) for r in self.replicas]
            + [(r.gone_at, -1) for r in self.replicas if r.gone_at is not None],
            key=lambda e: (e[0], e[1]),
        )
        alive = peak = 0
        for at, delta in events:
            if at > since:
                peak = max(peak, alive)  # alive when `since` came
            alive += delta
            if at >= since:
                peak = max(peak, alive)
        return max(peak, alive)

    def _new(self, requested_at: float, ready_at: float) -> Replica:
        replica = Replica(len(self.replicas), requested_at, ready_at)
        self.replicas.append(replica)
        return replica

    def _draw_cold_start_s(self) -> float:
        sigma = self.cold_start.sigma
        if sigma == 0.0:
            return self.cold_start.p50_s
        if not self._normals:
            self._normals = self.rng.standard_normal(1024).tolist()[::-1]
        return float(self.cold_start.p50_s * math.exp(sigma * self._normals.pop()))
