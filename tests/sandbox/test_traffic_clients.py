"""The traffic generator (sandbox/traffic.py) and its client process (sandbox/traffic_clients.py) against
scripted servers on loopback: retries and their backoff, per-attempt timeouts, streamed time to first
token, the due-time clock, stop() mid-run, failures said by wait(), and requests in flight without a
thread each."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiohttp import web

from sandbox.traffic import ClientOptions, TraceRequest, TrafficGenerator

Script = Callable[[BaseHTTPRequestHandler, int, dict], None]  # handler, 0-based call number, request body


@contextmanager
def scripted(script: Script) -> Iterator[tuple[str, list[float]]]:
    """A server whose answers `script` writes; yields its URL and when each request arrived."""
    arrivals: list[float] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                arrivals.append(time.monotonic())
                call = len(arrivals) - 1
            script(self, call, body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", arrivals
    finally:
        server.shutdown()
        server.server_close()


def answer(handler: BaseHTTPRequestHandler, status: int, payload: bytes = b"{}", pool: str | None = None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(payload)))
    if pool:
        handler.send_header("x-sandbox-pool", pool)
    handler.end_headers()
    handler.wfile.write(payload)


def stream(handler: BaseHTTPRequestHandler, events: list[tuple[float, bytes]], pool: str = "big") -> None:
    """A server-sent-event answer, each event after its delay (chunked, as the gateway relays it)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.send_header("x-sandbox-pool", pool)
    handler.end_headers()
    for delay_s, event in events:
        time.sleep(delay_s)
        data = b"data: " + event + b"\n\n"
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        handler.wfile.flush()
    handler.wfile.write(b"0\r\n\r\n")


def test_a_5xx_is_retried_with_doubling_backoff_until_it_succeeds() -> None:
    def script(handler: BaseHTTPRequestHandler, call: int, body: dict) -> None:
        answer(handler, 503 if call < 2 else 200, pool="big")

    options = ClientOptions(retries=2, backoff_s=0.2)
    with scripted(script) as (url, arrivals):
        report = TrafficGenerator(url, [TraceRequest(0.0, 10, 1)], options=options).run()
    assert (report.sent, report.succeeded, report.failed, report.retries) == (1, 1, 0, 2)
    assert report.statuses == {"200": 1}
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]
    assert gaps[0] == pytest.approx(0.2, abs=0.1)
    assert gaps[1] == pytest.approx(0.4, abs=0.1)  # doubled
    [record] = report.records
    assert record.pool == "big"
    assert record.e2e_s is not None and record.e2e_s >= 0.6  # the backoff is part of what the user waited


def test_a_4xx_is_not_retried_and_the_last_5xx_is_the_outcome() -> None:
    def script(handler: BaseHTTPRequestHandler, call: int, body: dict) -> None:
        answer(handler, 400 if body["max_tokens"] == 1 else 502)

    options = ClientOptions(retries=2, backoff_s=0.01)
    trace = [TraceRequest(0.0, 10, 1), TraceRequest(0.0, 10, 2)]
    with scripted(script) as (url, arrivals):
        report = TrafficGenerator(url, trace, options=options).run()
    assert len(arrivals) == 1 + 3  # the 400 once; the 502 on every attempt
    assert (report.failed, report.retries) == (2, 2)
    assert report.statuses == {"400": 1, "502": 1}
    assert all(record.e2e_s is None for record in report.records)


def test_the_request_body_is_the_trace_request() -> None:
    bodies: list[dict] = []

    def script(handler: BaseHTTPRequestHandler, call: int, body: dict) -> None:
        bodies.append(body)
        answer(handler, 200)

    options = ClientOptions(max_prompt_tokens=50, model="m")
    with scripted(script) as (url, _):
        TrafficGenerator(url + "/", [TraceRequest(0.0, 80, 0)], options=options).run()
    assert bodies == [{"model": "m", "prompt": "hi " * 50, "max_tokens": 1, "ignore_eos": True, "stream": False}]


