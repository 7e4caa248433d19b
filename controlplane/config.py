"""Typed views of the JSON settings stored on clusters.

JSON fields are parsed here once, into frozen dataclasses, so no other code pokes at raw dicts.
Parsers raise ValueError with a message fit to show a user next to the field.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


@dataclass(frozen=True)
class OffHoursWindow:
    """A weekly window (in the cluster's time zone) where proposals may be auto-approved."""

    weekdays: tuple[int, ...]  # 0 = Monday
    start: time
    end: time  # may be earlier than start: the window then runs past midnight

    def contains(self, weekday: int, at: time) -> bool:
        if self.start <= self.end:
            return weekday in self.weekdays and self.start <= at < self.end
        # Past midnight: the part after midnight belongs to the previous day's window.
        if at >= self.start:
            return weekday in self.weekdays
        return at < self.end and (weekday - 1) % 7 in self.weekdays

    def contains_instant(self, at: datetime, zone: ZoneInfo) -> bool:
        """Whether the instant `at` is inside the window on the wall clock of `zone`.

        The wall-clock time decides, with one exception: when the clocks go back, an occurrence that
        ended on the first pass of the repeated hour does not open again on the second
        (docs/control-loop.md, "Windows and the wall clock").
        """
        local = at.astimezone(zone)
        if not self.contains(local.weekday(), local.time()):
            return False
        started_today = self.start <= self.end or local.time() >= self.start
        first_day = local.date() if started_today else local.date() - timedelta(days=1)
        return at < occurrence(first_day, self.start, self.end, zone)[1]


def wall_clock_instant(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The instant the wall clock of `zone` shows `at` on `day`: the first pass of a time shown twice
    (clocks going back), the first instant after the gap for a time never shown (clocks going forward)."""
    first = datetime.combine(day, at, zone)
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == first.replace(tzinfo=None):
        return first
    # In the gap. Python reads a skipped time with the offset before the change (an instant after the
    # gap by the gap's length) and, at fold=1, with the offset after it (one before the gap): the change
    # lies between the two, on a whole second.
    before, after = int(first.replace(fold=1).timestamp()), int(first.timestamp())
    offset_after = datetime.fromtimestamp(after, zone).utcoffset()
    while after - before > 1:
        middle = (before + after) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset_after:
            after = middle
        else:
            before = middle
    return datetime.fromtimestamp(after, zone)


def occurrence(day: date, start: time, end: time, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """A weekly window's occurrence that starts on `day`, as instants; an end not after the start is
    on the next day."""
    end_day = day + timedelta(days=1) if end <= start else day
    return wall_clock_instant(day, start, zone), wall_clock_instant(end_day, end, zone)


@dataclass(frozen=True)
class GpuPrice:
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float | None = None


@dataclass(frozen=True)
class ApprovalPolicy:
    """Who may approve what, and what is approved without a person (per pool)."""

    expiry_minutes: int = 10
    # Changes of at least this many replicas, up or down, need a second person (no self-approval);
    # None: off. A person's own approved changes to the pool within the window count together.
    two_person_min_delta: int | None = None
    two_person_window_minutes: int = 60
    auto_approve_off_hours: bool = True
    auto_approve_reactive: bool = True
    # The planner's predictive scale-ups (the forecast one cold start ahead) share the guardrail: they
    # are the safety net acting a cold start early, not the 30-minute pre-scale that waits for a person.
    auto_approve_predictive: bool = True
    # Reactive (and predictive) scale-ups are auto-approved only up to this many added replicas (the
    # guardrail); a larger one runs this share at once and leaves the rest to a person.
    reactive_max_step: int = 4
    # ...or this share of the replicas the pool runs, in percent, where that is more: at 100, the Kubernetes
    # HPA's own scale-up limit, max(4 pods, 100 %), which the planner's rate limit also keeps. None: the step
    # alone (+4 is a quarter of a 16-replica pool). 100 since session 20: at +4 a 10x surge's reaction waits
    # for a person and stays behind a tuned HPA's even from the same pool (docs/benchmarks.md, "Paired draws").
    reactive_max_percent: int | None = 100
    # The planner's scale-downs that held through the stabilization window and keep the warm floor.
    auto_approve_scale_down: bool = True

    def guardrail(self, current: int) -> int:
        """The most replicas policy adds at once to a pool running `current`."""
        return guardrail_step(self.reactive_max_step, self.reactive_max_percent, current)


def guardrail_step(step: int, percent: int | None, current: int) -> int:
    """max(step, percent of `current` rounded up): the HPA's max(pods, percent) rule (percent None: off)."""
    return max(step, math.ceil(max(current, 0) * percent / 100) if percent else 0)


# Settings whose null means "off".
NULLABLE_APPROVAL_KEYS = ("two_person_min_delta", "reactive_max_percent")


def parse_approval_policy(raw: Any) -> ApprovalPolicy:
    if raw in (None, ""):
        return ApprovalPolicy()
    if not isinstance(raw, dict):
        raise ValueError("must be an object, e.g. {\"expiry_minutes\": 10, \"two_person_min_delta\": 8}")
    defaults = ApprovalPolicy()
    unknown = set(raw) - set(defaults.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown keys: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in NULLABLE_APPROVAL_KEYS and value is None:
            values[key] = None
        elif key.startswith("auto_"):
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be true or false")
            values[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a whole number >= 1")
            values[key] = value
    if values.get("expiry_minutes", defaults.expiry_minutes) > 24 * 60:
        raise ValueError("expiry_minutes must be at most 1440 (a day)")
    if values.get("two_person_window_minutes", defaults.two_person_window_minutes) > 7 * 24 * 60:
        raise ValueError("two_person_window_minutes must be at most 10080 (a week)")
    if (values.get("reactive_max_percent") or 0) > 1000:
        raise ValueError("reactive_max_percent must be at most 1000 (11 times the pool at once)")
    return ApprovalPolicy(**values)


def parse_time_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (use an IANA name such as 'Europe/Paris')") from None


def _parse_hhmm(value: Any, where: str) -> time:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string 'HH:MM'")
    try:
        parsed = time.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{where} must be 'HH:MM', got {value!r}") from None
    if parsed.tzinfo is not None:  # windows are in the cluster's time zone; an offset here would contradict it
        raise ValueError(f"{where} must be 'HH:MM' without a UTC offset (windows follow the cluster's time_zone), "
                         f"got {value!r}")
    return parsed


def parse_off_hours(raw: Any) -> list[OffHoursWindow]:
    """Parse `[{"weekdays": [0..6], "start": "HH:MM", "end": "HH:MM"}, ...]`."""
    if raw in (None, ""):
        return []
    if not isinstance(raw, list):
        raise ValueError("must be a list of windows like {\"weekdays\": [5, 6], \"start\": \"00:00\", \"end\": \"23:59\"}")
    windows = []
    for index, item in enumerate(raw):
        where = f"window {index}"
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be an object")
        unknown = set(item) - {"weekdays", "start", "end"}
        if unknown:
            raise ValueError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        weekdays = item.get("weekdays")
        if not isinstance(weekdays, list) or not weekdays or not all(
            isinstance(day, int) and not isinstance(day, bool) and 0 <= day <= 6 for day in weekdays
        ):
            raise ValueError(f"{where}: weekdays must be a non-empty list of integers 0 (Monday) to 6 (Sunday)")
        start = _parse_hhmm(item.get("start"), f"{where}: start")
        end = _parse_hhmm(item.get("end"), f"{where}: end")
        if start == end:
            raise ValueError(f"{where}: start and end must differ")
        windows.append(OffHoursWindow(tuple(sorted(set(weekdays))), start, end))
    return windows


MAX_GPU_PRICE_USD_PER_HOUR = 1000.0  # an 8-GPU node's hour costs under $100; more is a typo


def _price(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} must be a number >= 0")
    try:
        price = float(value)
    except OverflowError:  # an integer of hundreds of digits
        price = math.inf
    if not 0 <= price <= MAX_GPU_PRICE_USD_PER_HOUR:  # also refuses NaN and the JSON decoder's inf for 1e400
        raise ValueError(f"{where} must be a number from 0 to {MAX_GPU_PRICE_USD_PER_HOUR:g} (USD per GPU-hour)")
    return price


def parse_gpu_prices(raw: Any) -> dict[str, GpuPrice]:
    """Parse `{"H100": {"on_demand": 4.0, "spot": 1.9}, ...}` (USD per GPU-hour)."""
    if raw in (None, ""):
        return {}
    if not isinstance(raw, dict):
        raise ValueError("must be an object mapping GPU type to {\"on_demand\": USD/h, \"spot\": USD/h}")
    prices = {}
    for gpu_type, item in raw.items():
        if not isinstance(item, dict) or "on_demand" not in item:
            raise ValueError(f"{gpu_type}: needs at least an 'on_demand' price in USD per GPU-hour")
        unknown = set(item) - {"on_demand", "spot"}
        if unknown:
            raise ValueError(f"{gpu_type}: unknown keys: {', '.join(sorted(unknown))}")
        values = {}
        for key in ("on_demand", "spot"):
            value = item.get(key)
            if value is None and key == "spot":
                continue
            values[key] = _price(value, f"{gpu_type}: {key}")
        prices[gpu_type] = GpuPrice(values["on_demand"], values.get("spot"))
    return prices


# --- cluster credentials ---------------------------------------------------------------------------
# A cluster stores where its credentials are, never the credentials: the files live in a mounted
# Secret (settings.KUBE_CREDENTIALS_DIR), so nothing secret is in the database, the API or the audit log.
IN_CLUSTER = "in-cluster"
_CREDENTIAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class CredentialsRef:
    kind: str  # "none", "in-cluster", "token" or "kubeconfig"
    name: str = ""  # the file's name in the credentials directory (token and kubeconfig)


def parse_credentials_ref(raw: Any) -> CredentialsRef:
    """Parse a cluster's `credentials_ref`: '', 'in-cluster', 'token:NAME' or 'kubeconfig:NAME'."""
    text = (raw or "").strip()
    if not text:
        return CredentialsRef("none")
    if text == IN_CLUSTER:
        return CredentialsRef(IN_CLUSTER)
    kind, _, name = text.partition(":")
    if kind in ("token", "kubeconfig") and _CREDENTIAL_NAME.fullmatch(name):
        return CredentialsRef(kind, name)
    raise ValueError(
        "use 'token:NAME' (a bearer token file) or 'kubeconfig:NAME' (a kubeconfig file), NAME being a file in "
        "the mounted credentials directory (letters, digits, '.', '_', '-'); 'in-cluster' for Headroom's own "
        "service account; or leave it empty for an API that needs no credentials"
    )



_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800, "y": 31_536_000}
RATE_WINDOW_MIN_S, RATE_WINDOW_MAX_S = 5.0, 600.0


def duration_s(window: str) -> float:
    """Seconds in a PromQL duration such as "30s", "1m" or "1m30s"; ValueError for anything else."""
    parts = _DURATION_PART.findall(window)
    if not parts or "".join(n + u for n, u in parts) != window:
        raise ValueError(f"not a Prometheus duration: {window!r} (use e.g. 30s, 1m, 1m30s)")
    return sum(int(number) * _UNIT_S[unit] for number, unit in parts)


def parse_rate_window(raw: Any) -> float:
    """A cluster's `prometheus_rate_window` in seconds: a PromQL duration from 5 s to 10 minutes.

    Rates over a window shorter than about four scrape intervals are noisy or empty; one much longer
    than the time a surge takes to matter reports the surge late. 1m suits the common 15 s scrape.
    """
    text = raw if isinstance(raw, str) else ""
    seconds = duration_s(text.strip())
    if not RATE_WINDOW_MIN_S <= seconds <= RATE_WINDOW_MAX_S:
        raise ValueError(f"must be from {RATE_WINDOW_MIN_S:g}s to {RATE_WINDOW_MAX_S / 60:g}m "
                         "(about four of Prometheus' scrape intervals; 1m for a 15 s scrape)")
    return seconds
