"""The sandbox route: a small HTTP gateway that splits traffic between pools by the route's weights.

It plays the Gateway API implementation (Envoy), or Istio's ingress gateway when the sandbox route is
a VirtualService, in front of the pools: each request picks a backend pool with probability
weight / total weight (read from the route on every request, so a patch takes effect at once), then the Ready replica of that pool with the fewest requests in
flight. The `model` field is rewritten to the chosen pool's served model, as an inference gateway
does for fallback pools. No Ready replica in the chosen pool answers 503 like Envoy's
"no healthy upstream".

With `FallbackRouting` (the gateway's own settings, as an inference gateway's operator configures it)
the gateway also knows which backend is the route's fallback pool and which request classes may go
there (`x-request-class`, `standard` when absent): a request of another class never goes to the
fallback (a production route gives it a rule of its own, e.g. matched on that header, with the primary
alone). With `spill_after_s` it spills over per request, at any weights (the fallback's 0 included, as
an inference gateway falls back on a per-request timeout): an eligible request the weights left on a
primary whose chosen replica would start it more than `spill_after_s` model seconds late goes to the
fallback's least-loaded replica instead (`scaling.engine.spillover`, the replay's rule). The wait is
estimated from the replica's waiting and running requests and its full-batch completion rate, as vLLM
exports them. A request of the priority class sent to a replica that runs vLLM's priority scheduling gets
the priority `PRIORITY_BY_CLASS` gives it, unless it states its own.
"""
from __future__ import annotations

import http.client
import json
import math
import random
import threading
from dataclasses import dataclass
from typing import Any

from scaling.engine.fallback import PRIORITY, STANDARD
from scaling.engine.spillover import queued_start_wait_s, spills

from sandbox.fleet import replica_capacity_rps
from sandbox.httpserver import QuietHandler, QuietHTTPServer
from sandbox.kube import resources as res
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from sandbox.replica import EmulatedReplica

UPSTREAM_TIMEOUT_S = 600.0
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}
CLASS_HEADER = "x-request-class"
# The vLLM request `priority` the gateway sets for a class on a replica that runs `--scheduling-policy
# priority` (lower is admitted first; a request without one has 0), unless the request sets its own.
PRIORITY_BY_CLASS = {PRIORITY: -1}


@dataclass(frozen=True)
class FallbackRouting:
    """Which route backend is the fallback pool, who may go there, and when a request spills to it."""

    namespace: str
    name: str  # the fallback pool's Deployment
    classes: frozenset[str] = frozenset({STANDARD})  # request classes that may fall back
    spill_after_s: float | None = None  # model seconds of start delay on the primary; None: the weights alone

    def __post_init__(self) -> None:
        if self.spill_after_s is not None and not self.spill_after_s > 0.0:
            raise ValueError("spill_after_s must be positive (None: no spill-over)")

    def is_fallback(self, pool: PoolSpec) -> bool:
        return (pool.namespace, pool.name) == (self.namespace, self.name)


