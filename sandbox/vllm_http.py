"""vLLM's HTTP surface for an emulated replica (OpenAI-compatible API, /metrics, dev routes).

Prompts are "tokenised" as whitespace-separated words (or a list of token ids), so a client that
sends N words gets exactly N prompt tokens; output text is one word per generated token.
"""
from __future__ import annotations

import json
import queue
import random
import select
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from sandbox.engine import EngineRequest
from sandbox.httpserver import QuietHandler
from sandbox.vllm_metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

if TYPE_CHECKING:
    from sandbox.replica import EmulatedReplica

VLLM_VERSION = "0.32.0"
DEFAULT_MAX_TOKENS = 16
CHAT_TEMPLATE_TOKENS = 4  # role markers per message, roughly what a chat template adds
UNTRACKED_PATHS = {"/metrics", "/health", "/ping"}  # the instrumentator skips probes and scrapes


class ApiError(Exception):
    def __init__(self, status: int, kind: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.param = status, kind, message, param


class VllmRequestHandler(QuietHandler):
    server_version = "uvicorn"
    sys_version = ""

    @property
    def replica(self) -> EmulatedReplica:
        return self.server.replica  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # --- routing ---------------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        started = time.monotonic()
        self.response_bytes = 0
        url = urlsplit(self.path)
        self.query = parse_qs(url.query)
        if not self._wait_while_hung():
            self.close_connection = True
            return
        routes = {
            ("GET", "/health"): self._health, ("GET", "/ping"): self._health,
            ("POST", "/ping"): self._health, ("GET", "/metrics"): self._metrics,
            ("GET", "/version"): self._version, ("GET", "/v1/models"): self._models,
            ("GET", "/load"): self._load, ("POST", "/v1/completions"): self._completions,
            ("POST", "/v1/chat/completions"): self._chat_completions,
            ("POST", "/sleep"): self._sleep, ("POST", "/wake_up"): self._wake_up,
            ("GET", "/is_sleeping"): self._is_sleeping,
        }
        handler = routes.get((method, url.path))
        status = 404
        try:
            body = self._read_json() if method == "POST" else {}
            if handler is None:
                raise ApiError(404, "NotFoundError", "Not Found")
            if url.path.startswith("/v1/") and self.replica.faults.extra_latency_s > 0:
                time.sleep(self.replica.faults.extra_latency_s)
            status = handler(body)
        except ApiError as error:
            status = error.status
            try:
                self._send_json(error.status, {"error": {"message": error.message, "type": error.kind,
                                                         "param": error.param, "code": error.status}})
            except OSError:
                self.close_connection = True
        except OSError:  # the client hung up, or the replica is being killed
            self.close_connection = True
        if url.path not in UNTRACKED_PATHS and handler is not None:
            self.replica.metrics.record_http(url.path, method, status, time.monotonic() - started,
                                             int(self.headers.get("Content-Length") or 0), self.response_bytes)

    def _wait_while_hung(self) -> bool:
        """A hung replica holds the connection open and never answers (until un-hung)."""
        while self.replica.faults.hung:
            if not self.replica.ready:
                return False
            time.sleep(0.05)
        return True

    # --- plumbing --------------------------------------------------------------------------
    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ApiError(400, "BadRequestError", f"invalid JSON body: {error}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequestError", "the request body must be a JSON object")
        return body

    def _send_bytes(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.response_bytes += len(payload)

    def _send_json(self, status: int, payload: Any) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json")

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _send_event(self, payload: Any) -> None:
        data = f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
        self.response_bytes += len(data)

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        try:
            # poll, not select: select() fails on descriptors above 1024, which a busy sandbox reaches.
            poller = select.poll()
            poller.register(self.connection, select.POLLIN)
            return bool(poller.poll(0)) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # --- simple routes ---------------------------------------------------------------------
    def _health(self, body: dict[str, Any]) -> int:
        self._send_bytes(200, b"", "application/json")
        return 200

    def _metrics(self, body: dict[str, Any]) -> int:
        self._send_bytes(200, self.replica.metrics.render().encode(), METRICS_CONTENT_TYPE)
        return 200

    def _version(self, body: dict[str, Any]) -> int:
        self._send_json(200, {"version": VLLM_VERSION})
        return 200

    def _load(self, body: dict[str, Any]) -> int:
        self._send_json(200, {"server_load": self.replica.engine.in_flight})
        return 200

    def _models(self, body: dict[str, Any]) -> int:
        model = self.replica.model_name
        card = {"id": model, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                "root": model, "parent": None, "max_model_len": self.replica.max_model_len,
                "permission": []}
        self._send_json(200, {"object": "list", "data": [card]})
        return 200

    def _sleep(self, body: dict[str, Any]) -> int:
        level = int(self.query.get("level", ["1"])[0])
        if level not in (0, 1, 2):
            raise ApiError(400, "BadRequestError", f"sleep level must be 0, 1 or 2, got {level}")
        self.replica.sleep(level)
        self._send_json(200, {"status": "sleeping", "level": level})
        return 200

    def _wake_up(self, body: dict[str, Any]) -> int:
        self.replica.wake_up()
        self._send_json(200, {"status": "awake", "tags": self.query.get("tags")})
        return 200

    def _is_sleeping(self, body: dict[str, Any]) -> int:
        self._send_json(200, {"is_sleeping": self.replica.sleep_level > 0})
        return 200

    # --- generation ------------------------------------------------------------------------
    def _completions(self, body: dict[str, Any]) -> int:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_tokens = len(prompt)
        elif isinstance(prompt, list):
            prompt_tokens = sum(len(str(p).split()) for p in prompt)
        else:
            prompt_tokens = len(str(prompt).split())
        return self._generate(body, max(1, prompt_tokens), chat=False)

    def _chat_completions(self, body: dict[str, Any]) -> int:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "BadRequestError", "messages must be a non-empty list", "messages")
        words = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
        return self._generate(body, words + CHAT_TEMPLATE_TOKENS * len(messages) + 1, chat=True)

    def _generate(self, body: dict[str, Any], prompt_tokens: int, chat: bool) -> int:
        replica = self.replica
        if body.get("model", replica.model_name) != replica.model_name:
            raise ApiError(404, "NotFoundError", f"The model `{body.get('model')}` does not exist.", "model")
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        if max_tokens is None:
            max_tokens = DEFAULT_MAX_TOKENS if not chat else replica.max_model_len - prompt_tokens
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ApiError(400, "BadRequestError", "max_tokens must be a positive integer", "max_tokens")
        if prompt_tokens + max_tokens > replica.max_model_len:
            raise ApiError(400, "BadRequestError",
                           f"This model's maximum context length is {replica.max_model_len} tokens. However, "
                           f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                           f"messages, {max_tokens} in the completion).")
        priority = body.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ApiError(400, "BadRequestError", "priority must be an integer", "priority")
        if priority and replica.scheduling_policy != "priority":
            raise ApiError(400, "BadRequestError",
                           f"Got priority {priority} but Priority scheduling is not enabled.", "priority")
        faults = replica.faults
        if faults.error_rate and random.random() < faults.error_rate:
            raise ApiError(500, "InternalServerError", "injected fault: internal server error")
        limit = faults.max_num_queued_reqs
        if limit is not None and replica.metrics.waiting >= limit:
            replica.metrics.record_rejection("max_num_queued_reqs")
            raise ApiError(503, "ServiceUnavailableError", "the request queue is full")
        request = replica.engine.submit(prompt_tokens, max_tokens, priority)
        completion = _Completion(replica.model_name, chat, prompt_tokens)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._stream(request, completion, include_usage)
        else:
            self._wait_and_answer(request, completion)
        return 200

    def _wait_and_answer(self, request: EngineRequest, completion: _Completion) -> None:
        generated = 0
        while True:
            try:
                update = request.updates.get(timeout=0.5)
            except queue.Empty:  # look for a client that gave up
                if self._client_gone():
                    self.replica.engine.abort(request)
                    self.close_connection = True
                    return
                continue
            if update is None:
                break
            generated = update
        if request.finished_reason == "abort":
            raise ApiError(500, "InternalServerError", "the request was aborted")
        self._send_json(200, completion.full(generated, request.finished_reason or "length"))

    def _stream(self, request: EngineRequest, completion: _Completion, include_usage: bool) -> None:
        self._start_stream()
        sent = 0
        try:
            if completion.chat:
                self._send_event(completion.chunk(None, None, role=True))
            while True:
                update = request.updates.get()
                if update is None:
                    break
                if update > sent:
                    self._send_event(completion.chunk(completion.words(sent, update), None))
                    sent = update
            if request.generated > sent:
                self._send_event(completion.chunk(completion.words(sent, request.generated), None))
            self._send_event(completion.chunk("", request.finished_reason or "length"))
            if include_usage:
                self._send_event(completion.usage_chunk(request.generated))
            self._send_event("[DONE]")
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            self.replica.engine.abort(request)
            self.close_connection = True


class _Completion:
    """Builds OpenAI-shaped completion bodies and stream chunks for one request."""

    def __init__(self, model: str, chat: bool, prompt_tokens: int) -> None:
        self.model = model
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    @staticmethod
    def words(start: int, end: int) -> str:
        return "".join(f" tok{i}" for i in range(start, end))

    def usage(self, generated: int) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + generated,
                "completion_tokens": generated}

    def full(self, generated: int, finish_reason: str) -> dict[str, Any]:
        text = self.words(0, generated)
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                      "stop_reason": None}
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                "choices": [choice], "usage": self.usage(generated)}

    def chunk(self, text: str | None, finish_reason: str | None, role: bool = False) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                      "finish_reason": finish_reason}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "choices": [choice]}

    def usage_chunk(self, generated: int) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "choices": [], "usage": self.usage(generated)}
