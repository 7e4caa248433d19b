"""The traffic generator's clients (sandbox/traffic.py): one child process, one asyncio event loop, aiohttp.

A process of its own rather than a thread of the sandbox's: in one process with the gateway's and the
replicas' hundreds of threads, one event-loop thread got too few turns of the GIL to read a surge's
streams, and every request of the surge missed its SLO (docs/sandbox.md, "Client threads"). Real
clients are not in the server's process either.

    python -m sandbox.traffic_clients '{"url": ..., "options": {...ClientOptions fields}}'

Standard input: one JSON line per request, `[t_s, prompt_tokens, output_tokens, due]` where `due` is a
`time.monotonic()` reading (one clock for every process of the machine), in due order; end of input
ends the trace. Standard output: JSON lines, `["ready"]` once the client can send, `["sent"]` when a
request is due and goes out, `["retry"]`, `["timeout"]` per attempt that timed out,
`["record", t_s, outcome, e2e_s, ttft_s, pool]` when a request finished, `["dispatched"]` when the last
request of the trace went out. It exits once every request finished; SIGTERM abandons them.
"""
from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

import aiohttp

RETRYABLE_STATUS = {500, 502, 503, 504}


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

    def __post_init__(self) -> None:
        for name in ("timeout_s", "max_in_flight", "max_prompt_tokens"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ClientOptions.{name} must be positive, not {getattr(self, name)!r}")
        if self.retries < 0 or self.backoff_s < 0:
            raise ValueError(f"ClientOptions.retries and backoff_s cannot be negative "
                             f"({self.retries}, {self.backoff_s})")


class Clients:
    def __init__(self, url: str, options: ClientOptions, out: BinaryIO) -> None:
        self.url = url
        self.options = options
        self.out = out

    def emit(self, *event: Any) -> None:
        self.out.write(json.dumps(event).encode() + b"\n")
        self.out.flush()

    async def run(self, requests_in: BinaryIO) -> None:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[list[Any] | None] = asyncio.Queue()

        def read() -> None:  # a pipe read blocks; a thread hands the lines to the loop
            for line in requests_in:
                loop.call_soon_threadsafe(inbox.put_nowait, json.loads(line))
            loop.call_soon_threadsafe(inbox.put_nowait, None)

        threading.Thread(target=read, name="traffic-requests", daemon=True).start()
        # The semaphore, not the connector, holds requests beyond max_in_flight: aiohttp's timeout would
        # count the wait for a pooled connection as part of the attempt.
        slots = asyncio.Semaphore(self.options.max_in_flight)
        connector = aiohttp.TCPConnector(limit=self.options.max_in_flight)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.options.timeout_s,
                                        sock_read=self.options.timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            self.emit("ready")
            last_due = time.monotonic()
            # A request that raises ends the group, and with it the process: the parent says so.
            async with asyncio.TaskGroup() as group:
                while (item := await inbox.get()) is not None:
                    t_s, prompt_tokens, output_tokens, last_due = item
                    group.create_task(self.send(session, slots, t_s, prompt_tokens, output_tokens, last_due))
                await asyncio.sleep(max(0.0, last_due - time.monotonic()))
                self.emit("dispatched")

    async def send(self, session: aiohttp.ClientSession, slots: asyncio.Semaphore, t_s: float,
                   prompt_tokens: int, output_tokens: int, due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        self.emit("sent")
        prompt_tokens = max(1, min(prompt_tokens, self.options.max_prompt_tokens))
        body = {"model": self.options.model, "prompt": "hi " * prompt_tokens,
                "max_tokens": max(1, output_tokens), "ignore_eos": True, "stream": self.options.stream}
        # A user's clock starts when the request is due, not when a client slot is free to send it.
        started = min(due, time.monotonic())
        outcome, first_token_at, pool = "error", None, None
        async with slots:
            for attempt in range(self.options.retries + 1):
                if attempt:
                    self.emit("retry")
                    await asyncio.sleep(self.options.backoff_s * 2 ** (attempt - 1))
                outcome, first_token_at, pool = await self.attempt(session, body)
                if outcome == "200" or (outcome.isdigit() and int(outcome) not in RETRYABLE_STATUS):
                    break
        finished = time.monotonic()
        succeeded = outcome == "200"
        self.emit("record", t_s, outcome, finished - started if succeeded else None,
                  first_token_at - started if succeeded and first_token_at is not None else None, pool)

    async def attempt(self, session: aiohttp.ClientSession,
                      body: dict[str, Any]) -> tuple[str, float | None, str | None]:
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
            self.emit("timeout")
            return "timeout", None, None  # aiohttp closes that connection rather than reuse it
        except aiohttp.ClientError:
            return "connection_error", None, None  # refused, reset, or an answer cut off mid-stream


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m sandbox.traffic_clients CONFIG_JSON (requests on standard input)", file=sys.stderr)
        return 2
    # Ctrl-C reaches the whole terminal's process group: the parent's stop() ends this process, or the end
    # of its standard input does (the parent gone), without a traceback from here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = json.loads(argv[1])
    clients = Clients(config["url"], ClientOptions(**config["options"]), sys.stdout.buffer)
    asyncio.run(clients.run(sys.stdin.buffer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
