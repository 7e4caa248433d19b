"""Failed logins are counted per user name and per client address; past either limit, logins wait.

Counters live in Django's cache (Redis in production, so every web worker counts the same
failures), in fixed windows of LOGIN_THROTTLE_WINDOW_S from the first failure. Only failures count.
A success clears its user name's counter but never the address's: an attacker who owns one account
must not reset the count of their guesses at everyone else's. API tokens are not passwords and
are not counted here.

A cache that does not answer (Redis down or hung) does not lock everyone out: the count is skipped with a
warning, and passwords are checked as always. The on-call signing in during an outage that took Redis
with it needs Headroom most.
"""
from __future__ import annotations

import hashlib
import ipaddress
import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Throttled:
    retry_after_s: int

    @property
    def message(self) -> str:
        minutes = max(1, -(-self.retry_after_s // 60))
        return (f"Too many failed logins for this user name or from your address. Try again in {minutes} "
                f"minute{'s' if minutes != 1 else ''}, or ask an admin to reset your password.")


def client_address(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or the one the outermost of TRUSTED_PROXY_HOPS proxies saw."""
    address = request.META.get("REMOTE_ADDR", "")
    hops = settings.TRUSTED_PROXY_HOPS
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    if hops and len(forwarded) >= hops:
        try:
            address = str(ipaddress.ip_address(forwarded[-hops]))
        except ValueError:
            pass  # a malformed entry: count against the proxy's peer rather than trust it
    return address


def _keys(username: str, address: str) -> dict[str, int]:
    """Cache key → the limit of failures it may hold."""
    def key(kind: str, value: str) -> str:
        return f"login-failures:{kind}:{hashlib.sha256(value.encode()).hexdigest()}"

    return {key("user", username.strip().casefold()): settings.LOGIN_FAILURES_PER_USER,
            key("address", address): settings.LOGIN_FAILURES_PER_ADDRESS}


def check(username: str, address: str) -> Throttled | None:
    """Whether a login for `username` from `address` must wait (None: it may be tried)."""
    limits = _keys(username, address)
    try:
        counts = cache.get_many(list(limits))
    except RedisError as exc:
        logger.warning("login throttling skipped: the cache did not answer (%s)", exc)
        return None
    if any(counts.get(key, 0) >= limit for key, limit in limits.items()):
        return Throttled(settings.LOGIN_THROTTLE_WINDOW_S)
    return None


def record_failure(username: str, address: str) -> None:
    try:
        for key in _keys(username, address):
            cache.add(key, 0, timeout=settings.LOGIN_THROTTLE_WINDOW_S)  # starts the window; no-op when counting
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.set(key, 1, timeout=settings.LOGIN_THROTTLE_WINDOW_S)
    except RedisError as exc:
        logger.warning("a failed login was not counted: the cache did not answer (%s)", exc)


def record_success(username: str) -> None:
    try:
        cache.delete(next(iter(_keys(username, ""))))
    except RedisError as exc:
        logger.warning("a login's failure count was not cleared: the cache did not answer (%s)", exc)
