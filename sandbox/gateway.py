"""The sandbox route: a small HTTP gateway that splits traffic between pools by the route's weights.

It plays the Gateway API implementation (Envoy), or Istio's ingress gateway when the sandbox route is
a VirtualService, in front of the pools: each request picks a backend pool with probability
weight / total weight (read from the route on every request, so a patch takes effect at once), then the Ready replica of that pool with the fewest requests in
flight. The `model` field is rewritten to the chosen pool's served model, as an inference gateway
does for fallback pools. No Ready replica in the chosen pool answers 503 like Envoy's
"no healthy upstream".
"""
from __future__ import annotations

import http.client
import json
import random
import threading
from typing import Any

from sandbox.httpserver import QuietHandler, QuietHTTPServer
from sandbox.kube import resources as res
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from sandbox.replica import EmulatedReplica

UPSTREAM_TIMEOUT_S = 600.0
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}


class Gateway:
    def __init__(self, cluster: SandboxCluster, host: str = "127.0.0.1", port: int = 0) -> None:
        self.cluster = cluster
        self.host = host
        self._httpd = _Server((host, port), _Handler)
        self._httpd.gateway = self
        self._random = random.Random()

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

    def pick_pool(self) -> PoolSpec | None:
        weighted = [(pool, weight) for pool, weight in self.cluster.route_weights() if weight > 0]
        if not weighted:
            return None
        pools, weights = zip(*weighted)
        return self._random.choices(pools, weights=weights)[0]

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
        pool = gateway.pick_pool()
        replica = gateway.pick_replica(pool) if pool else None
        if pool is None or replica is None:
            self._reply(503, "no healthy upstream")
            return
        try:
            document = json.loads(body or b"{}")
            if isinstance(document, dict):
                document["model"] = pool.served_model
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
