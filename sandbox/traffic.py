"""The traffic generator: replays a request trace against an OpenAI-compatible URL, like clients do.

Each trace request (arrival second, prompt tokens, output tokens) becomes a `/v1/completions`
call with a prompt of that many words and `max_tokens` = output tokens (`ignore_eos`, so exactly
that many come back). `speed` compresses the trace's time; `rate` scales the request rate
(0.5 drops every other request on average, 3 sends each three times). Clients time out and retry
with backoff like real ones, so an overloaded pool sees the retries pile up. `report()` says what
the clients saw.
"""
from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import requests

RETRYABLE_STATUS = {500, 502, 503, 504}


@dataclass(frozen=True)
class TraceRequest:
    t_s: float  # seconds from the trace start
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class ClientOptions:
    timeout_s: float = 60.0  # per attempt, wall seconds
    retries: int = 2  # extra attempts after a timeout, connection error or 5xx
    backoff_s: float = 0.5  # doubled on each retry
    # Concurrent client connections. Users arrive open-loop: a cap that the surge reaches holds requests
    # on the client, where no server metric sees them queue, so it sits well above any scenario's need.
    max_in_flight: int = 2048
    model: str = "sandbox"  # the gateway rewrites it to the chosen pool's model
    max_prompt_tokens: int = 16_000  # longer prompts are clipped to keep the emulator's context valid
    stream: bool = False  # stream the answer, so the client sees its time to first token


@dataclass(frozen=True)
class RequestRecord:
    """What the client saw of one request: when it was due (trace seconds) and how it ended."""

    t_s: float
    outcome: str  # "200", another status, "timeout" or "connection_error"
    e2e_s: float | None  # due time to the last byte of the answer, wall seconds; None unless "200"
    ttft_s: float | None  # due time to the first token (streamed answers only)
    pool: str | None = None  # the pool that answered (the sandbox gateway's x-sandbox-pool), when one did


@dataclass
class TrafficReport:
    sent: int = 0
    succeeded: int = 0
    failed: int = 0
    retries: int = 0
    timeouts: int = 0  # attempts that timed out
    statuses: Counter[str] = field(default_factory=Counter)  # final outcome per request
    latencies_s: list[float] = field(default_factory=list)  # due time to success, wall seconds
    records: list[RequestRecord] = field(default_factory=list)  # one per finished request

    def quantile(self, q: float) -> float | None:
        return float(np.quantile(self.latencies_s, q)) if self.latencies_s else None

    def summary(self) -> dict[str, Any]:
        return {"sent": self.sent, "succeeded": self.succeeded, "failed": self.failed,
                "retries": self.retries, "timeouts": self.timeouts, "statuses": dict(self.statuses),
                "latency_p50_s": self.quantile(0.5), "latency_p95_s": self.quantile(0.95),
                "latency_p99_s": self.quantile(0.99)}


def from_rows(rows: Iterable[tuple[float, int, int]]) -> Iterator[TraceRequest]:
    for t_s, prompt_tokens, output_tokens in rows:
        yield TraceRequest(float(t_s), int(prompt_tokens), int(output_tokens))


def from_workload(workload: Any, seed: int = 0) -> Iterator[TraceRequest]:
    """Requests from a `scaling.sim` workload (a request log, or a rate file sampled into one)."""
    trace = workload.to_requests(seed)
    for t_s, prompt, output in zip(trace.arrival_s, trace.prompt_tokens, trace.output_tokens):
        yield TraceRequest(float(t_s), int(prompt), int(output))


def load_trace_file(path: str, seed: int = 0) -> Iterator[TraceRequest]:
    """Requests from a trace file, through the simulator's loaders (Azure, Mooncake, ServeGen)."""
    from scaling.sim.loaders import load_trace

    return from_workload(load_trace(path), seed)


def scale_rate(trace: Iterable[TraceRequest], rate: float, seed: int = 0) -> Iterator[TraceRequest]:
    """Thin (rate < 1) or repeat (rate > 1) requests, keeping their arrival times."""
    chooser = random.Random(seed)
    for request in trace:
        copies = int(rate) + (1 if chooser.random() < rate - int(rate) else 0)
        for _ in range(copies):
            yield request


