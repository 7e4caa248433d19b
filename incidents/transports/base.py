"""What every transport shares: the error it raises, posting JSON through the SSRF-checked client."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

import requests
from django.template.loader import render_to_string

from incidents import outbound
from incidents.specs import ChannelSpec

if TYPE_CHECKING:
    from incidents.models import Channel, Notification


class TransportError(Exception):
    """A failed delivery. `permanent`: retrying cannot help. `disables_channel`: the channel's own
    address is broken (Slack said no_service, policy refuses the host), so it stops until fixed."""

    def __init__(self, message: str, *, permanent: bool = False, disables_channel: bool | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.disables_channel = permanent if disables_channel is None else disables_channel
        self.retry_after_s = retry_after_s  # the receiver's Retry-After: no try before it


ADDRESS_REFUSED = (401, 403, 404, 410)


def answer_detail(answer: outbound.Answer, limit: int) -> str:
    """The receiver's answer, fit to store and show: our secret path and query taken out (a receiver may
    echo them) before it is cut to `limit` characters, so no cut leaves a piece of the secret unmatched."""
    return outbound.redact(answer.text, answer.url)[:limit]


class NothingToSend(Exception):
    """This notification has become moot (the reason says why); it is skipped, not failed."""


def render(template: str, **context: Any) -> str:
    """Message text lives in templates/incidents/; they are rendered without HTML escaping."""
    return render_to_string(f"incidents/{template}", context).strip()


class Transport:
    """Delivers one kind of channel's notifications. One subclass per kind, named in the registry."""

    spec_class: ClassVar[type[ChannelSpec]]
    # Several pending updates of one message collapse into one (each renders the current state).
    coalesce_updates: ClassVar[bool] = False
    # Sends one reminder before a pending proposal expires.
    reminds: ClassVar[bool] = False

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    @property
    def spec(self) -> ChannelSpec:
        try:
            return self.channel.spec
        except ValueError as exc:
            raise TransportError(f"invalid channel settings: {exc}", permanent=True) from exc

    def notify(self, notification: Notification) -> None:
        """Send one notification; raise TransportError or NothingToSend, return on success."""
        raise NotImplementedError

    def delivered(self, notification: Notification) -> None:
        """Bookkeeping after a successful send (the Slack transport remembers its message)."""

    def raise_for_answer(self, answer: outbound.Answer) -> None:
        if 200 <= answer.status < 300:
            return
        # 5xx and 429 are the receiver's trouble: retry. Other 4xx will not change by retrying; of those,
        # only an address that is gone or refuses us stops the channel: a receiver that refuses one payload
        # (400, 413, 422) may take the next, a P0 page among them.
        permanent = 400 <= answer.status < 500 and answer.status not in (408, 429)
        detail = answer_detail(answer, 200)
        raise TransportError(f"{answer.status} from {outbound.origin(answer.url)}: {detail}", permanent=permanent,
                             disables_channel=answer.status in ADDRESS_REFUSED, retry_after_s=answer.retry_after_s)

    def post_json(self, url: str, payload: dict[str, Any], headers: dict[str, str] | None = None,
                  body: bytes | None = None) -> outbound.Answer:
        body = body if body is not None else json.dumps(payload).encode()
        all_headers = {"Content-Type": "application/json", "User-Agent": "Headroom"} | (headers or {})
        try:
            answer = outbound.post(url, body, all_headers)
        except outbound.OutboundRefused as exc:
            raise TransportError(f"refused: {exc}", permanent=True) from exc
        except (outbound.OutboundTimeout, requests.RequestException) as exc:
            # requests' messages quote the path ("Max retries exceeded with url: /services/…").
            detail = outbound.redact(f"{exc.__class__.__name__}: {exc}", url)
            raise TransportError(f"{outbound.origin(url)}: {detail}") from exc
        self.raise_for_answer(answer)
        return answer
