"""A Prometheus (or the proxy in front of it) that answers, but badly: every such answer reads as unknown,
never as zero load, never breaks the whole read, and names what was wrong in `SignalRead.errors`."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from scaling.drivers.prometheus import QUERIES, PrometheusConfig, PrometheusSignalSource
from scaling.drivers.signals import PoolSelector

LABELS = {"namespace": "inference", "deployment": "vllm-chat"}
OTHER = {"namespace": "inference", "deployment": "vllm-code"}


def vector(at: float, value: str, *labels: dict[str, str]) -> dict:
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": dict(m), "value": [at, value]} for m in labels]}}


def healthy(query: str, at: float) -> tuple[int, bytes]:
    """Both pools scraped 5 s ago, 3 of everything."""
    value = str(at - 5) if "timestamp(" in query else "3"
    return 200, json.dumps(vector(at, value, LABELS, OTHER)).encode()


class FakePrometheus:
    """Answers `/api/v1/query` with `answer(query, evaluation time)` -> (HTTP status, body)."""

    def __init__(self) -> None:
        self.answer: Callable[[str, float], tuple[int, bytes]] = healthy
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server hook
                params = {key: values[0] for key, values in parse_qs(urlparse(self.path).query).items()}
                status, body = fake.answer(params["query"], float(params.get("time", time.time())))
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if body.startswith(b"<") else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.request_queue_size = 64
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus(settings) -> Iterator[FakePrometheus]:  # noqa: ANN001
    settings.CLUSTER_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    fake = FakePrometheus()
    yield fake
    fake.close()


def read(prometheus: FakePrometheus):  # noqa: ANN201
    source = PrometheusSignalSource(PrometheusConfig(prometheus.url, timeout_s=5.0, deadline_s=8.0))
    return source.read([PoolSelector("chat", LABELS), PoolSelector("code", OTHER)])


def only_queue_depth(bad: Callable[[float], tuple[int, bytes]]) -> Callable[[str, float], tuple[int, bytes]]:
    queue_depth = QUERIES["queue_depth"].split("(")[0]  # "sum by ": the only query starting so and waiting
    return lambda query, at: bad(at) if query.startswith(queue_depth) and "waiting" in query \
        and "delta(" not in query and "pod)" not in query else healthy(query, at)


def test_a_healthy_answer_is_read(prometheus: FakePrometheus) -> None:
    signals = read(prometheus)
    assert signals.errors == {} and signals["chat"].queue_depth.value == 3.0


BAD_ANSWERS = {
    "a 200 that says error": (lambda at: (200, json.dumps({"status": "error", "errorType": "execution",
                                                           "error": "many-to-many matching not allowed"}).encode()),
                              "many-to-many matching not allowed"),
    "a scalar": (lambda at: (200, json.dumps({"status": "success", "data": {"resultType": "scalar",
                                                                             "result": [at, "3"]}}).encode()),
                 "got resultType 'scalar'"),
    "a string": (lambda at: (200, json.dumps({"status": "success", "data": {"resultType": "string",
                                                                             "result": [at, "3"]}}).encode()),
                 "got resultType 'string'"),
    "a matrix": (lambda at: (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": LABELS, "values": [[at, "3"]]}]}}).encode()), "got resultType 'matrix'"),
    "a partial answer": (lambda at: (200, json.dumps(vector(at, "1", LABELS) | {
        "warnings": ["partial response: store eu-2 unavailable"]}).encode()), "store eu-2 unavailable"),
    "a proxy's HTML 502": (lambda at: (502, b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>"
                                            b"502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>"),
                           "HTTP 502, not Prometheus' JSON (a proxy's page?): 502 Bad Gateway"),
    "a body cut mid-JSON": (lambda at: (200, json.dumps(vector(at, "3", LABELS, OTHER)).encode()[:60]), "cut short"),
    "an answer an hour old": (lambda at: (200, json.dumps(vector(at - 3600, "3", LABELS, OTHER)).encode()),
                              "-3600 s from the instant asked"),
}


@pytest.mark.parametrize("case", BAD_ANSWERS)
def test_a_bad_answer_leaves_its_signal_unknown_and_says_why(prometheus: FakePrometheus, case: str) -> None:
    bad, reason = BAD_ANSWERS[case]
    prometheus.answer = only_queue_depth(bad)
    signals = read(prometheus)  # never raises: one bad answer is one unknown signal
    assert not signals["chat"].queue_depth.is_known and not signals["code"].queue_depth.is_known  # never zero
    assert reason in signals.errors["queue_depth"], signals.errors
    assert "<" not in signals.errors["queue_depth"]  # a sentence, not the proxy's markup
    assert signals["chat"].running_requests.value == 3.0 and set(signals.errors) == {"queue_depth"}  # the rest read


def test_an_answer_an_hour_old_everywhere_is_not_fresh(prometheus: FakePrometheus) -> None:
    """A cache in front of Prometheus serving yesterday's... hour-old answers, scrape times included: the
    readings' ages computed inside that answer look like 5 s; they are an hour."""
    prometheus.answer = lambda query, at: healthy(query, at - 3600)
    signals = read(prometheus)
    assert not any(reading.is_known for reading in signals["chat"].readings().values())
    assert "-3600 s from the instant asked" in signals.errors["queue_depth"]


def test_prometheus_own_annotations_leave_the_answer_whole(prometheus: FakePrometheus) -> None:
    """Prometheus 2.46+ returns notes on the expression in `warnings` (a histogram's buckets fixed for
    monotonicity is common on real vLLM histograms): not a store missing, so the answer is used."""
    note = "PromQL warning: input to histogram_quantile needed to be fixed for monotonicity (and may give inaccurate results)"
    prometheus.answer = only_queue_depth(lambda at: (200, json.dumps(vector(at, "3", LABELS, OTHER) | {
        "warnings": [note]}).encode()))
    signals = read(prometheus)
    assert signals["chat"].queue_depth.value == 3.0 and signals.errors == {}


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
def test_a_value_that_is_not_a_number_is_unknown(prometheus: FakePrometheus, value: str) -> None:
    prometheus.answer = only_queue_depth(lambda at: (200, json.dumps(vector(at, value, LABELS, OTHER)).encode()))
    signals = read(prometheus)
    assert signals["chat"].queue_depth.value is None and not signals["chat"].queue_depth.is_known
