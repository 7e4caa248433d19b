"""Channel settings, parsed once from the Channel's JSON into typed, validated dataclasses."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any

from controlplane.choices import PriorityTier
from incidents.outbound import literal_refusal


class SpecError(ValueError):
    """The channel's settings are not valid; the message says which field and why."""


def _time(raw: Any, name: str) -> time | None:
    if raw in (None, ""):
        return None
    try:
        return time.fromisoformat(str(raw))
    except ValueError:
        raise SpecError(f"quiet.{name} must be a time like 22:00, got {raw!r}") from None


def _url(raw: Any, name: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise SpecError(f"{name} is required")
    reason = literal_refusal(raw)
    if reason:
        raise SpecError(f"{name}: {reason}")
    return raw


@dataclass(frozen=True)
class QuietRule:
    """Mute new messages for pools of these tiers, always or between `start` and `end` (UTC)."""

    tiers: frozenset[str]
    start: time | None = None
    end: time | None = None

    @classmethod
    def parse(cls, raw: Any) -> QuietRule:
        if not isinstance(raw, dict):
            raise SpecError("each quiet rule must be an object like {\"tiers\": [\"batch\"]}")
        raw_tiers = raw.get("tiers") or []
        if not isinstance(raw_tiers, list) or not all(isinstance(tier, str) for tier in raw_tiers):
            raise SpecError(f"quiet.tiers must be a list of tier names among {', '.join(PriorityTier.values)}")
        tiers = frozenset(raw_tiers)
        unknown = tiers - set(PriorityTier.values)
        if not tiers or unknown:
            raise SpecError(f"quiet.tiers must name tiers among {', '.join(PriorityTier.values)}; got {sorted(tiers)}")
        start, end = _time(raw.get("start"), "start"), _time(raw.get("end"), "end")
        if (start is None) != (end is None):
            raise SpecError("quiet.start and quiet.end go together (or both are left out: always quiet)")
        return cls(tiers=tiers, start=start, end=end)

    def mutes(self, tier: str, at: datetime) -> bool:
        if tier not in self.tiers:
            return False
        if self.start is None or self.end is None:
            return True
        now = at.time()
        if self.start <= self.end:
            return self.start <= now < self.end
        return now >= self.start or now < self.end  # a window across midnight

    def describe(self) -> str:
        window = f" {self.start:%H:%M}–{self.end:%H:%M} UTC" if self.start and self.end else ""
        return f"quiet rule: {', '.join(sorted(self.tiers))} tier{window}"


def _quiet(raw: Any) -> tuple[QuietRule, ...]:
    if raw in (None, ""):
        return ()
    if not isinstance(raw, list):
        raise SpecError("quiet must be a list of rules")
    return tuple(QuietRule.parse(rule) for rule in raw)


@dataclass(frozen=True)
class ChannelSpec:
    url: str
    quiet: tuple[QuietRule, ...] = field(default=())

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> ChannelSpec:
        raise NotImplementedError

    def quiet_reason(self, tier: str, at: datetime) -> str:
        """Why a new message for a pool of `tier` is muted now, or ''."""
        return next((rule.describe() for rule in self.quiet if rule.mutes(tier, at)), "")


@dataclass(frozen=True)
class SlackSpec(ChannelSpec):
    """{"webhook_url": "https://hooks.slack.com/services/…", "quiet": [{"tiers": ["batch"]}]}"""

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> SlackSpec:
        return cls(url=_url(raw.get("webhook_url"), "webhook_url"), quiet=_quiet(raw.get("quiet")))


@dataclass(frozen=True)
class WebhookSpec(ChannelSpec):
    """{"url": "https://…", "secret": "…" (HMAC key, generated when left out), "quiet": [...]}"""

    secret: str = ""

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> WebhookSpec:
        secret = raw.get("secret")
        if not isinstance(secret, str) or len(secret) < 16:
            raise SpecError("secret must be a string of at least 16 characters")
        return cls(url=_url(raw.get("url"), "url"), secret=secret, quiet=_quiet(raw.get("quiet")))
