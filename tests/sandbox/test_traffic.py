"""The sandbox route (gateway) and the traffic generator, over real HTTP."""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from kubernetes import client

from sandbox.gateway import Gateway
from sandbox.kube.cluster import SandboxCluster
from sandbox.traffic import ClientOptions, TrafficGenerator, from_rows, load_trace_file

NS = "sandbox"
ROUTE = ("gateway.networking.k8s.io", "v1", NS, "httproutes", "sandbox-route")


@pytest.fixture
def gateway(cluster: SandboxCluster) -> Iterator[Gateway]:
    running = Gateway(cluster).start()
    for pool in ("big", "small"):
        for replica in cluster.replicas(NS, pool):
            assert replica.wait_ready(timeout=5)
    yield running
    running.stop()


def _served_by(gateway: Gateway, count: int) -> set[str]:
    pools = set()
    for _ in range(count):
        response = requests.post(gateway.url + "/v1/completions", timeout=10,
                                 json={"model": "any", "prompt": "hi", "max_tokens": 1})
        assert response.status_code == 200
        assert response.json()["model"] == f"{response.headers['x-sandbox-pool']}-model"
        pools.add(response.headers["x-sandbox-pool"])
    return pools


def test_it_splits_traffic_by_httproute_weights(gateway: Gateway, cluster: SandboxCluster) -> None:
    assert _served_by(gateway, 5) == {"big"}
    custom = client.CustomObjectsApi(client.ApiClient(client.Configuration(host=cluster.url)))
    route = custom.get_namespaced_custom_object(*ROUTE)
    refs = route["spec"]["rules"][0]["backendRefs"]
    refs[0]["weight"], refs[1]["weight"] = 0, 100
    custom.patch_namespaced_custom_object(*ROUTE, {"spec": route["spec"]})
    assert _served_by(gateway, 5) == {"small"}


def test_it_streams_through_the_route(gateway: Gateway) -> None:
    response = requests.post(gateway.url + "/v1/chat/completions", stream=True, timeout=10, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True})
    events = [line for line in response.iter_lines() if line.startswith(b"data: ")]
    assert response.headers["x-sandbox-pool"] == "big"
    assert events[-1] == b"data: [DONE]"
    assert len(events) >= 3  # role, content, finish, [DONE]


def test_it_answers_503_when_the_chosen_pool_has_no_ready_replica(gateway: Gateway, cluster: SandboxCluster) -> None:
    apps = client.AppsV1Api(client.ApiClient(client.Configuration(host=cluster.url)))
    apps.patch_namespaced_deployment_scale("big", NS, {"spec": {"replicas": 0}})
    cluster.reconcile()
    response = requests.post(gateway.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=5)
    assert (response.status_code, response.text) == (503, "no healthy upstream")


def test_it_replays_a_trace_and_reports_what_clients_saw(gateway: Gateway) -> None:
    rows = [(i * 0.5, 10, 5) for i in range(12)]  # 6 trace seconds, compressed 6x to 1 s
    report = TrafficGenerator(gateway.url, from_rows(rows), speed=6).run()
    assert (report.sent, report.succeeded, report.failed) == (12, 12, 0)
    assert report.statuses == {"200": 12}
    median = report.quantile(0.5)
    assert median is not None and 0.09 <= median < 1.0  # 5 tokens at 20 ms, plus queueing behind 2 slots


def test_it_times_out_and_retries_against_a_hung_pool(gateway: Gateway, cluster: SandboxCluster) -> None:
    cluster.replicas(NS, "big")[0].set_hung(True)
    options = ClientOptions(timeout_s=0.3, retries=1, backoff_s=0.05)
    report = TrafficGenerator(gateway.url, from_rows([(0, 5, 2), (0.1, 5, 2)]), options=options).run()
    cluster.replicas(NS, "big")[0].set_hung(False)
    assert (report.sent, report.failed, report.retries, report.timeouts) == (2, 2, 2, 4)
    assert report.statuses == {"timeout": 2}


def test_it_replays_the_simulators_trace_loader(gateway: Gateway, traces_dir: Path) -> None:
    trace = itertools.islice(load_trace_file(str(traces_dir / "AzureLLMInferenceTrace_code.csv")), 15)
    report = TrafficGenerator(gateway.url, trace, speed=20, rate=1.0,
                              options=ClientOptions(max_prompt_tokens=2000)).run()
    assert report.sent == 15
    assert report.succeeded == 15


def test_a_request_waiting_for_a_free_connection_counts_that_wait(tmp_path: Path) -> None:
    """A user's clock starts when the request is due: held on the client, it is already late."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from sandbox.traffic import TraceRequest

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(0.4)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        trace = [TraceRequest(0.0, 10, 1), TraceRequest(0.0, 10, 1)]
        report = TrafficGenerator(f"http://127.0.0.1:{server.server_port}", trace,
                                  options=ClientOptions(max_in_flight=1, retries=0)).run()
    finally:
        server.shutdown()
    latencies = sorted(record.e2e_s for record in report.records)
    assert report.succeeded == 2
    assert latencies[0] == pytest.approx(0.4, abs=0.15)
    assert latencies[1] >= 0.75  # its own 0.4 s plus the 0.4 s it waited for the one connection
