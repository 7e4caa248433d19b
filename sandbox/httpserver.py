"""The stdlib threading HTTP server, minus tracebacks for clients that hang up mid-answer."""
from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive and no access log: the sandbox prints its own summaries."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # A burst of clients must queue, not be reset: the stdlib default backlog is 5 (vLLM's is 2048).
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            return  # the peer went away (client timeout, replica killed, sandbox stopping)
        print(f"sandbox: {type(error).__name__} while answering {client_address}: {error}", file=sys.stderr)
