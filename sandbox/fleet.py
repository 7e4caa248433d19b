"""The vLLM fleet emulator: many emulated replicas in one process, each on its own loopback port.

    from sandbox.fleet import Fleet

    with Fleet(speed=1.0) as fleet:
        replicas = fleet.add_replicas(3, model_name="tiny-llama", cold_start_s=0)
        for replica in replicas:
            replica.wait_ready(timeout=5)
            print(replica.base_url)         # http://127.0.0.1:PORT, vLLM's HTTP surface

`cold_start_s` is in model seconds (equal to wall seconds at speed 1); during it the replica's
port refuses connections, like `vllm serve` while the weights load. Latency comes from a
`scaling.sim.profiles.PoolProfile` (the default profile unless one is given).
"""
from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from types import TracebackType

from scaling.sim.profiles import DEFAULT_PROFILE, PoolProfile, get_profile, inter_token_seconds, prefill_seconds

from sandbox.clock import ManualClock, ModelClock
from sandbox.replica import EmulatedReplica

Listener = Callable[[], None]


def replica_capacity_rps(profile: PoolProfile, prompt_tokens: int = 500, output_tokens: int = 100,
                         utilisation: float = 0.7) -> float:
    """Requests/s one replica serves with every batch slot busy, derated to a utilisation that keeps
    queues short: slots / (prefill + decode time of a typical request) x utilisation."""
    slots = profile.max_num_seqs
    service_s = prefill_seconds(profile, prompt_tokens, slots) + output_tokens * inter_token_seconds(profile, slots)
    return round(utilisation * slots / service_s, 3)


class Fleet:
    def __init__(self, speed: float = 1.0, clock: ModelClock | ManualClock | None = None) -> None:
        """`clock` replaces the wall-driven model clock: tests step a ManualClock to hold a state."""
        self.clock = clock or ModelClock(speed)
        self._replicas: list[EmulatedReplica] = []
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._names = itertools.count(1)
        self._started = False

    @property
    def speed(self) -> float:
        return self.clock.speed if isinstance(self.clock, ModelClock) else float("inf")

    def start(self) -> Fleet:
        """Start every replica added so far; later ones start as they are added."""
        with self._lock:
            self._started = True
            pending = [r for r in self._replicas if r.port == 0]
        for replica in pending:
            replica.start()
        self._notify()
        return self

    def stop(self) -> None:
        with self._lock:
            replicas, self._replicas = self._replicas, []
            self._started = False
        for replica in replicas:
            replica.stop()
        self._notify()

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def add_replica(self, model_name: str | None = None, *, profile: PoolProfile | None = None,
                    cold_start_s: float = 0.0, pool: str = "default", name: str | None = None,
                    max_model_len: int = 32768, scheduling_policy: str = "fcfs") -> EmulatedReplica:
        """Add one replica serving `model_name` (default: the profile's model)."""
        profile = profile or get_profile(DEFAULT_PROFILE)
        replica = EmulatedReplica(
            name=name or f"{pool.rpartition('/')[2]}-fleet-{next(self._names):05d}", model_name=model_name or profile.model,
            profile=profile, clock=self.clock, cold_start_s=cold_start_s, pool=pool,
            max_model_len=max_model_len, scheduling_policy=scheduling_policy,
        )
        with self._lock:
            self._replicas.append(replica)
            started = self._started
        if started:
            replica.start()
            self._notify()
        return replica

    def add_replicas(self, count: int, model_name: str | None = None, *, profile: PoolProfile | None = None,
                     cold_start_s: float = 0.0, pool: str = "default",
                     max_model_len: int = 32768) -> list[EmulatedReplica]:
        """Add `count` replicas alike (named as a Deployment's pods are: `<pool>-fleet-<5 digits>`)."""
        return [self.add_replica(model_name, profile=profile, cold_start_s=cold_start_s, pool=pool,
                                 max_model_len=max_model_len) for _ in range(count)]

    def remove_replica(self, replica: EmulatedReplica) -> None:
        with self._lock:
            if replica in self._replicas:
                self._replicas.remove(replica)
        replica.stop()
        self._notify()

    def replicas(self, pool: str | None = None) -> list[EmulatedReplica]:
        with self._lock:
            return [r for r in self._replicas if pool is None or r.pool == pool]

    def replica_moved(self) -> None:
        """Tell listeners that a replica came back on another port (see EmulatedReplica.restart)."""
        self._notify()

    def subscribe(self, listener: Listener) -> None:
        """Call `listener()` whenever replicas come or go (Prometheus service discovery uses it)."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()
