"""Outbound HTTP that cannot be pointed at the inside of our network (SSRF).

Every connection is checked when it is made, not when a URL is saved: the host name is resolved,
every address it resolves to must be public (or inside `OUTBOUND_ALLOWED_NETWORKS`), and the socket
is opened to the address that was checked, so a DNS answer that changes between check and connect
cannot slip through. Redirects are followed by hand, a bounded number of times, and each hop goes
through the same check. The whole exchange, redirects included, has one deadline.
"""
from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util import connection as urllib3_connection

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SCHEMES = ("http", "https")
REDIRECTS = (301, 302, 303, 307, 308)
MAX_ANSWER_BYTES = 64 * 1024  # receivers answer "ok"; we never need more than an error message


class OutboundRefused(Exception):
    """The request would reach an address or scheme that policy forbids. Retrying cannot help."""


class OutboundTimeout(Exception):
    """The exchange (all hops together) ran past its deadline."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    url: str  # where it came from, after redirects

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(network, strict=False) for network in settings.OUTBOUND_ALLOWED_NETWORKS]


def refusal(address: IPAddress) -> str | None:
    """Why policy forbids connecting to `address`, or None when it may be reached."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in _allowed_networks()):
        return None
    if address.is_global and not address.is_multicast:
        return None
    for label in ("loopback", "link_local", "private", "multicast", "unspecified", "reserved"):
        if getattr(address, f"is_{label}"):
            return f"{address} is a {label.replace('_', '-')} address"
    return f"{address} is not a public address"


def literal_refusal(url: str) -> str | None:
    """A save-time courtesy check: the scheme, and a host written as a forbidden IP literal.

    Host names are judged only at connect time, when their addresses are known.
    """
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        return f"only http and https URLs are allowed, not {parts.scheme or 'no scheme'!r}"
    if not parts.hostname:
        return "the URL has no host"
    try:
        return refusal(ipaddress.ip_address(parts.hostname))
    except ValueError:
        return None


def vetted_addresses(host: str, port: int) -> list[str]:
    """Resolve `host`; refuse if any of its addresses is forbidden (a mixed answer is a rebinding trick)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    for address in addresses:
        reason = refusal(ipaddress.ip_address(address.split("%", 1)[0]))
        if reason:
            raise OutboundRefused(f"{host}: {reason}, refused (not in OUTBOUND_ALLOWED_NETWORKS)")
    return addresses


class _CheckedConnect:
    """Replaces urllib3's connect with one that opens the socket to a vetted address only."""

    def _new_conn(self) -> socket.socket:  # type: ignore[override]
        last_error: OSError | None = None
        for address in vetted_addresses(self._dns_host, self.port):  # type: ignore[attr-defined]
            try:
                return urllib3_connection.create_connection(
                    (address, self.port), self.timeout,  # type: ignore[attr-defined]
                    source_address=self.source_address, socket_options=self.socket_options,  # type: ignore[attr-defined]
                )
            except OSError as exc:
                last_error = exc
        raise last_error or OSError(f"no address for {self._dns_host}")  # type: ignore[attr-defined]


class _CheckedHTTPConnection(_CheckedConnect, HTTPConnection):
    pass


class _CheckedHTTPSConnection(_CheckedConnect, HTTPSConnection):
    pass


class _CheckedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _CheckedHTTPConnection


class _CheckedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _CheckedHTTPSConnection


class CheckedAdapter(HTTPAdapter):
    """A requests adapter whose every connection goes through the address check."""

    def init_poolmanager(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _CheckedHTTPPool, "https": _CheckedHTTPSPool}

    def proxy_manager_for(self, proxy, **proxy_kwargs):  # noqa: ANN001, ANN003, ANN201
        raise OutboundRefused("outbound notifications never go through a proxy")


def _session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # no proxies or .netrc from the environment
    adapter = CheckedAdapter(max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _read(response: requests.Response, deadline: float) -> bytes:
    chunks, size = [], 0
    for chunk in response.iter_content(4096):
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_ANSWER_BYTES:
            break
        if time.monotonic() > deadline:
            raise OutboundTimeout("the receiver answered too slowly")
    return b"".join(chunks)[:MAX_ANSWER_BYTES]


def post(url: str, body: bytes, headers: dict[str, str], *, timeout_s: float | None = None) -> Answer:
    """POST `body` to `url`, following at most OUTBOUND_MAX_REDIRECTS redirects with the same POST.

    Raises OutboundRefused (policy), OutboundTimeout, or requests' own connection errors.
    """
    deadline = time.monotonic() + (timeout_s or settings.OUTBOUND_TIMEOUT_S)
    with _session() as session:
        for _hop in range(settings.OUTBOUND_MAX_REDIRECTS + 1):
            reason = literal_refusal(url)
            if reason:
                raise OutboundRefused(f"{url}: {reason}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OutboundTimeout(f"no answer within {timeout_s or settings.OUTBOUND_TIMEOUT_S} s")
            try:
                with session.post(url, data=body, headers=headers, timeout=remaining, allow_redirects=False,
                                  stream=True) as response:
                    content = _read(response, deadline)
            except requests.Timeout as exc:
                raise OutboundTimeout(f"{urlsplit(url).hostname}: {exc.__class__.__name__}") from exc
            if response.status_code in REDIRECTS and response.headers.get("Location"):
                url = urljoin(url, response.headers["Location"])
                continue
            return Answer(response.status_code, content, url)
    raise OutboundRefused(f"more than {settings.OUTBOUND_MAX_REDIRECTS} redirects")
