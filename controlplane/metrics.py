"""Headroom's own `/metrics` (Prometheus text format): is the control loop alive and on time, what did
it decide and why, what waits for people, what failed to reach them.

Two sources, both right with any number of web and worker processes:
- the database, read at each scrape: active proposals by state, pending notifications, disabled channels,
  firing alerts, and how long ago each cluster's last tick was recorded (whatever process ticked). Only
  what is active, through an index: a count of every row by state would read the whole history at each
  scrape, a year of it by then;
- counters that the loop and the outbox add to in the cache: tick durations and lateness, decisions by
  reason, tick failures, proposals finished by state, delivery failures. Production's cache is Redis (`CACHE_URL`), so every worker adds to the same
  numbers; the demo's loop runs in the web process, whose memory cache serves them. A cache that lost
  them starts again from zero, which Prometheus reads as a counter reset.
"""
from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db.models import Count
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

TICK_PERIOD_S = 15.0  # the beat's tick period (controlplane/celery.py)
TICK_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0)
LATENESS_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0)
_PREFIX = "headroom-metrics:"
logger = logging.getLogger(__name__)


def _never_raises(record: Callable[..., None]) -> Callable[..., None]:
    """Counting must never break what is counted: a cache outage loses numbers, not ticks or deliveries."""

    @functools.wraps(record)
    def guarded(*args: Any, **kwargs: Any) -> None:
        try:
            record(*args, **kwargs)
        except Exception:  # noqa: BLE001 - whatever the cache raised
            logger.warning("metrics: could not record %s", record.__name__, exc_info=True)

    return guarded


def _add(key: str, amount: int = 1) -> None:
    cache.add(_PREFIX + key, 0, timeout=None)
    try:
        cache.incr(_PREFIX + key, amount)
    except ValueError:  # evicted between add and incr: start again
        cache.set(_PREFIX + key, amount, timeout=None)


def _count(key: str) -> None:
    """A labelled counter: the scrape finds it through the set of known keys (a cache cannot list its keys).

    The set is rewritten without a lock; a key lost to a race is added back by its next increment."""
    _add(key)
    known = cache.get(_PREFIX + "known") or set()
    if key not in known:
        cache.set(_PREFIX + "known", known | {key}, timeout=None)


def _observe(name: str, value_s: float, buckets: tuple[float, ...]) -> None:
    le = next((f"{bound:g}" for bound in buckets if value_s <= bound), "+Inf")
    _add(f"{name}:bucket:{le}")
    _add(f"{name}:count")
    _add(f"{name}:sum_us", int(value_s * 1_000_000))


@_never_raises
def record_tick(started: float, finished: float, decisions: Iterable[dict]) -> None:
    """After one tick (`time.time()` stamps): its duration, its lateness, and each pool's decision reasons."""
    _observe("tick_duration", max(0.0, finished - started), TICK_BUCKETS_S)
    previous = cache.get(_PREFIX + "tick_started")
    cache.set(_PREFIX + "tick_started", started, timeout=None)
    if previous is not None:  # later than one period after the previous start
        _observe("tick_lateness", max(0.0, started - float(previous) - TICK_PERIOD_S), LATENESS_BUCKETS_S)
    for decided in decisions:
        codes = {decided.get("binding") or "unknown", *(decided.get("reasons") or ())}
        for code in codes:
            _count(f"decision:{code}")


@_never_raises
def record_tick_failure(cluster: str, stage: str) -> None:
    """A tick that failed for `cluster`: `read` once a tick when its reads failed, `pool` per pool whose tick raised.

    The heartbeat counts a recorded failure as a tick (the loop ran), so this is what says it ran in vain."""
    _count(f"tick_failure:{cluster}:{stage}")


@_never_raises
def record_proposal_finished(state: str) -> None:
    """A proposal reached a terminal state (succeeded, failed, rejected, expired, superseded)."""
    _count(f"proposal_finished:{state}")


@_never_raises
def record_notification_failure(kind: str, *, final: bool) -> None:
    """A failed delivery attempt of a channel `kind`; `final` when it gave up (or the failure was permanent)."""
    _count(f"notification_failure:{kind}:{'final' if final else 'retrying'}")


