"""API and web UI under load (issue 18 item 3): gunicorn on a PostgreSQL database of its own, driven by
closed-loop clients; req/s and p50/p95/p99 latency per endpoint.

    .venv/bin/python bench/api_load.py                       # 200 pools, 2,000 proposals, 20,000 audit rows
    .venv/bin/python bench/api_load.py --pools 500 --duration 30 --json bench/results/api_load.json

Each endpoint is driven on its own for `--duration` seconds by `--clients` threads, each sending its next
request as soon as the previous one answered (closed loop). The database `--db` is dropped and created again,
migrated and seeded: pools in `--clusters` clusters of one team, each with its status, planner memory
(a real forecaster state, as the control loop stores it), two SLOs and 7 minutes of samples; proposals
(at most one pending reactive and one pending pre-scale per pool, the database's rule) with their events,
and audit rows. The client is a small threaded `requests` loop in this process, on the same machine as
the server: on a shared 2-core box, the client's CPU competes with gunicorn's, so absolute figures are low;
compare runs made on the same machine at about the same load.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ENDPOINTS = ("pools", "fleet", "proposals", "audit", "approve")


# --- the database -------------------------------------------------------------------------------


def server_env(args: argparse.Namespace) -> dict[str, str]:
    return os.environ | {
        "DATABASE_URL": f"{args.server}/{args.db}", "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "SECRET_KEY": "bench-only-secret-key", "DEBUG": "0", "HTTPS_ONLY": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver", "CELERY_ENABLED": "false", "PROMETHEUS_ENABLED": "false",
        "KUBERNETES_ENABLED": "false", "SLACK_ENABLED": "false", "WEBHOOKS_ENABLED": "false",
        "DATABASE_CONN_MAX_AGE": "60", "LOG_LEVEL": "WARNING",
    }


def recreate_database(args: argparse.Namespace) -> None:
    import psycopg

    with psycopg.connect(f"{args.server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{args.db}"')


def forecaster_state(now_s: float) -> dict:
    """A real `PlannerMemory.seasonal_forecast`: the decide step's forecasters fed 8 days of a daily curve."""
    import numpy as np

    from scaling.engine import decide

    class History:  # decide.PoolHistory over a synthetic 15-s series
        def rates_since(self, since_s: float):  # noqa: ANN202
            at = np.arange(max(since_s, now_s - decide.SEASONAL_HISTORY_S), now_s, 15.0)
            return at, 20 + 15 * np.sin(2 * math.pi * at / 86_400) + np.random.default_rng(1).normal(0, 2, at.size)

        def requested_at(self) -> list[float]:
            return []

        def approved_floor(self, now_s: float) -> int:
            return 0

    plan = decide.pool_plan(capacity_rps_per_replica=4.0, min_replicas=1, max_replicas=20, slo_latency_s=1.0,
                            slo_percentile=0.95, unloaded_latency_s=0.2, cold_start_p95_s=90.0,
                            warm_pool_fraction=0.0, target_queue_per_replica=2.0)
    state = decide.decide_state_from(None, None)
    *_, state = decide.forecasts(History(), plan, now_s, math.nan, state)
    return decide.forecast_dict(state)


