"""Outbound notification HTTP that cannot be pointed at the inside of our network (SSRF).

Every connection goes through the connect-time address guard (`controlplane.netguard`) with the
notifications' allow-list, `OUTBOUND_ALLOWED_NETWORKS`. Redirects are followed by hand, a bounded number of
times, only on the same host (the signed body never travels elsewhere), and each hop goes through the
same check. The whole exchange, redirects included, has one deadline.

A webhook's path and query are its secret: errors name the scheme and host only (`origin`), and
`redact` takes the secret parts out of any text before it is stored or shown.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

import requests
from django.conf import settings

from controlplane.netguard import CheckedAdapter, OutboundRefused, literal_refusal, refusal

__all__ = ["Answer", "OutboundRefused", "OutboundTimeout", "literal_refusal", "origin", "post", "redact", "refusal",
           "same_host"]

REDIRECTS = (301, 302, 303, 307, 308)
MAX_ANSWER_BYTES = 64 * 1024  # receivers answer "ok"; we never need more than an error message


class OutboundTimeout(Exception):
    """The exchange (all hops together) ran past its deadline."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    url: str  # where it came from, after redirects
    retry_after_s: float | None = None  # the Retry-After header in seconds (an HTTP date is read as such)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


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


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After in seconds from now: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


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
            return Answer(response.status_code, content, url, retry_after(response.headers.get("Retry-After")))
    raise OutboundRefused(f"more than {settings.OUTBOUND_MAX_REDIRECTS} redirects")
