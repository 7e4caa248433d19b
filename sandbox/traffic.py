"""The traffic generator: replays a request trace against an OpenAI-compatible URL, like clients do.

Each trace request (arrival second, prompt tokens, output tokens) becomes a `/v1/completions`
call with a prompt of that many words and `max_tokens` = output tokens (`ignore_eos`, so exactly
that many come back). `speed` compresses the trace's time; `rate` scales the request rate
(0.5 drops every other request on average, 3 sends each three times). Clients time out and retry
with backoff like real ones, so an overloaded pool sees the retries pile up. `report()` says what
the clients saw.

The clients are coroutines on one asyncio event loop in one background thread (aiohttp), not a thread
each: a 10x surge holds a few thousand requests in flight, and as threads they loaded a 2-core box
past a load average of 600 (docs/sandbox.md, "Client threads").
"""
from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

RETRYABLE_STATUS = {500, 502, 503, 504}


@dataclass(frozen=True)
class TraceRequest:
    t_s: float  # seconds from the trace start
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class ClientOptions:
    # Per attempt, wall seconds: to connect, and then between bytes of the answer (a stream that keeps
    # sending is not cut off), like `requests`' timeout.
    timeout_s: float = 60.0
    retries: int = 2  # extra attempts after a timeout, connection error or 5xx
    backoff_s: float = 0.5  # doubled on each retry
    # Concurrent requests (each holds one connection, and its slot through its retries). Users arrive
    # open-loop: a cap that the surge reaches holds requests on the client, where no server metric sees
    # them queue, so it sits well above any scenario's need.
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


STOP_JOIN_S = 10.0  # how long stop() waits for the client thread to cancel what is in flight


class TrafficGenerator:
    def __init__(self, url: str, trace: Iterable[TraceRequest], *, speed: float = 1.0, rate: float = 1.0,
                 options: ClientOptions | None = None, seed: int = 0) -> None:
        self.url = url.rstrip("/") + "/v1/completions"
        self.trace = scale_rate(trace, rate, seed) if rate != 1.0 else iter(trace)
        self.speed = speed
        self.options = options or ClientOptions()
        self._report = TrafficReport()
        self._lock = threading.Lock()  # the report: written on the loop, read by anyone
        self._stop = threading.Event()
        self._dispatched = threading.Event()  # every request of the trace was sent (or sending stopped)
        self._thread: threading.Thread | None = None  # runs the event loop: the dispatcher and every request
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    def start(self) -> TrafficGenerator:
        self._thread = threading.Thread(target=self._run_loop, name="traffic", daemon=True)
        self._thread.start()
        return self

    def sending(self) -> bool:
        """Whether requests of the trace are still to be sent (a finite trace ends)."""
        return self._thread is not None and self._thread.is_alive() and not self._dispatched.is_set()

    def wait(self, timeout: float | None = None) -> TrafficReport:
        """Wait until every request was sent and answered (or gave up); at most `timeout` seconds if given.
        Raises what broke the client loop, if something did."""
        if self._thread is not None:
            self._thread.join(timeout)
        if self._error is not None:
            raise RuntimeError(f"the traffic generator's client loop failed: {self._error!r}") from self._error
        return self.report()

    def run(self) -> TrafficReport:
        return self.start().wait()

    def stop(self) -> TrafficReport:
        """Stop sending and abandon the requests in flight (they are counted as sent, but not recorded)."""
        self._stop.set()
        loop, main = self._loop, self._main
        if loop is not None and main is not None:
            try:
                loop.call_soon_threadsafe(main.cancel)
            except RuntimeError:
                pass  # the loop already ended
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(STOP_JOIN_S)
        return self.report()

    def report(self) -> TrafficReport:
        with self._lock:
            copy = TrafficReport(**{**self._report.__dict__})
            copy.statuses = Counter(self._report.statuses)
            copy.latencies_s = list(self._report.latencies_s)
            copy.records = list(self._report.records)
            return copy

    # --- sending ---------------------------------------------------------------------------
    def _run_loop(self) -> None:
        try:
            asyncio.run(self._clients())
        except asyncio.CancelledError:
            pass  # stopped
        except BaseException as error:  # noqa: BLE001 - wait() raises it where the caller sees it
            # The task group wraps what a request or the trace raised; one error is said as itself.
            while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
                error = error.exceptions[0]
            self._error = error
        finally:
            self._dispatched.set()

    async def _clients(self) -> None:
        self._loop, self._main = asyncio.get_running_loop(), asyncio.current_task()
        if self._stop.is_set():  # stopped before the loop ran: stop() could not cancel it
            return
        # The semaphore, not the connector, holds requests beyond max_in_flight: aiohttp's timeout would
        # count the wait for a pooled connection as part of the attempt.
        slots = asyncio.Semaphore(self.options.max_in_flight)
        connector = aiohttp.TCPConnector(limit=self.options.max_in_flight)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.options.timeout_s,
                                        sock_read=self.options.timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            # A request that raises ends the group, and with it the run: wait() raises it.
            async with asyncio.TaskGroup() as requests_in_flight:
                try:
                    await self._dispatch(session, slots, requests_in_flight)
                finally:
                    self._dispatched.set()

    async def _dispatch(self, session: aiohttp.ClientSession, slots: asyncio.Semaphore,
                        group: asyncio.TaskGroup) -> None:
        started = time.monotonic()
        first_t: float | None = None
        for request in self.trace:
            first_t = request.t_s if first_t is None else first_t
            due = started + (request.t_s - first_t) / self.speed
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            with self._lock:
                self._report.sent += 1
            group.create_task(self._send(session, slots, request, due))

    async def _send(self, session: aiohttp.ClientSession, slots: asyncio.Semaphore, request: TraceRequest,
                    due: float) -> None:
        prompt_tokens = max(1, min(request.prompt_tokens, self.options.max_prompt_tokens))
        body = {"model": self.options.model, "prompt": "hi " * prompt_tokens,
                "max_tokens": max(1, request.output_tokens), "ignore_eos": True, "stream": self.options.stream}
        # A user's clock starts when the request is due, not when a client slot is free to send it.
        started = min(due, time.monotonic())
        outcome, first_token_at, pool = "error", None, None
        async with slots:
            for attempt in range(self.options.retries + 1):
                if attempt:
                    with self._lock:
                        self._report.retries += 1
                    await asyncio.sleep(self.options.backoff_s * 2 ** (attempt - 1))
                outcome, first_token_at, pool = await self._attempt(session, body)
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

    async def _attempt(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> tuple[str, float | None, str | None]:
        """One try: its status (or why none came), when streamed when the first token arrived, and the
        pool that answered (the gateway's x-sandbox-pool header)."""
        try:
            async with session.post(self.url, json=body) as response:
                pool = response.headers.get("x-sandbox-pool")
                if not self.options.stream or response.status != 200:
                    await response.read()  # the whole answer, as a client reads it
                    return str(response.status), None, pool
                first_token_at = None
                async for line in response.content:
                    if first_token_at is None and line.startswith(b"data: {"):
                        first_token_at = time.monotonic()
                return "200", first_token_at, pool
        except TimeoutError:  # aiohttp's connect and read timeouts are TimeoutErrors
            with self._lock:
                self._report.timeouts += 1
            return "timeout", None, None  # aiohttp closes that connection rather than reuse it
        except aiohttp.ClientError:
            return "connection_error", None, None  # refused, reset, or an answer cut off mid-stream