def test_the_timeout_is_per_attempt_and_between_bytes_not_for_a_whole_stream() -> None:
    """A stream that keeps sending is not cut off by the timeout; one that stalls past it is, and retried."""
    def script(handler: BaseHTTPRequestHandler, call: int, body: dict) -> None:
        if body["max_tokens"] == 1:  # tokens every 0.2 s for 1.6 s in all, under a 1 s timeout
            stream(handler, [(0.2, b'{"i": %d}' % i) for i in range(8)] + [(0.0, b"[DONE]")])
        else:  # one token, then silence past the timeout
            stream(handler, [(0.0, b'{"i": 0}'), (2.5, b"[DONE]")])

    options = ClientOptions(timeout_s=1.0, retries=1, backoff_s=0.01, stream=True)
    trace = [TraceRequest(0.0, 10, 1), TraceRequest(0.0, 10, 2)]
    with scripted(script) as (url, arrivals):
        report = TrafficGenerator(url, trace, options=options).run()
    assert report.statuses == {"200": 1, "timeout": 1}
    assert (report.timeouts, report.retries) == (2, 1)
    assert len(arrivals) == 3
    [ok] = [record for record in report.records if record.outcome == "200"]
    assert ok.e2e_s is not None and ok.e2e_s >= 1.5


def test_a_streamed_answer_measures_the_time_to_its_first_token() -> None:
    def script(handler: BaseHTTPRequestHandler, call: int, body: dict) -> None:
        stream(handler, [(0.2, b'{"first": true}'), (0.4, b'{"last": true}'), (0.0, b"[DONE]")], pool="small")

    options = ClientOptions(stream=True)
    with scripted(script) as (url, _):
        report = TrafficGenerator(url, [TraceRequest(0.0, 10, 2)], options=options).run()
    [record] = report.records
    assert record.outcome == "200" and record.pool == "small"
    assert record.ttft_s == pytest.approx(0.2, abs=0.1)
    assert record.e2e_s == pytest.approx(0.6, abs=0.15)


def test_an_unstreamed_answer_has_no_time_to_first_token() -> None:
    with scripted(lambda handler, call, body: answer(handler, 200, pool="big")) as (url, _):
        [record] = TrafficGenerator(url, [TraceRequest(0.0, 10, 2)]).run().records
    assert (record.outcome, record.ttft_s, record.pool) == ("200", None, "big")


def test_a_refused_connection_is_retried_then_reported() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = ClientOptions(retries=2, backoff_s=0.01)
    report = TrafficGenerator(f"http://127.0.0.1:{port}", [TraceRequest(0.0, 10, 1)], options=options).run()
    assert report.statuses == {"connection_error": 1}
    assert (report.retries, report.timeouts, report.failed) == (2, 0, 1)


def test_requests_are_sent_when_due_on_the_compressed_clock() -> None:
    with scripted(lambda handler, call, body: answer(handler, 200)) as (url, arrivals):
        trace = [TraceRequest(10.0, 5, 1), TraceRequest(11.0, 5, 1), TraceRequest(13.0, 5, 1)]
        report = TrafficGenerator(url, trace, speed=4).run()
    assert report.succeeded == 3
    offsets = [arrival - arrivals[0] for arrival in arrivals]
    assert offsets == pytest.approx([0.0, 0.25, 0.75], abs=0.1)  # from the first request, at 4x


