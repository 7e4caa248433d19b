"""Least-outstanding router: each request goes to the ready replica with the fewest requests in flight.

Replicas sit in buckets by their outstanding count, so a pick is O(1) however many replicas are
ready (a scan over a hundred replicas per request would dominate the replay's run time).
"""
from __future__ import annotations


class LeastOutstandingRouter:
    def __init__(self) -> None:
        self.outstanding: list[int] = []  # per replica id, routable or not (draining ones finish work)
        self._routable: list[bool] = []
        self._buckets: list[set[int]] = [set()]  # outstanding count -> routable replica ids
        self._lowest = 0
        self.routable_count = 0

    def add_replica(self) -> int:
        """A new replica id, not yet routable."""
        self.outstanding.append(0)
        self._routable.append(False)
        return len(self.outstanding) - 1

    def make_routable(self, replica_id: int) -> None:
        count = self.outstanding[replica_id]
        self._bucket(count).add(replica_id)
        self._routable[replica_id] = True
        self.routable_count += 1
        self._lowest = min(self._lowest, count) if self.routable_count > 1 else count

    def stop_routing(self, replica_id: int) -> None:
        self._buckets[self.outstanding[replica_id]].discard(replica_id)
        self._routable[replica_id] = False
        self.routable_count -= 1
        self._settle_lowest()

    def pick(self) -> int:
        """The least-loaded routable replica, now counted one request busier. Needs routable_count > 0."""
        bucket = self._buckets[self._lowest]
        replica_id = min(bucket) if len(bucket) < 8 else next(iter(bucket))
        bucket.remove(replica_id)
        count = self.outstanding[replica_id] = self._lowest + 1
        self._bucket(count).add(replica_id)
        if not bucket:
            self._lowest = count
        return replica_id

    def finish(self, replica_id: int) -> None:
        """One request of the replica completed or was abandoned."""
        count = self.outstanding[replica_id]
        self.outstanding[replica_id] = count - 1
        if self._routable[replica_id]:
            buckets = self._buckets
            buckets[count].remove(replica_id)
            buckets[count - 1].add(replica_id)
            if count - 1 < self._lowest:
                self._lowest = count - 1

    def _bucket(self, count: int) -> set[int]:
        while len(self._buckets) <= count:
            self._buckets.append(set())
        return self._buckets[count]

    def _settle_lowest(self) -> None:
        if self.routable_count == 0:
            self._lowest = 0
            return
        while not self._buckets[self._lowest]:
            self._lowest += 1
