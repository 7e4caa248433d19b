"""Notification fixtures: the core personas, a local HTTP receiver that records every request (Slack
and webhook receivers stand-in), Slack switched on with a test signing secret, and helpers to make
Slack's signed interaction requests with slack_sdk's own SignatureVerifier."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from slack_sdk.signature import SignatureVerifier

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool
from incidents.choices import ChannelKind
from incidents.models import Channel, SlackIdentity
from scaling import services as scaling
from scaling.choices import ProposalKind
from scaling.models import Proposal

from tests.core.conftest import alice, bob, charlie, cluster, ml_team, pool, search_pool, search_team  # noqa: F401

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1. `answers[path]` = (status, body, headers) or a list to pop from."""

    port: int = 0
    requests: list[Recorded] = field(default_factory=list)
    answers: dict[str, object] = field(default_factory=dict)
    delay_s: float = 0.0

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def at(self, path: str) -> list[Recorded]:
        return [request for request in self.requests if request.path == path]

    def answer(self, path: str) -> tuple[int, bytes, dict[str, str]]:
        planned = self.answers.get(path, (200, b"ok", {}))
        if isinstance(planned, list):
            planned = planned.pop(0) if len(planned) > 1 else planned[0]
        return planned  # type: ignore[return-value]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            receiver.requests.append(Recorded("POST", self.path, dict(self.headers), body))
            time.sleep(receiver.delay_s)
            status, content, headers = receiver.answer(self.path)
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a slow receiver's client gave up (the timeout tests): nothing to answer

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    recorder = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(recorder))
    server.daemon_threads = True
    recorder.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield recorder
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def integrations_on(settings) -> None:  # noqa: ANN001
    settings.SLACK_ENABLED = True
    settings.SLACK_SIGNING_SECRET = SIGNING_SECRET
    settings.WEBHOOKS_ENABLED = True
    settings.OUTBOUND_TIMEOUT_S = 3
    settings.SITE_URL = "https://headroom.example"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # personas' passwords, fast


@pytest.fixture
def allow_loopback(settings) -> None:  # noqa: ANN001
    """The admin allow-list that lets the local receiver be reached; the default refuses it."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]


@pytest.fixture
def slack_channel(ml_team, receiver: Receiver, allow_loopback: None) -> Channel:  # noqa: ANN001, F811
    return Channel.objects.create(team=ml_team, name="on-call", kind=ChannelKind.SLACK,
                                  settings={"webhook_url": receiver.url("/services/T1/B1/hook")})


def link(user: User, slack_user_id: str) -> SlackIdentity:
    return SlackIdentity.objects.create(user=user, slack_user_id=slack_user_id)


def propose(pool: Pool, user: User, target: int = 4) -> Proposal:  # noqa: F811
    evidence = {"forecast_p90": [40, 120, 310], "capacity": [90], "window": "in the next 30 min"}
    reasons = [{"code": "forecast_surge", "detail": "3.4x the current load expected within 30 min"}]
    return scaling.propose(pool, target, ProposalKind.PRESCALE, core.Actor(user, ActorChannel.API), current=1,
                           reasons=reasons, evidence=evidence)


def click_payload(proposal: Proposal, channel: Channel, slack_user_id: str, response_url: str,
                  action_id: str = "approve_proposal", action_ts: str = "1764480000.000100") -> dict:
    return {
        "type": "block_actions",
        "trigger_id": f"trigger-{action_ts}",
        "user": {"id": slack_user_id, "username": slack_user_id.lower(), "team_id": "T1"},
        "team": {"id": "T1"},
        "response_url": response_url,
        "actions": [{
            "type": "button", "action_id": action_id, "value": str(proposal.pk), "action_ts": action_ts,
            "block_id": f"proposal:{proposal.pk}:channel:{channel.pk}",
        }],
    }


def signed_post(client, payload: dict, *, secret: str = SIGNING_SECRET, timestamp: int | None = None,  # noqa: ANN001
                signature: str | None = None, omit: tuple[str, ...] = ()):  # noqa: ANN201
    """POST a block_actions payload the way Slack does: form-encoded, signed over the raw body."""
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = int(time.time()) if timestamp is None else timestamp
    headers = {
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": str(timestamp),
        "HTTP_X_SLACK_SIGNATURE": signature or SignatureVerifier(secret).generate_signature(timestamp=str(timestamp), body=body),
    }
    for name in omit:
        headers.pop(name)
    return client.post("/integrations/slack/interactions/", body, content_type="application/x-www-form-urlencoded",
                       **headers)