class TrafficGenerator:
    def __init__(self, url: str, trace: Iterable[TraceRequest], *, speed: float = 1.0, rate: float = 1.0,
                 options: ClientOptions | None = None, seed: int = 0) -> None:
        self.url = url.rstrip("/") + "/v1/completions"
        self.trace = scale_rate(trace, rate, seed) if rate != 1.0 else iter(trace)
        self.speed = speed
        self.options = options or ClientOptions()
        self._report = TrafficReport()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self.options.max_in_flight, thread_name_prefix="traffic")
        self._dispatcher: threading.Thread | None = None

    def start(self) -> TrafficGenerator:
        self._dispatcher = threading.Thread(target=self._dispatch, name="traffic-dispatch", daemon=True)
        self._dispatcher.start()
        return self

    def sending(self) -> bool:
        """Whether requests of the trace are still to be sent (a finite trace ends)."""
        return self._dispatcher is not None and self._dispatcher.is_alive()

    def wait(self, timeout: float | None = None) -> TrafficReport:
        """Wait until every request was sent and answered (or gave up)."""
        if self._dispatcher is not None:
            self._dispatcher.join(timeout)
        self._pool.shutdown(wait=True)
        return self.report()

    def run(self) -> TrafficReport:
        return self.start().wait()

    def stop(self) -> TrafficReport:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        return self.report()

    def report(self) -> TrafficReport:
        with self._lock:
            copy = TrafficReport(**{**self._report.__dict__})
            copy.statuses = Counter(self._report.statuses)
            copy.latencies_s = list(self._report.latencies_s)
            copy.records = list(self._report.records)
            return copy

    # --- sending ---------------------------------------------------------------------------
    def _dispatch(self) -> None:
        started = time.monotonic()
        first_t: float | None = None
        for request in self.trace:
            first_t = request.t_s if first_t is None else first_t
            due = started + (request.t_s - first_t) / self.speed
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
            with self._lock:
                self._report.sent += 1
            try:
                self._pool.submit(self._send, request, due)
            except RuntimeError:
                return  # stopped

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def _send(self, request: TraceRequest, due: float | None = None) -> None:
        prompt_tokens = max(1, min(request.prompt_tokens, self.options.max_prompt_tokens))
        body = {"model": self.options.model, "prompt": "hi " * prompt_tokens,
                "max_tokens": max(1, request.output_tokens), "ignore_eos": True, "stream": self.options.stream}
        # A user's clock starts when the request is due, not when a client thread is free to send it.
        started = time.monotonic() if due is None else min(due, time.monotonic())
        outcome, first_token_at, pool = "error", None, None
        for attempt in range(self.options.retries + 1):
            if attempt:
                with self._lock:
                    self._report.retries += 1
                if self._stop.wait(self.options.backoff_s * 2 ** (attempt - 1)):
                    break
            outcome, first_token_at, pool = self._attempt(body)
            if outcome == "200" or (outcome.isdigit() and int(outcome) not in RETRYABLE_STATUS):
                break
        finished = time.monotonic()
        succeeded = outcome == "200"
        record = RequestRecord(request.t_s, outcome, finished - started if succeeded else None,
                               first_token_at - started if succeeded and first_token_at is not None else None, pool)
        with self._lock:
            self._report.statuses[outcome] += 1
            self._report.records.append(record)
            if succeeded:
                self._report.succeeded += 1
                self._report.latencies_s.append(finished - started)
            else:
                self._report.failed += 1

    def _attempt(self, body: dict[str, Any]) -> tuple[str, float | None, str | None]:
        """One try: its status (or why none came), when streamed when the first token arrived, and the
        pool that answered (the gateway's x-sandbox-pool header)."""
        try:
            with self._session().post(self.url, json=body, timeout=self.options.timeout_s,
                                      stream=self.options.stream) as response:
                pool = response.headers.get("x-sandbox-pool")
                if not self.options.stream or response.status_code != 200:
                    response.content  # noqa: B018 - read the whole answer, as a client does
                    return str(response.status_code), None, pool
                first_token_at = None
                for line in response.iter_lines():
                    if first_token_at is None and line.startswith(b"data: {"):
                        first_token_at = time.monotonic()
                return "200", first_token_at, pool
        except requests.Timeout:
            with self._lock:
                self._report.timeouts += 1
            self._local.session = None  # the connection is in an unknown state
            return "timeout", None, None
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
            self._local.session = None  # refused, reset, or an answer cut off mid-stream
            return "connection_error", None, None