def seed(args: argparse.Namespace) -> dict:
    """Fill the fresh database; returns what the clients need (an API token, a session, pending ids)."""
    from datetime import timedelta

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command
    from django.utils import timezone

    from controlplane import services
    from controlplane.choices import Channel, Role, SloIndicator
    from controlplane.models import SLO, AuditEvent, Cluster, Membership, Pool, Team
    from scaling.choices import ProposalKind, ProposalState
    from scaling.models import PlannerMemory, PoolStatus, Proposal, ProposalEvent, SignalSample

    call_command("migrate", verbosity=0)
    rng = random.Random(7)
    now = timezone.now()
    team = Team.objects.create(name="Load", slug="load")
    user = get_user_model().objects.create_user("load-operator", password="unused-in-the-bench")
    Membership.objects.create(user=user, team=team, role=Role.OPERATOR)
    clusters = [Cluster.objects.create(team=team, name=f"gpu-{c:02d}", kube_api_url=f"http://10.0.{c}.1:6443",
                                       gpu_prices={"H100": {"on_demand": 4.5, "spot": 2.1}})
                for c in range(args.clusters)]
    pools = Pool.objects.bulk_create(
        Pool(cluster=clusters[i % len(clusters)], team=team, name=f"pool-{i:04d}", namespace="inference",
             deployment=f"vllm-{i:04d}", model_name="llama-3.1-8b-instruct", gpu_type="H100", min_replicas=1,
             max_replicas=20, replica_capacity_rps=4.0) for i in range(args.pools))
    SLO.objects.bulk_create([SLO(pool=p, indicator=ind, threshold=thr, objective=0.99) for p in pools
                             for ind, thr in ((SloIndicator.TTFT_P95, 1000), (SloIndicator.E2E_P95, 8000))])
    PoolStatus.objects.bulk_create(PoolStatus(pool=p, desired_replicas=4, ready_replicas=4, observed_at=now)
                                   for p in pools)
    forecast = forecaster_state(now.timestamp())
    decision = {"target_replicas": 4, "hold": False, "capacity_per_replica_rps": 4.0, "reasons": [],
                "at": now.isoformat()}
    PlannerMemory.objects.bulk_create(PlannerMemory(pool=p, state={}, last_decision=decision, seasonal_forecast=forecast,
                                                    last_signals={"request_rate_rps": 20.0}) for p in pools)
    SignalSample.objects.bulk_create(
        SignalSample(pool=p, at=now - timedelta(seconds=15 * k), request_rate_rps=20 + rng.random(), queue_depth=3.0,
                     ttft_p95_s=0.4, e2e_p95_s=4.0, ready_replicas=4, desired_replicas=4, target_replicas=4)
        for p in pools for k in range(28))
    # Proposals: the database allows one pending reactive and one pending pre-scale per pool.
    proposals, pending_slots = [], [(p, kind) for p in pools for kind in (ProposalKind.REACTIVE, ProposalKind.PRESCALE)]
    done_states = [ProposalState.SUCCEEDED, ProposalState.REJECTED, ProposalState.EXPIRED, ProposalState.FAILED]
    evidence = {"recent_rps": [round(20 + rng.random(), 3) for _ in range(60)],
                "forecast": {"expected_rps": 31.5, "p90_rps": 36.2}, "capacity_rps": 16.0}
    signals = {"request_rate_rps": 21.3, "queue_depth": 12.0, "ttft_p95_s": 0.9, "ready_replicas": 4.0}
    for n in range(args.proposals):
        pool, kind = pending_slots[n] if n < len(pending_slots) else (pools[n % len(pools)], ProposalKind.REACTIVE)
        state = ProposalState.PENDING if n < len(pending_slots) else done_states[n % len(done_states)]
        proposals.append(Proposal(
            pool=pool, kind=kind, state=state, current_replicas=4, target_replicas=6,
            reasons=[{"code": "queue", "detail": "12 waiting with 4 ready replicas (target 2 a replica)"}],
            signals=signals, evidence=evidence, idempotency_key=f"loop:{n}", requested_channel=Channel.AUTO,
            expires_at=now + timedelta(hours=6), decided_at=None if state == ProposalState.PENDING else now))
    proposals = Proposal.objects.bulk_create(proposals)
    ProposalEvent.objects.bulk_create(
        ProposalEvent(proposal=p, from_state=a, to_state=b, actor_name="headroom:system", channel=Channel.AUTO,
                      data={"target_replicas": 6})
        for p in proposals for a, b in ([("", "pending")] + ([] if p.state == "pending" else
                                                             [("pending", "approved"), ("approved", p.state)])))
    AuditEvent.objects.bulk_create(
        AuditEvent(actor_name="load-operator", channel=Channel.API, action="update", object_type="controlplane.pool",
                   object_id=str(pools[k % len(pools)].pk), object_repr=str(pools[k % len(pools)]), team=team,
                   before={"max_replicas": 20, "min_replicas": 1}, after={"max_replicas": 24, "min_replicas": 1})
        for k in range(args.audit))
    actor = services.Actor(user=None, channel=Channel.CLI)
    _, token = services.issue_token(user, actor, name="load")
    session = SessionStore()
    session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(user.pk), settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    if args.analyze:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    pending = [p.pk for p in proposals if p.state == ProposalState.PENDING]
    rng.shuffle(pending)
    return {"token": token, "session": session.session_key, "pending": pending}


# --- the server and the clients --------------------------------------------------------------------


def start_gunicorn(args: argparse.Namespace) -> subprocess.Popen:
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "controlplane.wsgi", "--workers", str(args.workers),
         "--bind", f"127.0.0.1:{args.port}", "--log-level", "warning", "--timeout", "120"],
        cwd=ROOT, env=server_env(args), start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{args.port}/healthz", timeout=10).ok:
                return server
        except requests.RequestException:  # not listening yet, or its workers still importing
            time.sleep(0.5)
    os.killpg(server.pid, signal.SIGKILL)
    raise SystemExit("gunicorn did not answer /healthz within 120 s")


def percentile(sorted_values: list[float], share: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(math.ceil(share * len(sorted_values))) - 1)]


