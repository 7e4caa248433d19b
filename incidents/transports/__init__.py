"""The transport registry: the one place that maps a channel kind to the class that delivers it."""
from __future__ import annotations

from typing import TYPE_CHECKING

from incidents.choices import ChannelKind
from incidents.transports.base import NothingToSend, Transport, TransportError
from incidents.transports.slack import SlackTransport
from incidents.transports.webhook import WebhookTransport

if TYPE_CHECKING:
    from incidents.models import Channel

TRANSPORTS: dict[str, type[Transport]] = {
    ChannelKind.SLACK: SlackTransport,
    ChannelKind.WEBHOOK: WebhookTransport,
}

__all__ = ["TRANSPORTS", "NothingToSend", "Transport", "TransportError", "transport_class", "transport_for"]


def transport_class(kind: str) -> type[Transport]:
    return TRANSPORTS[kind]


def transport_for(channel: Channel) -> Transport:
    return transport_class(channel.kind)(channel)
