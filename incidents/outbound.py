"""Outbound HTTP that cannot be pointed at the inside of our network (SSRF).

Every connection is checked when it is made, not when a URL is saved: the host name is resolved,
every address it resolves to must be public (or inside `OUTBOUND_ALLOWED_NETWORKS`), and the socket
is opened to the address that was checked, so a DNS answer that changes between check and connect
cannot slip through. An IPv6 address that carries an IPv4 one (IPv4-mapped, -compatible or
-translated, NAT64, 6to4) is judged by the IPv4 address it leads to. Redirects are followed by hand, a bounded number of
times, only on the same host (the signed body never travels elsewhere), and each hop goes through the
same check. The whole exchange, redirects included, has one deadline.

A webhook's path and query are its secret: errors name the scheme and host only (`origin`), and
`redact` takes the secret parts out of any text before it is stored or shown.
"""
from __future__ import annotations

import ipaddress
import re
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


# IPv6 forms that lead to an IPv4 address: the IPv4 address decides.
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: the last 32 bits are the IPv4 address
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d (:: and ::1 are judged as they are)
IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT (RFC 2765) ::ffff:0:a.b.c.d
# RFC 8215's local-use NAT64 prefix: where the IPv4 address sits depends on the site, so it is refused.
LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")
_URL_IN_TEXT = re.compile(r"(?i)\bhttps?://[^\s'\"<>]+")


def origin(url: str) -> str:
    """`scheme://host[:port]` of `url`: what errors and screens may show (never userinfo, path or query)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return "(an invalid URL)"
    if not host:
        return f"{parts.scheme}://" if parts.scheme else "(a URL without a host)"
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}" + (f":{port}" if port else "")


def _secret_parts(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found = [url, parts.netloc.rpartition("@")[0], parts.query, parts.fragment]
    found += [parts.path] if len(parts.path) > 1 else []
    return [part for part in found if part]


def redact(text: str, *urls: str) -> str:
    """`text` without the secret parts of `urls` (path, query, userinfo), and every URL in it cut to its origin."""
    for url in urls:
        if not url:
            continue
        text = text.replace(url, f"{origin(url)}/…")
        for part in sorted(_secret_parts(url), key=len, reverse=True):
            text = text.replace(part, "…")
    return _URL_IN_TEXT.sub(_cut_to_origin, text)


def _cut_to_origin(match: re.Match[str]) -> str:
    url = match.group(0)
    trail = url[len(url.rstrip(".,;:)")):]
    url = url[: len(url) - len(trail)]
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"{url.split('://', 1)[0]}://…{trail}"
    if parts.path in ("", "/") and not parts.query and not parts.fragment and "@" not in parts.netloc:
        return url + trail  # nothing secret in it
    return f"{origin(url)}/…{trail}"


def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(network, strict=False) for network in settings.OUTBOUND_ALLOWED_NETWORKS]


def _listed(address: IPAddress) -> bool:
    return any(address in network for network in _allowed_networks())


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one leads to (IPv4-mapped, 6to4, NAT64, IPv4-compatible or -translated), or None."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or address in IPV4_TRANSLATED or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal(address: IPAddress) -> str | None:
    """Why policy forbids connecting to `address`, or None when it may be reached."""
    if _listed(address):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address in LOCAL_NAT64:
            return f"{address} is a local-use NAT64 address"
        embedded = embedded_ipv4(address)
        if embedded is not None:
            reason = refusal(embedded)
            return f"{reason} (inside {address})" if reason else None
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


def _effective_port(scheme: str, port: int | None) -> int:
    return port or (443 if scheme == "https" else 80)


def same_host(url: str, location: str) -> bool:
    """A redirect may keep the body and signature only on the same host and port (or http → https)."""
    here, there = urlsplit(url), urlsplit(location)
    if (here.hostname or "").lower() != (there.hostname or "").lower():
        return False
    if (here.scheme, _effective_port(here.scheme, here.port)) == (there.scheme, _effective_port(there.scheme, there.port)):
        return True
    upgrade = here.scheme == "http" and there.scheme == "https" and there.port in (None, 443)
    return upgrade and here.port in (None, 80)


def post(url: str, body: bytes, headers: dict[str, str], *, timeout_s: float | None = None) -> Answer:
    """POST `body` to `url`, following at most OUTBOUND_MAX_REDIRECTS same-host redirects with the same POST.

    A redirect to another host is refused, never followed: it would hand the signed body and headers
    to someone the admin did not name (save the final address in the channel instead).

    Raises OutboundRefused (policy), OutboundTimeout, or requests' own connection errors.
    """
    deadline = time.monotonic() + (timeout_s or settings.OUTBOUND_TIMEOUT_S)
    with _session() as session:
        for _hop in range(settings.OUTBOUND_MAX_REDIRECTS + 1):
            reason = literal_refusal(url)
            if reason:
                raise OutboundRefused(f"{origin(url)}: {reason}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OutboundTimeout(f"no answer within {timeout_s or settings.OUTBOUND_TIMEOUT_S} s")
            try:
                with session.post(url, data=body, headers=headers, timeout=remaining, allow_redirects=False,
                                  stream=True) as response:
                    content = _read(response, deadline)
            except requests.Timeout as exc:
                raise OutboundTimeout(f"{origin(url)}: {exc.__class__.__name__}") from exc
            if response.status_code in REDIRECTS and response.headers.get("Location"):
                location = urljoin(url, response.headers["Location"])
                if not same_host(url, location):
                    raise OutboundRefused(
                        f"{origin(url)} redirected to another host ({origin(location)}); not followed, so the signed "
                        "body stays with the receiver you named: save the final address instead"
                    )
                url = location
                continue
            return Answer(response.status_code, content, url)
    raise OutboundRefused(f"more than {settings.OUTBOUND_MAX_REDIRECTS} redirects")
