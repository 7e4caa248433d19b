"""Least-outstanding router: each request goes to the ready replica with the fewest requests in flight.

Small pools are scanned (a C-level `min` over a handful of replicas is the fastest pick); from
SCAN_LIMIT routable replicas on, replicas sit in buckets by outstanding count so a pick stays O(1)
(a scan over a hundred replicas per request would dominate a replay's run time).
"""
from __future__ import annotations

SCAN_LIMIT = 12


class LeastOutstandingRouter:
    def __init__(self) -> None:
        self.outstanding: list[int] = []  # per replica id, routable or not (draining ones finish work)
        self.routable_ids: list[int] = []
        self._routable: list[bool] = []
        self._buckets: list[set[int]] | None = None  # outstanding count -> routable ids, large pools only
        self._lowest = 0

    @property
    def routable_count(self) -> int:
        return len(self.routable_ids)

    def add_replica(self) -> int:
        """A new replica id, not yet routable."""
        self.outstanding.append(0)
        self._routable.append(False)
        return len(self.outstanding) - 1

    def make_routable(self, replica_id: int) -> None:
        self._routable[replica_id] = True
        self.routable_ids.append(replica_id)
        self.routable_ids.sort()  # in place: the replay holds a reference
        self._rebuild()

    def stop_routing(self, replica_id: int) -> None:
        self._routable[replica_id] = False
        self.routable_ids.remove(replica_id)
        self._rebuild()

    def pick(self) -> int:
        """The least-loaded routable replica, now counted one request busier. Needs routable_count > 0."""
        outstanding = self.outstanding
        if self._buckets is None:
            replica_id = min(self.routable_ids, key=outstanding.__getitem__)
            outstanding[replica_id] += 1
            return replica_id
        bucket = self._buckets[self._lowest]
        replica_id = min(bucket) if len(bucket) < 8 else next(iter(bucket))
        bucket.remove(replica_id)
        count = outstanding[replica_id] = self._lowest + 1
        if count == len(self._buckets):
            self._buckets.append(set())
        self._buckets[count].add(replica_id)
        if not bucket:
            self._lowest = count
        return replica_id

    def finish(self, replica_id: int) -> None:
        """One request of the replica completed or was abandoned."""
        count = self.outstanding[replica_id]
        self.outstanding[replica_id] = count - 1
        if self._buckets is not None and self._routable[replica_id]:
            self._buckets[count].remove(replica_id)
            self._buckets[count - 1].add(replica_id)
            if count - 1 < self._lowest:
                self._lowest = count - 1

    def _rebuild(self) -> None:
        if len(self.routable_ids) < SCAN_LIMIT:
            self._buckets = None
            return
        counts = [self.outstanding[i] for i in self.routable_ids]
        self._buckets = [set() for _ in range(max(counts) + 1)]
        for replica_id, count in zip(self.routable_ids, counts):
            self._buckets[count].add(replica_id)
        self._lowest = min(counts)
