"""One read of a cluster's Prometheus fits the tick: its queries run side by side under one deadline,
and a server too slow for it leaves the signals unknown instead of stalling the loop for 19 × 5 s."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scaling.drivers.prometheus import QUERIES, PrometheusConfig, PrometheusSignalSource
from scaling.drivers.signals import PoolSelector


class _SlowPrometheus(BaseHTTPRequestHandler):
    delay_s = 3.0

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook
        time.sleep(self.delay_s)
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowPrometheus)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_a_slow_prometheus_costs_one_deadline_not_a_timeout_per_query(slow_prometheus: str) -> None:
    source = PrometheusSignalSource(PrometheusConfig(slow_prometheus, timeout_s=5.0, deadline_s=1.0))
    started = time.monotonic()
    read = source.read([PoolSelector("chat", {"model_name": "llama"})])
    elapsed = time.monotonic() - started
    # Sequential queries with a 5-s timeout each would take 19 × 3 s here; one deadline bounds the read.
    assert elapsed < 2.0
    assert set(QUERIES) <= set(read.errors) and "deadline of 1 s" in read.errors["queue_depth"]
    assert not read.pools["chat"].queue_depth.is_known  # unknown, never zero


def test_answers_within_the_deadline_are_used(slow_prometheus: str) -> None:
    _SlowPrometheus.delay_s = 0.2
    try:
        source = PrometheusSignalSource(PrometheusConfig(slow_prometheus, timeout_s=5.0, deadline_s=3.0))
        started = time.monotonic()
        read = source.read([PoolSelector("chat", {"model_name": "llama"})])
        # 19 queries of 0.2 s each, 8 at a time: well under the sum of their durations.
        assert time.monotonic() - started < 2.0 and read.errors == {}
    finally:
        _SlowPrometheus.delay_s = 3.0
