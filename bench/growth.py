"""What a year of ticks leaves in the database: rows per table per pool per simulated day, and what 50 pools
reach in a year.

    .venv/bin/python bench/growth.py                         # 2 steady + 2 bursty pools, 1 simulated day
    .venv/bin/python bench/growth.py --days 2 --json bench/results/growth.json

The real beat runs on a moved clock (`django.utils.timezone.now` follows it, so `auto_now_add` columns do too),
every 15 simulated seconds: `scaling.loop.tick` (read, decide, propose, alerts, expiry, sample pruning),
`scaling.services.advance` (executions and readiness), the notification outbox's sweep and the heartbeat;
every minute the reminders. A database of its own (`--db`, dropped and created again). Prometheus and the
Kubernetes API are stubs answering from memory: the stub cluster runs what was written and makes the new
replicas Ready 60 s later. Two kinds of pool:

- steady: 20-24 req/s on 6 replicas of 4 req/s, latency well within the SLO (the planner mostly holds);
- bursty: the same base, and every 3 hours a 10x surge for 20 minutes whose latency (TTFT p99 8 s) fires the P0
  alerts and opens an incident, and whose reactive scale-ups policy approves. An on-call person resolves an
  incident an hour after it opened. Nobody decides on proposals that wait for a person: they expire.

Webhook notifications are switched off (rows are written, as skipped), so nothing leaves the process.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import datetime, timedelta, timezone as tz
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PERIOD_S = 15
SURGE_EVERY_S = 3 * 3600
SURGE_FOR_S = 20 * 60
READY_AFTER_S = 60
RESOLVE_AFTER = timedelta(hours=1)


def setup(args: argparse.Namespace) -> None:
    import psycopg

    with psycopg.connect(f"{args.server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{args.db}"')
    os.environ.update({
        "DATABASE_URL": f"{args.server}/{args.db}", "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "SECRET_KEY": "bench-only-secret-key", "DEBUG": "0", "HTTPS_ONLY": "false", "CELERY_ENABLED": "false",
        "PROMETHEUS_ENABLED": "true", "KUBERNETES_ENABLED": "true", "SLACK_ENABLED": "false",
        "WEBHOOKS_ENABLED": "false", "LOG_LEVEL": "ERROR", "DATABASE_CONN_MAX_AGE": "0",
    })
    import django

    django.setup()


class Clock:
    """The simulated now: `django.utils.timezone.now` answers it, so every default and auto_now does."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def install(self) -> None:
        from django.utils import timezone

        timezone.now = lambda: self.now


def seed(args: argparse.Namespace):  # noqa: ANN201
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from controlplane.choices import Role, SloIndicator
    from controlplane.models import SLO, Cluster, Membership, Pool, Team
    from incidents.models import Channel

    call_command("migrate", verbosity=0)
    team = Team.objects.create(name="Growth", slug="growth")
    oncall = User.objects.create_user("oncall")
    Membership.objects.create(user=oncall, team=team, role=Role.OPERATOR)
    cluster = Cluster.objects.create(team=team, name="gpu-growth", kube_api_url="http://10.0.0.1:6443",
                                     prometheus_url="http://10.0.0.2:9090")
    Channel.objects.create(team=team, name="oncall", kind="webhook",
                           settings={"url": "https://hooks.example.com/headroom", "secret": "s" * 32})
    pools = []
    for i in range(args.steady + args.bursty):
        kind = "steady" if i < args.steady else "bursty"
        pool = Pool.objects.create(cluster=cluster, team=team, name=f"{kind}-{i}", namespace="inference",
                                   deployment=f"vllm-{i}", model_name=f"model-{i}", gpu_type="H100",
                                   min_replicas=1, max_replicas=40, replica_capacity_rps=4.0)
        SLO.objects.create(pool=pool, indicator=SloIndicator.TTFT_P95, threshold=1000, objective=0.99)
        SLO.objects.create(pool=pool, indicator=SloIndicator.E2E_P95, threshold=8000, objective=0.99)
        pools.append((pool, kind))
    return oncall, pools