def _cached_histogram(name: str, help_text: str, buckets: tuple[float, ...]) -> HistogramMetricFamily:
    values = cache.get_many([f"{_PREFIX}{name}:bucket:{bound:g}" for bound in buckets]
                            + [f"{_PREFIX}{name}:bucket:+Inf", f"{_PREFIX}{name}:count", f"{_PREFIX}{name}:sum_us"])
    cumulative, series = 0, []
    for bound in (*(f"{b:g}" for b in buckets), "+Inf"):
        cumulative += int(values.get(f"{_PREFIX}{name}:bucket:{bound}", 0))
        series.append((bound, cumulative))
    sum_s = int(values.get(f"{_PREFIX}{name}:sum_us", 0)) / 1_000_000
    return HistogramMetricFamily(f"headroom_{name}_seconds", help_text, buckets=series, sum_value=sum_s)


def _cached_counter_family(prefix: str, name: str, help_text: str, labels: list[str]) -> CounterMetricFamily:
    """The cache's counters `prefix:label:…:label` as one family, its label values from the key's last parts."""
    family = CounterMetricFamily(name, help_text, labels=labels)
    for key, count in sorted(_cached_counters(f"{prefix}:").items()):
        family.add_metric(key.rsplit(":", len(labels) - 1), count)
    return family


def _cached_counters(prefix: str) -> dict[str, int]:
    """Every cached counter whose key starts with `prefix` (the label values follow it)."""
    names = cache.get(_PREFIX + "known") or set()
    return {name[len(prefix):]: int(cache.get(_PREFIX + name) or 0) for name in names if name.startswith(prefix)}


class HeadroomCollector:
    """Collected at each scrape; no state of its own."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        from controlplane.models import Cluster
        from incidents.alerts import last_ticks
        from incidents.choices import NotificationState
        from incidents.models import Alert, Channel, Notification
        from scaling.choices import ACTIVE_STATES
        from scaling.models import Proposal

        now = self.now or timezone.now()
        yield _cached_histogram("tick_duration", "How long one control-loop tick took (all clusters).", TICK_BUCKETS_S)
        yield _cached_histogram("tick_lateness", f"How much later than {TICK_PERIOD_S:g} s after the previous one a tick "
                                                 "started.", LATENESS_BUCKETS_S)
        yield _cached_counter_family("decision", "headroom_decisions", "Pool decisions by the planner's reason codes: "
                                     "the binding term and each reason given.", ["reason"])
        yield _cached_counter_family("tick_failure", "headroom_tick_failures", "Ticks that failed, by cluster and "
                                     "stage: read (the cluster's reads failed, once a tick), pool (a pool's tick "
                                     "raised).", ["cluster", "stage"])
        yield _cached_counter_family("notification_failure", "headroom_notification_failures", "Failed delivery "
                                     "attempts by channel kind; outcome=final when the notification gave up.",
                                     ["kind", "outcome"])
        proposals = GaugeMetricFamily("headroom_proposals", "Proposals in an active state (pending, approved, "
                                      "executing).", labels=["state"])
        for state, count in Proposal.objects.filter(state__in=ACTIVE_STATES).order_by().values_list("state") \
                .annotate(n=Count("pk")):
            proposals.add_metric([state], count)
        yield proposals
        yield _cached_counter_family("proposal_finished", "headroom_proposals_finished", "Proposals that reached a "
                                     "terminal state, by state.", ["state"])
        notifications = GaugeMetricFamily("headroom_notifications", "Notifications waiting to be sent (the outbox's "
                                          "backlog).", labels=["state"])
        notifications.add_metric([NotificationState.PENDING],
                                 Notification.objects.filter(state=NotificationState.PENDING).count())
        yield notifications
        yield GaugeMetricFamily("headroom_channels_disabled", "Notification channels disabled after a permanent failure.",
                                value=Channel.objects.filter(enabled=False).count())
        alerts = GaugeMetricFamily("headroom_alerts_firing", "Firing alerts by tier.", labels=["tier"])
        for tier, count in Alert.objects.filter(state="firing").order_by().values_list("tier").annotate(n=Count("pk")):
            alerts.add_metric([tier], count)
        yield alerts
        age = GaugeMetricFamily("headroom_cluster_last_tick_age_seconds", "Seconds since the last tick recorded for "
                                "the cluster (a stored sample or a recorded failure); +Inf before the first.",
                                labels=["cluster"])
        names = dict(Cluster.objects.values_list("pk", "name"))
        for cluster_id, last in sorted(last_ticks(now).items()):
            # Never ticked reads as stalled, not as no series: a loop that never started must page too.
            seconds = math.inf if last is None else max(0.0, (now - last).total_seconds())
            age.add_metric([names.get(cluster_id, str(cluster_id))], seconds)
        yield age


def exposition(now: datetime | None = None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HeadroomCollector(now))  # type: ignore[arg-type]
    return generate_latest(registry)


__all__ = ["HeadroomCollector", "exposition", "record_notification_failure", "record_tick", "record_tick_failure"]