def test_stop_mid_run_stops_sending_and_abandons_what_is_in_flight() -> None:
    release = threading.Event()

    def script(handler: BaseHTTPRequestHandler, call: int, body: dict) -> None:
        if call == 0:
            answer(handler, 200)
        else:
            release.wait(5)  # hangs until the test ends

    trace = [TraceRequest(0.0, 5, 1), TraceRequest(0.1, 5, 1), TraceRequest(60.0, 5, 1)]
    with scripted(script) as (url, arrivals):
        traffic = TrafficGenerator(url, trace, options=ClientOptions(backoff_s=5.0)).start()
        deadline = time.monotonic() + 10
        while len(arrivals) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)  # the first answer is read
        assert traffic.sending()  # the third request is due in a minute
        stopped_at = time.monotonic()
        report = traffic.stop()
        took_s = time.monotonic() - stopped_at
        release.set()
    assert took_s < 2.0
    assert not traffic.sending()
    assert (report.sent, report.succeeded, report.failed) == (2, 1, 0)  # the hung one: sent, not recorded
    assert len(arrivals) == 2
    assert traffic.wait(timeout=1).sent == 2
    assert not any(thread.name.startswith("traffic") and thread.is_alive() for thread in threading.enumerate())
    assert traffic._process is not None and traffic._process.poll() is not None  # the client process ended


def test_stop_before_start_sends_nothing() -> None:
    with scripted(lambda handler, call, body: answer(handler, 200)) as (url, arrivals):
        traffic = TrafficGenerator(url, [TraceRequest(0.0, 5, 1)])
        traffic.stop()
        report = traffic.start().wait(timeout=5)
    assert (report.sent, arrivals) == (0, [])


def test_a_trace_that_fails_makes_wait_raise() -> None:
    def trace() -> Iterator[TraceRequest]:
        yield TraceRequest(0.0, 5, 1)
        raise ValueError("row 2: prompt tokens is not a number")

    with scripted(lambda handler, call, body: answer(handler, 200)) as (url, _):
        traffic = TrafficGenerator(url, trace()).start()
        with pytest.raises(RuntimeError, match="traffic generator failed") as failure:
            traffic.wait(timeout=5)
    assert "prompt tokens" in str(failure.value.__cause__)


def test_requests_in_flight_do_not_each_take_a_thread() -> None:
    """300 requests held open together: two threads here and a client process of two or three, not 300
    threads. The server is an asyncio one too, so that this process's thread count is the client's."""
    held = 300
    arrived = 0
    everyone_in = asyncio.Event()
    ready = threading.Event()
    state: dict = {}

    async def handle(request: web.Request) -> web.Response:
        nonlocal arrived
        await request.read()
        arrived += 1
        if arrived == held:
            everyone_in.set()
        await everyone_in.wait()
        await asyncio.sleep(0.5)  # while the test counts threads
        return web.Response(text="{}", headers={"x-sandbox-pool": "big"})

    async def serve() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["port"] = runner.addresses[0][1]
        state["loop"], state["done"] = asyncio.get_running_loop(), asyncio.Event()
        ready.set()
        await state["done"].wait()
        await runner.cleanup()

    server = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    server.start()
    assert ready.wait(5)
    try:
        before = threading.active_count()
        traffic = TrafficGenerator(f"http://127.0.0.1:{state['port']}",
                                   [TraceRequest(0.0, 5, 1)] * held).start()
        deadline = time.monotonic() + 10
        while arrived < held and time.monotonic() < deadline:
            time.sleep(0.02)
        during = threading.active_count()
        assert traffic._process is not None
        with open(f"/proc/{traffic._process.pid}/status") as status:
            client_threads = int(next(line for line in status if line.startswith("Threads:")).split()[1])
        report = traffic.wait(timeout=10)
    finally:
        state["loop"].call_soon_threadsafe(state["done"].set)
        server.join(5)
    assert arrived == held
    assert during - before <= 2  # the dispatcher and the reader
    assert client_threads <= 3  # the client process: its event loop, its stdin reader (and one of asyncio's)
    assert (report.sent, report.succeeded) == (held, held)


@pytest.mark.parametrize("field, value", [("max_in_flight", 0), ("timeout_s", 0.0), ("retries", -1),
                                          ("backoff_s", -0.5), ("max_prompt_tokens", 0)])
def test_client_options_refuse_values_that_could_not_work(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        ClientOptions(**{field: value})
