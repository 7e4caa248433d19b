"""Model time: the sandbox's clock, optionally running faster than the wall clock.

Everything the emulators report (latencies in /metrics, cold starts) is in model seconds, so a
demo at `speed=10` shows the same numbers as a real pool while taking a tenth of the time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def to_wall(self, model_seconds: float) -> float: ...


@dataclass(frozen=True)
class ModelClock:
    speed: float = 1.0
    _origin: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError(f"speed must be > 0, got {self.speed}")

    def now(self) -> float:
        """Model seconds since the clock was made."""
        return (time.monotonic() - self._origin) * self.speed

    def to_wall(self, model_seconds: float) -> float:
        return model_seconds / self.speed

    def sleep(self, model_seconds: float) -> None:
        time.sleep(max(0.0, self.to_wall(model_seconds)))


@dataclass
class ManualClock:
    """A clock that only moves when told to: for replaying an engine offline (history backfill)."""

    t: float = 0.0

    def now(self) -> float:
        return self.t

    def to_wall(self, model_seconds: float) -> float:
        return 0.0