def drive(args: argparse.Namespace, endpoint: str, seeded: dict) -> dict:
    """`--clients` closed-loop clients on one endpoint for `--duration` s (approve: until no pending is left)."""
    base = f"http://127.0.0.1:{args.port}"
    api = {"Authorization": f"Token {seeded['token']}"}
    pending: queue.SimpleQueue[int] = queue.SimpleQueue()
    for pk in seeded["pending"]:
        pending.put(pk)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    sizes: list[int] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + args.duration

    def request(http: requests.Session) -> requests.Response | None:
        if endpoint == "pools":
            return http.get(f"{base}/api/v1/pools/", headers=api)
        if endpoint == "proposals":
            return http.get(f"{base}/api/v1/proposals/", headers=api)
        if endpoint == "audit":
            return http.get(f"{base}/api/v1/audit/", headers=api)
        if endpoint == "fleet":
            return http.get(f"{base}/", cookies={"sessionid": seeded["session"]})
        try:
            pk = pending.get_nowait()
        except queue.Empty:
            return None
        return http.post(f"{base}/api/v1/proposals/{pk}/approve/", json={"comment": "load"}, headers=api)

    def client() -> None:
        http = requests.Session()
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            response = request(http)
            if response is None:
                return
            took = time.perf_counter() - started
            with lock:
                latencies.append(took)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                sizes.append(len(response.content))

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    latencies.sort()
    return {"endpoint": endpoint, "requests": len(latencies), "wall_s": round(wall, 2),
            "req_per_s": round(len(latencies) / wall, 1), "p50_ms": round(1000 * percentile(latencies, 0.50)),
            "p95_ms": round(1000 * percentile(latencies, 0.95)), "p99_ms": round(1000 * percentile(latencies, 0.99)),
            "mean_bytes": round(sum(sizes) / len(sizes)) if sizes else 0, "statuses": statuses}


def count_queries(args: argparse.Namespace, seeded: dict, repeat: int = 5) -> dict[str, dict[str, float]]:
    """Database queries of one request of each kind, and its CPU milliseconds in this process (Django's test
    client, one request at a time: the median of `repeat`), a figure the machine's other load barely moves."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_AUTHORIZATION=f"Token {seeded['token']}")
    client.cookies["sessionid"] = seeded["session"]
    calls = {"pools": lambda: client.get("/api/v1/pools/"), "fleet": lambda: client.get("/"),
             "proposals": lambda: client.get("/api/v1/proposals/"), "audit": lambda: client.get("/api/v1/audit/"),
             "approve": lambda: client.post(f"/api/v1/proposals/{seeded['pending'].pop()}/approve/",
                                            {"comment": "count"}, content_type="application/json")}
    measured = {}
    for name, call in calls.items():
        cpu = []
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as captured:
                started = time.process_time()
                response = call()
                cpu.append(time.process_time() - started)
            assert response.status_code == 200, (name, response.status_code, response.content[:300])
        measured[name] = {"queries": len(captured), "cpu_ms": round(1000 * sorted(cpu)[repeat // 2], 1)}
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--proposals", type=int, default=2000)
    parser.add_argument("--audit", type=int, default=20000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per endpoint")
    parser.add_argument("--endpoints", default=",".join(ENDPOINTS), help=f"comma-separated, of {', '.join(ENDPOINTS)}")
    parser.add_argument("--analyze", action="store_true", help="ANALYZE after seeding (default: fresh statistics "
                                                              "only as autovacuum gets to them)")
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--db", default="headroom_load_bench")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--alone-only", action="store_true", help="only the queries and CPU of one request alone "
                                                                "(no gunicorn, no clients)")
    args = parser.parse_args()
    endpoints = [e for e in args.endpoints.split(",") if e]
    if unknown := set(endpoints) - set(ENDPOINTS):
        parser.error(f"--endpoints: unknown {', '.join(sorted(unknown))}")

    recreate_database(args)
    os.environ.update(server_env(args))
    import django

    django.setup()
    started = time.perf_counter()
    seeded = seed(args)
    print(f"seeded {args.pools} pools, {args.proposals} proposals, {args.audit} audit rows "
          f"in {time.perf_counter() - started:.0f} s", flush=True)
    queries = count_queries(args, seeded)
    print("one request alone (queries, CPU ms):", json.dumps(queries), flush=True)
    results: list[dict] = []
    if args.alone_only:
        endpoints = []
    server = start_gunicorn(args) if endpoints else None
    try:
        for endpoint in endpoints:
            result = drive(args, endpoint, seeded)
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "alone": queries,
                                         "results": results}, indent=1))
    if not results:
        return
    print(f"\n{'endpoint':<10} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'bytes':>8} {'queries':>8} "
          f"{'CPU ms':>7}")
    for r in results:
        alone = queries.get(r["endpoint"], {})
        print(f"{r['endpoint']:<10} {r['req_per_s']:>7} {r['p50_ms']:>7} {r['p95_ms']:>7} {r['p99_ms']:>7} "
              f"{r['mean_bytes']:>8} {alone.get('queries', ''):>8} {alone.get('cpu_ms', ''):>7}")


if __name__ == "__main__":
    main()