class Gateway:
    def __init__(self, cluster: SandboxCluster, host: str = "127.0.0.1", port: int = 0,
                 fallback: FallbackRouting | None = None) -> None:
        self.cluster = cluster
        self.host = host
        self.fallback = fallback
        self.spilled = 0  # requests sent to the fallback by spill-over (not by the weights)
        self._httpd = _Server((host, port), _Handler)
        self._httpd.gateway = self
        self._random = random.Random()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._httpd.server_port}"

    def start(self) -> Gateway:
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                         name="sandbox-gateway", daemon=True).start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def pick_pool(self, weights: list[tuple[PoolSpec, int]]) -> PoolSpec | None:
        weighted = [(pool, weight) for pool, weight in weights if weight > 0]
        if not weighted:
            return None
        pools, chances = zip(*weighted)
        return self._random.choices(pools, weights=chances)[0]

    def route(self, request_class: str = STANDARD) -> tuple[PoolSpec | None, EmulatedReplica | None]:
        """The pool and replica for one request: by the route's weights, then spill-over (module doc)."""
        weights = self.cluster.route_weights()
        fallback = self.fallback
        if fallback is None:
            pool = self.pick_pool(weights)
            return pool, self.pick_replica(pool) if pool else None
        eligible = request_class in fallback.classes
        if not eligible:
            weights = [(pool, weight) for pool, weight in weights if not fallback.is_fallback(pool)]
            if not any(weight > 0 for _, weight in weights):  # its own rule keeps the primary at any split
                weights = [(pool, 1) for pool, _ in weights]
        pool = self.pick_pool(weights)
        replica = self.pick_replica(pool) if pool else None
        if pool is None or fallback.is_fallback(pool) or fallback.spill_after_s is None:
            return pool, replica
        spare = next(((spec, weight) for spec, weight in weights if fallback.is_fallback(spec)), None)
        if spare is not None and spills(eligible=eligible, start_wait_s=self.start_wait_s(pool, replica),
                                        after_s=fallback.spill_after_s):
            spare_replica = self.pick_replica(spare[0])
            if spare_replica is not None:
                with self._lock:
                    self.spilled += 1
                return spare[0], spare_replica
        return pool, replica

    @staticmethod
    def start_wait_s(pool: PoolSpec, replica: EmulatedReplica | None) -> float:
        """Model seconds `replica` would keep a new request waiting (none ready: forever)."""
        if replica is None:
            return math.inf
        running, waiting = replica.engine.load()
        return queued_start_wait_s(waiting, running, pool.profile.max_num_seqs,
                                   replica_capacity_rps(pool.profile, utilisation=1.0))

    def pick_replica(self, pool: PoolSpec) -> EmulatedReplica | None:
        ready = [replica for replica in self.cluster.ready_replicas(pool.namespace, pool.name)
                 if self._routable(pool.namespace, replica.name)]
        return min(ready, key=lambda r: r.engine.in_flight) if ready else None

    def _routable(self, namespace: str, pod: str) -> bool:
        """A pod a circuit breaker labelled `headroom.io/ejected=true` is out of the endpoints, as a Service
        whose selector excludes the label would leave it out."""
        found = self.cluster.store.find(res.PODS, namespace, pod)
        return found is None or (found.get("metadata", {}).get("labels") or {}).get("headroom.io/ejected") != "true"


class _Server(QuietHTTPServer):
    gateway: Gateway


class _Handler(QuietHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/v1/models":
            pools = [pool for pool, _ in self.server.gateway.cluster.route_weights()]
            cards = [{"id": pool.served_model, "object": "model", "owned_by": "vllm"} for pool in pools]
            self._reply(200, {"object": "list", "data": cards})
        else:
            self._reply(404, {"error": {"message": "Not Found", "code": 404}})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        gateway = self.server.gateway
        request_class = (self.headers.get(CLASS_HEADER) or STANDARD).strip().lower()
        pool, replica = gateway.route(request_class)
        if pool is None or replica is None:
            self._reply(503, "no healthy upstream")
            return
        try:
            document = json.loads(body or b"{}")
            if isinstance(document, dict):
                document["model"] = pool.served_model
                if request_class in PRIORITY_BY_CLASS and replica.scheduling_policy == "priority":
                    document.setdefault("priority", PRIORITY_BY_CLASS[request_class])
                body = json.dumps(document).encode()
        except json.JSONDecodeError:
            pass  # let the replica answer the bad request itself
        self._proxy(replica, pool, body)

    def _proxy(self, replica: EmulatedReplica, pool: PoolSpec, body: bytes) -> None:
        upstream = http.client.HTTPConnection(replica.host, replica.port, timeout=UPSTREAM_TIMEOUT_S)
        try:
            upstream.request("POST", self.path, body=body,
                             headers={"Content-Type": "application/json", "Content-Length": str(len(body))})
            response = upstream.getresponse()
        except OSError:
            upstream.close()
            self._reply(503, "upstream connect error or disconnect/reset before headers")
            return
        try:
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in HOP_HEADERS:
                    self.send_header(key, value)
            self.send_header("x-sandbox-pool", pool.name)
            self.send_header("x-sandbox-pod", replica.name)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while chunk := response.read1(65536):
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True  # either side went away mid-answer
        finally:
            upstream.close()

    def _reply(self, status: int, payload: Any) -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
