"""The traffic generator: replays a request trace against an OpenAI-compatible URL, like clients do.

Each trace request (arrival second, prompt tokens, output tokens) becomes a `/v1/completions`
call with a prompt of that many words and `max_tokens` = output tokens (`ignore_eos`, so exactly
that many come back). `speed` compresses the trace's time; `rate` scales the request rate
(0.5 drops every other request on average, 3 sends each three times). Clients time out and retry
with backoff like real ones, so an overloaded pool sees the retries pile up. `report()` says what
the clients saw.

The clients are coroutines on one asyncio event loop in a child process (sandbox/traffic_clients.py),
not a thread each: a 10x surge holds a few thousand requests in flight, and as threads of the
sandbox's process they loaded a 2-core box (docs/sandbox.md, "Client threads"). This process keeps
two threads: one hands the child each request a little before it is due, one reads back what the
clients saw.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sandbox.traffic_clients import RETRYABLE_STATUS, ClientOptions

__all__ = ["RETRYABLE_STATUS", "ClientOptions", "RequestRecord", "TraceRequest", "TrafficGenerator", "TrafficReport",
           "from_rows", "from_workload", "load_trace_file", "scale_rate"]


@dataclass(frozen=True)
class TraceRequest:
    t_s: float  # seconds from the trace start
    prompt_tokens: int
    output_tokens: int


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


# How long before its due time a request goes to the client process, so this process's lag cannot delay it.
HANDOVER_S = 1.0
STOP_JOIN_S = 10.0  # how long stop() waits for the threads of this process
PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])  # the client process runs this checkout's code


class TrafficGenerator:
    def __init__(self, url: str, trace: Iterable[TraceRequest], *, speed: float = 1.0, rate: float = 1.0,
                 options: ClientOptions | None = None, seed: int = 0) -> None:
        self.url = url.rstrip("/") + "/v1/completions"
        self.trace = scale_rate(trace, rate, seed) if rate != 1.0 else iter(trace)
        self.speed = speed
        self.options = options or ClientOptions()
        self._report = TrafficReport()
        self._lock = threading.Lock()  # the report: written by the reader, read by anyone
        self._stop = threading.Event()
        self._ready = threading.Event()  # the client process can send
        self._dispatched = threading.Event()  # every request of the trace was sent (or sending stopped)
        self._process: subprocess.Popen[bytes] | None = None
        self._dispatcher: threading.Thread | None = None
        self._reader: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> TrafficGenerator:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
        config = json.dumps({"url": self.url, "options": asdict(self.options)})
        self._process = subprocess.Popen([sys.executable, "-m", "sandbox.traffic_clients", config], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read, name="traffic-records", daemon=True)
        self._dispatcher = threading.Thread(target=self._dispatch, name="traffic-dispatch", daemon=True)
        self._reader.start()
        self._dispatcher.start()
        return self

    def sending(self) -> bool:
        """Whether requests of the trace are still to be sent (a finite trace ends)."""
        return self._process is not None and not self._dispatched.is_set()

    def wait(self, timeout: float | None = None) -> TrafficReport:
        """Wait until every request was sent and answered (or gave up); at most `timeout` seconds if given.
        Raises what broke the trace or the client process, if something did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in (self._dispatcher, self._reader):
            if thread is not None:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if self._error is not None:
            raise RuntimeError(f"the traffic generator failed: {self._error!r}") from self._error
        return self.report()

    def run(self) -> TrafficReport:
        return self.start().wait()

    def stop(self) -> TrafficReport:
        """Stop sending and abandon the requests in flight (they are counted as sent, but not recorded)."""
        self._stop.set()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
        for thread in (self._dispatcher, self._reader):
            if thread is not None and thread is not threading.current_thread():
                thread.join(STOP_JOIN_S)
        if self._process is not None:
            try:
                self._process.wait(STOP_JOIN_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._dispatched.set()
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
        """Hands each request to the client process HANDOVER_S before it is due; the trace clock starts
        when the client process is ready (its start-up is not the users')."""
        assert self._process is not None and self._process.stdin is not None
        pipe = self._process.stdin
        try:
            while not self._ready.wait(0.1):
                if self._stop.is_set() or self._process.poll() is not None:
                    return
            started = time.monotonic()
            first_t: float | None = None
            for request in self.trace:
                first_t = request.t_s if first_t is None else first_t
                due = started + (request.t_s - first_t) / self.speed
                if self._stop.wait(max(0.0, due - HANDOVER_S - time.monotonic())):
                    return
                pipe.write(json.dumps([request.t_s, request.prompt_tokens, request.output_tokens, due]).encode()
                           + b"\n")
                pipe.flush()
        except OSError:
            return  # the client process ended (stopped, or failed: the reader says so)
        except Exception as error:  # noqa: BLE001 - the trace failed: wait() raises it where the caller sees it
            self._error = error
        finally:
            try:
                pipe.close()  # the end of the trace: the client process finishes what is in flight and exits
            except OSError:
                pass

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            try:
                event = json.loads(line)
                kind = event[0]
            except (ValueError, IndexError, KeyError, TypeError):
                # Keep reading, or the client process would block on a full pipe.
                self._error = self._error or RuntimeError(f"unexpected output from the client process: {line[:200]!r}")
                continue
            if kind == "ready":
                self._ready.set()
            elif kind == "dispatched":
                self._dispatched.set()
            else:
                with self._lock:
                    self._count(kind, event[1:])
        returncode = self._process.wait()
        self._dispatched.set()
        if returncode != 0 and not self._stop.is_set() and self._error is None:
            self._error = RuntimeError(f"the client process exited with status {returncode} (its error is above)")

    def _count(self, kind: str, fields: list[Any]) -> None:
        if kind == "sent":
            self._report.sent += 1
        elif kind == "retry":
            self._report.retries += 1
        elif kind == "timeout":
            self._report.timeouts += 1
        elif kind == "record":
            record = RequestRecord(*fields)
            self._report.statuses[record.outcome] += 1
            self._report.records.append(record)
            if record.e2e_s is not None:
                self._report.succeeded += 1
                self._report.latencies_s.append(record.e2e_s)
            else:
                self._report.failed += 1