class World:
    """Prometheus and the Kubernetes API, from memory: traffic by profile, replicas as written."""

    def __init__(self, clock: Clock, kinds: dict[str, str], seed_: int) -> None:
        self.clock, self.kinds, self.rng = clock, kinds, random.Random(seed_)
        self.replicas: dict[str, list] = {}  # deployment -> [desired, [(ready_at, count)...], generation]

    def _state(self, deployment: str) -> list:
        return self.replicas.setdefault(deployment, [6, [], 1])

    def ready(self, deployment: str) -> int:
        desired, arriving, _ = self._state(deployment)
        waiting = sum(count for at, count in arriving if at > self.clock.now)
        return desired - waiting

    def rate(self, kind: str) -> float:
        base = 20 + 4 * self.rng.random()
        in_surge = kind == "bursty" and self.clock.now.timestamp() % SURGE_EVERY_S < SURGE_FOR_S
        return base * (10 if in_surge else 1)

    def signals(self, name: str, deployment: str):  # noqa: ANN201
        from scaling.engine.signals import PoolSignals, Reading

        rate = self.rate(self.kinds[deployment])
        ready = max(self.ready(deployment), 1)
        load = rate / (4.0 * ready)
        ttft_p95 = 0.3 + 0.3 * self.rng.random() if load < 0.9 else 4.0 * load
        fresh = lambda value: Reading(float(value), 5.0)  # noqa: E731
        return PoolSignals(pool=name, request_rate_rps=fresh(rate), queue_depth=fresh(max(0.0, (load - 0.8) * 50)),
                           ttft_p95_s=fresh(ttft_p95), ttft_p99_s=fresh(ttft_p95 * 1.5),
                           e2e_p95_s=fresh(4.0 + ttft_p95), e2e_p99_s=fresh(5.0 + ttft_p95 * 1.5),
                           running_requests=fresh(min(load, 1.0) * 8 * ready), kv_cache_usage=fresh(min(load, 1.0) * 0.8),
                           error_rate=fresh(0.0), prefix_cache_hit_rate=fresh(0.4))

    def install(self, deployments: dict[str, str]) -> None:
        from scaling import loop, services
        from scaling.drivers.cluster import ReplicaStatus, ScaleOutcome
        from scaling.drivers.signals import SignalRead

        world = self

        class Source:
            def read(self, selectors):  # noqa: ANN001, ANN202
                return SignalRead({s.name: world.signals(s.name, deployments[s.name]) for s in selectors})

            def rate_history(self, selectors, start, end, step):  # noqa: ANN001, ANN202
                return {}  # a new Prometheus: the forecasts learn from the ticks' own samples

        class Driver:
            def status(self, workload):  # noqa: ANN001, ANN202
                return ReplicaStatus(desired=world._state(workload.deployment)[0], ready=world.ready(workload.deployment))

            def check_writable(self, workload) -> None:  # noqa: ANN001
                return None

            def generation(self, workload):  # noqa: ANN001, ANN202
                return world._state(workload.deployment)[2]

            def scale(self, workload, replicas, premise=None):  # noqa: ANN001, ANN202
                state = world._state(workload.deployment)
                previous = state[0]
                if replicas > previous:
                    state[1].append((world.clock.now + timedelta(seconds=READY_AFTER_S), replicas - previous))
                state[0], state[2] = replicas, state[2] + (replicas != previous)
                return ScaleOutcome(previous=previous, target=replicas, wrote=replicas != previous)

            def added_pods_ready_at(self, workload, since, count):  # noqa: ANN001, ANN202
                ready_at = since + timedelta(seconds=READY_AFTER_S)
                return ready_at if ready_at <= world.clock.now else None

            def endpoints(self, workload):  # noqa: ANN001, ANN202
                return {}

            def set_routable(self, namespace, pod, routable) -> None:  # noqa: ANN001
                return None

        loop._signal_source = lambda cluster: Source()
        loop.cluster_driver = lambda cluster: Driver()
        services.cluster_driver = lambda cluster: Driver()


def counts() -> dict[str, int]:
    from django.apps import apps

    return {model._meta.label: model.objects.count() for app in ("controlplane", "scaling", "incidents")
            for model in apps.get_app_config(app).get_models()}


