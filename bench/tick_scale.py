"""The control loop at fleet scale (issue 18 item 3): CPU and wall seconds of `scaling.loop.tick` over many
pools, and the size of what it stores per pool.

    .venv/bin/python bench/tick_scale.py                      # 1,000 pools in 10 clusters, 8 ticks
    .venv/bin/python bench/tick_scale.py --pools 200 --ticks 4

A database of its own (`--db`, dropped and created again) holds the pools, each with two SLOs, a planner
memory whose forecasters were fed 8 days of a daily curve (as a week-old pool's are) and the last hour of
samples. The signals come from a stub in place of Prometheus and the Kubernetes API (steady traffic with
noise, so the planner mostly holds and sometimes proposes): what is measured is Headroom's own work per
tick (reading the database, the decide step, writing memory, samples and proposals, alerts), not the
network. `cpu_s` is this process's; `postgres_cpu_s` is its own PostgreSQL backend's (read from /proc, so a
local server only). The verdict takes the busiest of `--workers` workers (clusters are ticked one worker
each) and asks whether its CPU seconds fit the period; the wall seconds on a shared machine are reported
too, but say more about the machine's other load than about Headroom.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def setup(args: argparse.Namespace) -> None:
    import psycopg

    with psycopg.connect(f"{args.server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{args.db}"')
    os.environ.update({
        "DATABASE_URL": f"{args.server}/{args.db}", "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "SECRET_KEY": "bench-only-secret-key", "DEBUG": "0", "HTTPS_ONLY": "false", "CELERY_ENABLED": "false",
        "PROMETHEUS_ENABLED": "true", "KUBERNETES_ENABLED": "true", "SLACK_ENABLED": "false",
        "WEBHOOKS_ENABLED": "false", "LOG_LEVEL": "WARNING",
    })
    import django

    django.setup()


def seed(args: argparse.Namespace, now) -> list:  # noqa: ANN001
    from django.core.management import call_command

    from api_load import forecaster_state
    from controlplane.choices import SloIndicator
    from controlplane.models import SLO, Cluster, Pool, Team
    from scaling.models import PlannerMemory, PoolStatus, SignalSample

    call_command("migrate", verbosity=0)
    team = Team.objects.create(name="Tick", slug="tick")
    clusters = [Cluster.objects.create(team=team, name=f"gpu-{c:02d}", kube_api_url=f"http://10.0.{c}.1:6443",
                                       prometheus_url=f"http://10.0.{c}.2:9090") for c in range(args.clusters)]
    pools = Pool.objects.bulk_create(
        Pool(cluster=clusters[i % len(clusters)], team=team, name=f"pool-{i:04d}", namespace="inference",
             deployment=f"vllm-{i:04d}", model_name=f"model-{i:04d}", gpu_type="H100", min_replicas=1,
             max_replicas=20, replica_capacity_rps=4.0) for i in range(args.pools))
    SLO.objects.bulk_create([SLO(pool=p, indicator=ind, threshold=thr, objective=0.99) for p in pools
                             for ind, thr in ((SloIndicator.TTFT_P95, 1000), (SloIndicator.E2E_P95, 8000))])
    PoolStatus.objects.bulk_create(PoolStatus(pool=p, desired_replicas=6, ready_replicas=6, observed_at=now)
                                   for p in pools)
    forecast = forecaster_state(now.timestamp())
    PlannerMemory.objects.bulk_create(PlannerMemory(pool=p, state={}, seasonal_forecast=forecast, history_backfilled_at=now)
                                  for p in pools)
    rng = random.Random(3)
    SignalSample.objects.bulk_create(
        (SignalSample(pool=p, at=now - timedelta(seconds=15 * k), request_rate_rps=20 + 2 * rng.random(),
                      queue_depth=2.0, ttft_p95_s=0.4, e2e_p95_s=4.0, ready_replicas=6, desired_replicas=6,
                      target_replicas=6) for p in pools for k in range(1, 241)), batch_size=5000)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return pools


def install_stubs(seed_: int) -> None:
    """Prometheus and the Kubernetes API answer from memory: steady traffic, noisy, every pool known."""
    from scaling import loop
    from scaling.drivers.cluster import ReplicaStatus
    from scaling.drivers.signals import SignalRead
    from scaling.engine.signals import PoolSignals, Reading

    rng = random.Random(seed_)

    class Source:
        def read(self, selectors):  # noqa: ANN001, ANN202
            pools = {}
            for selector in selectors:
                rate = 20 + 4 * rng.random()
                pools[selector.name] = PoolSignals(
                    pool=selector.name, request_rate_rps=Reading(rate, 5.0), queue_depth=Reading(12 * rng.random(), 5.0),
                    ttft_p95_s=Reading(0.3 + 0.4 * rng.random(), 5.0), e2e_p95_s=Reading(4.0, 5.0),
                    running_requests=Reading(24.0, 5.0), kv_cache_usage=Reading(0.5, 5.0))
            return SignalRead(pools)

    class Driver:
        def status(self, workload):  # noqa: ANN001, ANN202
            return ReplicaStatus(desired=6, ready=6)

    loop._signal_source = lambda cluster: Source()
    loop.cluster_driver = lambda cluster: Driver()


def backend_cpu_s() -> float | None:
    """CPU seconds so far of this process's own PostgreSQL backend (a local server; None when unreadable)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def memory_sizes() -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT avg(pg_column_size(seasonal_forecast)), avg(length(seasonal_forecast::text)), "
                       "avg(pg_column_size(state)) FROM scaling_plannermemory")
        stored, text, state = cursor.fetchone()
        cursor.execute("SELECT pg_total_relation_size('scaling_signalsample'), count(*) FROM scaling_signalsample")
        samples_bytes, samples = cursor.fetchone()
    return {"seasonal_forecast_stored_bytes": round(float(stored)), "seasonal_forecast_json_chars": round(float(text)),
            "planner_state_stored_bytes": round(float(state)),
            "signalsample_bytes_per_row": round(samples_bytes / max(samples, 1), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--ticks", type=int, default=8)
    parser.add_argument("--period", type=float, default=15.0, help="the loop's period, for the verdict")
    parser.add_argument("--workers", type=int, default=4, help="workers sharing the clusters, for the verdict")
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--db", default="headroom_tick_bench")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    setup(args)
    from django.utils import timezone

    from scaling import loop

    now = timezone.now().replace(microsecond=0)
    started = time.perf_counter()
    seed(args, now)
    print(f"seeded {args.pools} pools in {args.clusters} clusters in {time.perf_counter() - started:.0f} s", flush=True)
    install_stubs(5)
    pools = loop.Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules")
    ticks = []
    for n in range(1, args.ticks + 1):
        at = now + timedelta(seconds=15 * n)
        cpu0, wall0, pg0 = time.process_time(), time.perf_counter(), backend_cpu_s()
        report = loop.tick(list(pools), now=at)
        cpu, wall, pg1 = time.process_time() - cpu0, time.perf_counter() - wall0, backend_cpu_s()
        pg = None if pg0 is None or pg1 is None else pg1 - pg0
        ticks.append({"tick": n, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                      "postgres_cpu_s": None if pg is None else round(pg, 2), "errors": len(report.errors),
                      "proposals": sum(1 for p in report.pools if p.did)})
        print(json.dumps(ticks[-1]), flush=True)
        if report.errors:
            print("  first error:", next(iter(report.errors.items())), flush=True)
    steady = ticks[1:] or ticks  # the first tick also warms caches and the forecasters' first bins
    cpu = statistics.median(t["cpu_s"] for t in steady)
    wall = statistics.median(t["wall_s"] for t in steady)
    pg_values = [t["postgres_cpu_s"] for t in steady if t["postgres_cpu_s"] is not None]
    pg = statistics.median(pg_values) if pg_values else math.nan
    summary = {"pools": args.pools, "clusters": args.clusters, "median_cpu_s_per_tick": cpu,
               "median_wall_s_per_tick": wall, "cpu_ms_per_pool": round(1000 * cpu / args.pools, 2),
               "postgres_cpu_s_per_tick": pg, "sizes": memory_sizes()}
    # Clusters are ticked one worker each (the tick lease): `--workers` share them, the busiest gets
    # ceil(clusters / workers). With a core each (and PostgreSQL its own), its tick takes its CPU seconds.
    share = math.ceil(args.clusters / args.workers) / args.clusters
    summary["busiest_worker_cpu_s_per_tick"] = round((cpu + (0 if math.isnan(pg) else pg)) * share, 2)
    summary["busiest_worker_wall_s_here"] = round(wall * share, 2)  # on this machine, however loaded
    summary["fits_period_given_cores"] = summary["busiest_worker_cpu_s_per_tick"] < args.period
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"ticks": ticks, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
