"""One emulated vLLM replica: an engine plus an HTTP server on its own loopback port.

Like `vllm serve`, the port is bound at start but only listens once the model has "loaded", so
during the cold start clients get connection refused. The HTTP surface is in `sandbox.vllm_http`.
"""
from __future__ import annotations

import enum
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from scaling.sim.profiles import PoolProfile

from sandbox.clock import Cancellable, ManualClock, ModelClock
from sandbox.engine import Engine
from sandbox.httpserver import QuietHTTPServer
from sandbox.vllm_metrics import VllmMetrics


class ReplicaState(enum.Enum):
    LOADING = "loading"  # bound, not listening: connection refused
    READY = "ready"
    DEAD = "dead"  # killed by a fault; may be restarted
    STOPPED = "stopped"


@dataclass
class ReplicaFaults:
    """Fault knobs, changeable at any time."""

    extra_latency_s: float = 0.0  # wall seconds added before every API answer (network, proxy)
    error_rate: float = 0.0  # fraction of completion requests answered with HTTP 500
    hung: bool = False  # accepts connections, answers nothing (health and metrics included)
    max_num_queued_reqs: int | None = None  # admission limit: 503 beyond it, like vLLM 0.33


class _Server(QuietHTTPServer):

    def __init__(self, replica: EmulatedReplica, address: tuple[str, int]) -> None:
        from sandbox.vllm_http import VllmRequestHandler

        self.replica = replica
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, VllmRequestHandler, bind_and_activate=False)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Reset every open connection, as a dying process would."""
        with self.connections_lock:
            for connection in list(self.connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class EmulatedReplica:
    def __init__(self, *, name: str, model_name: str, profile: PoolProfile, clock: ModelClock | ManualClock,
                 cold_start_s: float = 0.0, pool: str = "", max_model_len: int = 32768,
                 host: str = "127.0.0.1", port: int = 0, scheduling_policy: str = "fcfs") -> None:
        self.name = name
        self.model_name = model_name
        self.profile = profile
        self.clock = clock
        self.cold_start_s = cold_start_s
        self.pool = pool
        self.max_model_len = max_model_len
        self.host = host
        self.port = port
        self.faults = ReplicaFaults()
        self.sleep_level = 0
        self.restarts = 0
        self.started_at = 0.0  # model time of the last (re)start
        self.state = ReplicaState.STOPPED
        self.metrics = self._new_metrics()
        self.scheduling_policy = scheduling_policy  # vLLM's --scheduling-policy
        self.engine = Engine(profile, self.metrics, clock, scheduling_policy)
        self._server: _Server | None = None
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._timer: Cancellable | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ready(self) -> bool:
        return self.state is ReplicaState.READY

    def _new_metrics(self) -> VllmMetrics:
        return VllmMetrics(self.model_name, self.max_model_len, self.profile.kv_cache_tokens)

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Bind the port now; listen and answer once the cold start is over."""
        with self._lock:
            self._server = _Server(self, (self.host, self.port))
            self._server.server_bind()
            self.port = self._server.server_address[1]
            self.state = ReplicaState.LOADING
            self.started_at = self.clock.now()
            self._ready.clear()
            self._timer = self.clock.call_later(self.cold_start_s, self._finish_loading)

    def _finish_loading(self) -> None:
        with self._lock:
            if self.state is not ReplicaState.LOADING or self._server is None:
                return
            self.engine.start()
            self._server.server_activate()
            threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                             name=f"vllm-http-{self.port}", daemon=True).start()
            self.state = ReplicaState.READY
            self._ready.set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def stop(self) -> None:
        self._shut(ReplicaState.STOPPED)

    def kill(self) -> None:
        """Fault: the process dies. Connections reset, the port refuses, in-flight work is lost."""
        self._shut(ReplicaState.DEAD)

    def restart(self) -> None:
        """The container restarts in place: same port if still free, fresh process, another cold start."""
        self._shut(ReplicaState.STOPPED)
        with self._lock:
            self.sleep_level = 0
            self.metrics = self._new_metrics()
            self.engine = Engine(self.profile, self.metrics, self.clock, self.scheduling_policy)
        try:
            self.start()
        except OSError:  # someone took the port meanwhile: come back on another one
            self.port = 0
            self.start()
        with self._lock:
            # Counted once the new process is loading: whoever sees the count also finds its cold start on
            # the clock (a stepped clock advanced in between would otherwise never reach it).
            self.restarts += 1

    def _shut(self, final_state: ReplicaState) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            server, self._server = self._server, None
            was_serving = self.state is ReplicaState.READY
            self.state = final_state
            self._ready.clear()
        if server is not None:
            if was_serving:
                server.shutdown()
            server.drop_connections()
            server.server_close()
        self.engine.stop()

    # --- sleep mode (dev endpoints) --------------------------------------------------------
    def sleep(self, level: int) -> None:
        self.sleep_level = level
        self.metrics.set_sleep_level(level)
        self.engine.pause()

    def wake_up(self) -> None:
        self.sleep_level = 0
        self.metrics.set_sleep_level(0)
        if not self.faults.hung:
            self.engine.resume()

    def set_hung(self, hung: bool) -> None:
        self.faults.hung = hung
        if hung:
            self.engine.pause()
        elif self.sleep_level == 0:
            self.engine.resume()

    def __repr__(self) -> str:
        return f"<EmulatedReplica {self.name} {self.base_url} {self.state.value}>"


def wait_until(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    """Poll `predicate` until it is true or `timeout` wall seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
