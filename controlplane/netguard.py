"""The connect-time address guard for every URL a person types into Headroom (SSRF).

Webhook and Slack URLs, and each cluster's Kubernetes API and Prometheus URLs, are user input: without
a guard any admin could make Headroom call `127.0.0.1` or `169.254.169.254` for them. Every connection
is checked when it is made, not when a URL is saved: the host name is resolved, every address it
resolves to must be public or inside the allow-list of that kind of peer, and the socket is opened to
the address that was checked, so a DNS answer that changes between check and connect cannot slip
through. An IPv6 address that carries an IPv4 one (IPv4-mapped, -compatible or -translated, NAT64,
6to4) is judged by the IPv4 address it leads to.

Two allow-lists, because the peers differ: notifications go to the internet (`OUTBOUND_ALLOWED_NETWORKS`,
empty by default), while cluster APIs and Prometheus usually sit on internal networks that the admin
names once (`CLUSTER_ALLOWED_NETWORKS`). Neither list is consulted for the other's peers.
"""
from __future__ import annotations

import ipaddress
import socket
from functools import cache
from urllib.parse import urlsplit

from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util import connection as urllib3_connection

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SCHEMES = ("http", "https")
# The settings that hold each allow-list (comma-separated networks, read at every connect).
NOTIFICATIONS = "OUTBOUND_ALLOWED_NETWORKS"
CLUSTERS = "CLUSTER_ALLOWED_NETWORKS"

# IPv6 forms that lead to an IPv4 address: the IPv4 address decides.
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: the last 32 bits are the IPv4 address
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d (:: and ::1 are judged as they are)
IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT (RFC 2765) ::ffff:0:a.b.c.d
# RFC 8215's local-use NAT64 prefix: where the IPv4 address sits depends on the site, so it is refused.
LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")


class OutboundRefused(Exception):
    """The request would reach an address or scheme that policy forbids. Retrying cannot help."""


def _listed(address: IPAddress, allow_list: str) -> bool:
    networks = (ipaddress.ip_network(network, strict=False) for network in getattr(settings, allow_list))
    return any(address in network for network in networks)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one leads to (IPv4-mapped, 6to4, NAT64, IPv4-compatible or -translated), or None."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or address in IPV4_TRANSLATED or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal(address: IPAddress, allow_list: str = NOTIFICATIONS) -> str | None:
    """Why policy forbids connecting to `address`, or None when it may be reached."""
    if _listed(address, allow_list):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address in LOCAL_NAT64:
            return f"{address} is a local-use NAT64 address"
        embedded = embedded_ipv4(address)
        if embedded is not None:
            reason = refusal(embedded, allow_list)
            return f"{reason} (inside {address})" if reason else None
    if address.is_global and not address.is_multicast:
        return None
    for label in ("loopback", "link_local", "private", "multicast", "unspecified", "reserved"):
        if getattr(address, f"is_{label}"):
            return f"{address} is a {label.replace('_', '-')} address"
    return f"{address} is not a public address"


def literal_refusal(url: str, allow_list: str = NOTIFICATIONS) -> str | None:
    """A save-time courtesy check: the scheme, and a host written as a forbidden IP literal.

    Host names are judged only at connect time, when their addresses are known.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return "the URL is not valid"
    if parts.scheme not in SCHEMES:
        return f"only http and https URLs are allowed, not {parts.scheme or 'no scheme'!r}"
    if not host:
        return "the URL has no host"
    try:
        parts.port  # noqa: B018 - read for its check: a port out of 0-65535 or not a number raises
    except ValueError:
        return "the URL's port is not a number from 0 to 65535"
    try:
        reason = refusal(ipaddress.ip_address(host), allow_list)
    except ValueError:
        return None
    return f"{reason} (not in {allow_list})" if reason else None


def vetted_addresses(host: str, port: int, allow_list: str = NOTIFICATIONS) -> list[str]:
    """Resolve `host`; refuse if any of its addresses is forbidden (a mixed answer is a rebinding trick)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    for address in addresses:
        reason = refusal(ipaddress.ip_address(address.split("%", 1)[0]), allow_list)
        if reason:
            raise OutboundRefused(f"{host}: {reason}, refused (not in {allow_list})")
    return addresses


class _CheckedConnect:
    """Replaces urllib3's connect with one that opens the socket to a vetted address only."""

    allow_list = NOTIFICATIONS

    def _new_conn(self) -> socket.socket:  # type: ignore[override]
        last_error: OSError | None = None
        for address in vetted_addresses(self._dns_host, self.port, self.allow_list):  # type: ignore[attr-defined]
            try:
                return urllib3_connection.create_connection(
                    (address, self.port), self.timeout,  # type: ignore[attr-defined]
                    source_address=self.source_address, socket_options=self.socket_options,  # type: ignore[attr-defined]
                )
            except OSError as exc:
                last_error = exc
        raise last_error or OSError(f"no address for {self._dns_host}")  # type: ignore[attr-defined]


@cache
def checked_pool_classes(allow_list: str) -> dict[str, type[HTTPConnectionPool]]:
    """urllib3 connection pools (by scheme) whose every connection goes through the check with `allow_list`."""
    attrs = {"allow_list": allow_list}
    http = type("CheckedHTTPConnection", (_CheckedConnect, HTTPConnection), attrs)
    https = type("CheckedHTTPSConnection", (_CheckedConnect, HTTPSConnection), attrs)
    return {
        "http": type("CheckedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": http}),
        "https": type("CheckedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": https}),
    }


class CheckedAdapter(HTTPAdapter):
    """A requests adapter whose every connection goes through the address check with one allow-list."""

    def __init__(self, allow_list: str = NOTIFICATIONS, **kwargs) -> None:  # noqa: ANN003
        self.allow_list = allow_list
        super().__init__(**kwargs)

    def init_poolmanager(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = checked_pool_classes(self.allow_list)

    def proxy_manager_for(self, proxy, **proxy_kwargs):  # noqa: ANN001, ANN003, ANN201
        raise OutboundRefused("guarded connections never go through a proxy (it would reach what the guard refuses)")
