"""Cost of the alert rules over days (docs/alerts.md, "Over days"): the hourly history they read and a
whole alert evaluation, for POOLS pools with 9 days of 15-second samples each.

    createdb -h 127.0.0.1 -U postgres headroom_bench_alerts
    DEBUG=1 DATABASE_URL=postgres://postgres@127.0.0.1:5432/headroom_bench_alerts .venv/bin/python manage.py migrate
    DEBUG=1 DATABASE_URL=postgres://postgres@127.0.0.1:5432/headroom_bench_alerts .venv/bin/python bench/alerts_over_days.py 10

It writes its pools (cluster `bench-alerts`) into that database once and leaves them there; wall times,
median of 7 runs unless said otherwise.
"""
from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django.setup()

from django.utils import timezone  # noqa: E402

from controlplane.models import Cluster, Pool, Team  # noqa: E402
from incidents import alerts  # noqa: E402
from incidents.models import HourlyRollup  # noqa: E402
from scaling.models import SignalSample  # noqa: E402

DAYS = 9  # what the loop keeps
STEP = timedelta(seconds=15)  # one tick


def ensure_pools(count: int) -> list[Pool]:
    team, _ = Team.objects.get_or_create(slug="bench-alerts", defaults={"name": "Bench alerts"})
    cluster, _ = Cluster.objects.get_or_create(name="bench-alerts", defaults={"team": team,
                                                                              "kube_api_url": "http://127.0.0.1:1"})
    end = timezone.now().replace(microsecond=0)
    for n in range(count):
        pool, created = Pool.objects.get_or_create(cluster=cluster, name=f"p{n}", defaults={
            "team": team, "namespace": "bench", "deployment": f"vllm-{n}", "model_name": "m", "gpu_type": "H100",
            "min_replicas": 1, "max_replicas": 8})
        if created:
            rows, at = [], end - timedelta(days=DAYS)
            while at <= end:
                rate = 10 + 5 * math.sin(at.timestamp() / 86_400 * 2 * math.pi)
                rows.append(SignalSample(pool=pool, at=at, request_rate_rps=rate, ttft_p95_s=0.4, queue_depth=1.0,
                                         prefix_cache_hit_rate=0.5, ready_replicas=2))
                at += STEP
            SignalSample.objects.bulk_create(rows, batch_size=5000)
    return list(Pool.objects.filter(cluster=cluster).select_related("team", "cluster").prefetch_related("slos")[:count])


def median_ms(run: Callable[[], object], repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return sorted(times)[repeats // 2] * 1000


def once_ms(run: Callable[[], object]) -> float:
    return median_ms(run, 1)


def main() -> None:
    pools = ensure_pools(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
    now = SignalSample.objects.filter(pool__in=pools).latest("at").at
    print(f"{len(pools)} pools, {SignalSample.objects.filter(pool__in=pools).count():,} samples")
    HourlyRollup.objects.filter(pool__in=pools).delete()
    print(f"rollups built (once per pool): {once_ms(lambda: alerts.hourly_history(pools, now)):.0f} ms")
    print(f"hourly history within the hour: {median_ms(lambda: alerts.hourly_history(pools, now)):.0f} ms")
    later = now + timedelta(hours=1)
    print(f"the first of the next hour: {once_ms(lambda: alerts.hourly_history(pools, later)):.0f} ms")
    print(f"evaluate_alerts: {median_ms(lambda: alerts.evaluate_alerts(pools, later)):.0f} ms")
    alerts.hourly_history = lambda pools, now: {}  # type: ignore[assignment]
    print(f"evaluate_alerts without the history over days: {median_ms(lambda: alerts.evaluate_alerts(pools, later)):.0f} ms")


if __name__ == "__main__":
    main()