def row_bytes() -> dict[str, int]:
    """The mean stored size of a row (compressed, TOAST included; not its indexes) of each table with rows."""
    from django.apps import apps
    from django.db import connection

    sizes = {}
    with connection.cursor() as cursor:
        for app in ("controlplane", "scaling", "incidents"):
            for model in apps.get_app_config(app).get_models():
                cursor.execute(f'SELECT avg(pg_column_size(t.*)) FROM "{model._meta.db_table}" t')
                mean = cursor.fetchone()[0]
                if mean is not None:
                    sizes[model._meta.label] = round(float(mean))
    return sizes


def resolve_old_incidents(oncall, now: datetime) -> int:  # noqa: ANN001
    """The on-call person resolves what has been open an hour (what a person would, eventually)."""
    from controlplane import services as core
    from controlplane.choices import Channel
    from incidents import incidents
    from incidents.choices import ACTIVE_INCIDENT_STATES
    from incidents.models import Incident

    actor = core.Actor(user=oncall, channel=Channel.WEB)
    done = 0
    for pk in Incident.objects.filter(state__in=ACTIVE_INCIDENT_STATES, opened_at__lte=now - RESOLVE_AFTER) \
            .values_list("pk", flat=True):
        incidents.resolve(pk, actor, "recovered", now=now)
        done += 1
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steady", type=int, default=2)
    parser.add_argument("--bursty", type=int, default=2)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--fleet", type=int, default=50, help="pools of the year's projection")
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--db", default="headroom_growth_bench")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    setup(args)
    clock = Clock(datetime(2026, 11, 2, 1, 0, tzinfo=tz.utc))  # a Monday; the first surge at 03:00
    clock.install()
    oncall, pools = seed(args)
    world = World(clock, {pool.deployment: kind for pool, kind in pools}, seed_=7)
    world.install({str(pool.pk): pool.deployment for pool, _ in pools})

    from incidents import alerts, tasks as incident_tasks
    from scaling import loop, services

    ids = [pool.pk for pool, _ in pools]
    steps = int(args.days * 86400 / PERIOD_S)
    started, before = time.perf_counter(), {}
    for step in range(0, steps + 1):
        clock.now += timedelta(seconds=PERIOD_S)
        report = loop.tick(list(loop.loop_pools().filter(pk__in=ids)), now=clock.now)
        services.advance(clock.now)
        incident_tasks.sweep_outbox()
        alerts.evaluate_heartbeats(clock.now)
        if step % 4 == 0:
            incident_tasks.remind_proposals()
            resolve_old_incidents(oncall, clock.now)
        if step % 240 == 0 or (step == 1 and report.errors):
            print(f"{clock.now:%Y-%m-%d %H:%M} {time.perf_counter() - started:.0f} s; errors: "
                  f"{list(report.errors.items())[:2]}", flush=True)
        if step == 0:
            before = counts()  # after the first tick: a pool's one-row tables (status, memory) are there
    after = counts()
    pool_days = len(pools) * args.days
    per_day = {label: round((after[label] - before[label]) / pool_days, 1) for label in after
               if after[label] != before[label]}
    # A bounded table reaches its steady size and stays there: count what it holds now, not what it gained.
    from django.conf import settings

    bounded = {"scaling.SignalSample": f"kept {settings.SIGNAL_SAMPLE_RETENTION_DAYS} days: {after['scaling.SignalSample'] / len(pools):.0f} a pool now",
               "incidents.SloSample": f"kept 7 h: {after['incidents.SloSample'] / len(pools):.0f} a pool now",
               "incidents.DispatchedEvent": f"kept 1 day: {after['incidents.DispatchedEvent'] / len(pools):.0f} a pool now"}
    year = {label: round(value * args.fleet * 365) for label, value in per_day.items() if label not in bounded}
    sizes = row_bytes()
    year_gb = {label: round(rows * sizes.get(label, 0) / 1e9, 1) for label, rows in year.items()}
    summary = {"pools": {"steady": args.steady, "bursty": args.bursty}, "simulated_days": args.days,
               "wall_s": round(time.perf_counter() - started), "rows_per_pool_per_day": per_day,
               "rows_now": after, "bounded": bounded, "row_bytes": sizes, f"year_{args.fleet}_pools": year,
               f"year_{args.fleet}_pools_gb_without_indexes": year_gb}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
