"""Model time: the sandbox's clock, optionally running faster than the wall clock.

Everything the emulators report (latencies in /metrics, cold starts) is in model seconds, so a
demo at `speed=10` shows the same numbers as a real pool while taking a tenth of the time.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def to_wall(self, model_seconds: float) -> float: ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...


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

    def call_later(self, model_seconds: float, callback: Callable[[], None]) -> Cancellable:
        """Run `callback` on its own thread once `model_seconds` have passed (a cold start's end)."""
        timer = threading.Timer(max(0.0, self.to_wall(model_seconds)), callback)
        timer.daemon = True
        timer.start()
        return timer


@dataclass(eq=False)
class _Due:
    at: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class ManualClock:
    """A clock that only moves when told to: for replaying an engine offline (history backfill), and
    for tests that must see a state (a loading replica, a queue) for as long as they look at it."""

    t: float = 0.0
    _due: list[_Due] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def now(self) -> float:
        return self.t

    def to_wall(self, model_seconds: float) -> float:
        return 0.0

    def call_later(self, model_seconds: float, callback: Callable[[], None]) -> Cancellable:
        """Run `callback` when `advance` passes its time; at once (on its own thread) if that is now."""
        due = _Due(self.t + model_seconds, callback)
        if model_seconds <= 0:
            threading.Thread(target=callback, daemon=True).start()
            return due
        with self._lock:
            self._due.append(due)
        return due

    def advance(self, model_seconds: float) -> None:
        """Move model time on, then run the callbacks that fell due, earliest first, before returning."""
        with self._lock:
            self.t += model_seconds
            ready = sorted((due for due in self._due if due.at <= self.t), key=lambda due: due.at)
            self._due = [due for due in self._due if due.at > self.t]
        for due in ready:
            if not due.cancelled:
                due.callback()
