"""The control loop against the sandbox: replicas from the Kubernetes API, hold on unknown signals, pre-scaling
from history. With a real Prometheus: tests/integration/test_loop_prometheus.py."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from controlplane.models import Pool
from scaling import loop
from scaling.choices import ProposalState
from scaling.models import PlannerMemory, Proposal, SignalSample

from sandbox.replica import wait_until
from tests.isolation import closed_port


def test_it_reads_replicas_and_holds_when_signals_are_unknown(kube_pool: Pool, settings) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = False
    report = loop.tick([kube_pool])
    [pool] = report.pools
    assert pool.read["ready_replicas"] is not None and pool.read["desired_replicas"] == 1
    assert pool.read["queue_depth"] is None  # unknown, never 0
    assert pool.decided["hold"] is True and "SignalsUnknownHold" in pool.decided["reasons"]
    assert pool.decided["target_replicas"] == 1 and pool.did == []
    assert not Proposal.objects.exists()
    kube_pool.refresh_from_db()
    assert kube_pool.status.desired_replicas == 1
    assert PlannerMemory.objects.get(pool=kube_pool).last_decision["binding"]
    assert SignalSample.objects.get(pool=kube_pool).request_rate_rps is None


def test_an_unreachable_cluster_is_reported_and_nothing_scales_down(pool: Pool, settings) -> None:
    settings.KUBERNETES_ENABLED = True
    pool.cluster.kube_api_url = f"http://127.0.0.1:{closed_port()}"  # nothing listens there
    pool.cluster.save()
    report = loop.tick([Pool.objects.select_related("cluster").get(pk=pool.pk)])
    assert any("kubernetes" in where for where in report.errors)
    assert report.pools[0].decided["target_replicas"] is None and report.pools[0].did == []


def test_the_tick_command_prints_what_it_read_decided_and_did(kube_pool: Pool, settings) -> None:  # noqa: ANN001
    out = StringIO()
    call_command("tick", "--pool", "chat-8b", stdout=out, stderr=StringIO())
    text = out.getvalue()
    assert "gpu-us-east/chat-8b" in text and "read     ready" in text and "decided  target 1" in text
    out = StringIO()
    call_command("tick", "--json", stdout=out, stderr=StringIO())
    assert json.loads(out.getvalue())["pools"][0]["pool"] == "gpu-us-east/chat-8b"
    with pytest.raises(CommandError, match="No pool named 'nope'"):
        call_command("tick", "--pool", "nope")


def test_the_pool_page_shows_the_planners_latest_answer(kube_pool: Pool, alice: User, settings) -> None:  # noqa: ANN001
    from django.test import Client

    settings.PROMETHEUS_ENABLED = False
    loop.tick([kube_pool])
    client = Client()
    client.force_login(alice)
    body = client.get(f"/pools/{kube_pool.pk}/live/", HTTP_HX_REQUEST="true").content.decode()
    assert body.startswith('<section id="pool-live"') and "Planner: target <strong>1</strong>" in body
    assert "holding: signals unknown" in body and "<code>HoldCurrent</code>" in body
    fleet = client.get("/").content.decode()
    assert "1 / 0 / 1" in fleet or "0 / 1 / 1" in fleet  # ready / arriving / desired, read from the cluster
    # Unknown TTFT against its SLO, and why: the signals are unknown, so the planner holds.
    assert 'class="reading unknown"' in fleet and 'TTFT p95 <b>unknown</b> <span class="muted">≤ 1 s</span>' in fleet
    assert "holding, never scaling down" in fleet


def test_a_daily_peak_in_the_history_becomes_a_prescale_proposal(pool: Pool) -> None:
    """Eight days of a noon peak (1 → 10 req/s): at 11:40 the loop proposes warm pool + 50 % for it."""
    from datetime import datetime, timedelta, timezone as tz

    from scaling.engine.signals import PoolSignals, Reading

    now = datetime(2026, 11, 30, 11, 40, tzinfo=tz.utc)
    Pool.objects.filter(pk=pool.pk).update(replica_capacity_rps=1.0, max_replicas=30, min_replicas=1)
    pool = Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules").get(pk=pool.pk)
    samples = []
    at = now - timedelta(days=8)
    while at < now:
        minutes = at.hour * 60 + at.minute
        rate = 10.0 if 12 * 60 <= minutes < 14 * 60 else 1.0
        samples.append(SignalSample(pool=pool, at=at, request_rate_rps=rate, ready_replicas=2, desired_replicas=2))
        at += timedelta(minutes=2)
    SignalSample.objects.bulk_create(samples)
    fresh = lambda value: Reading(float(value), 0.0)  # noqa: E731
    signals = PoolSignals(pool=pool.name, queue_depth=fresh(0), request_rate_rps=fresh(1.0), ready_replicas=fresh(2),
                          desired_replicas=fresh(2), arriving_replicas=fresh(0),
                          waiting_per_ready_replica=(fresh(0), fresh(0)))
    report = loop.tick_pool(pool, signals, now)
    proposal = Proposal.objects.get(pool=pool)
    assert proposal.kind == "prescale" and proposal.current_replicas == 2
    assert report.decided["prescale"]["ratio"] >= 3
    # Warm for the forecast peak (~10 req/s at 1 req/s per replica), plus the 50 % buffer.
    assert 12 <= proposal.target_replicas <= 20
    assert proposal.reasons[0]["code"] == "PreScaleProposed" and "x the current" in proposal.reasons[0]["detail"]
    assert proposal.state == ProposalState.PENDING  # a person approves it (not off-hours, not reactive)
    assert len(proposal.evidence["forecast_p90"]) == len(proposal.evidence["capacity"])
    # The next tick a minute later does not propose it again (the pre-scale cooldown and the pending one).
    loop.tick_pool(pool, signals, now + timedelta(minutes=1))
    assert Proposal.objects.filter(pool=pool, kind="prescale").count() == 1


def _open_fallback(pool: Pool, share: float, target_percent: int, route_percent: int):  # noqa: ANN202
    """An active fallback of `pool` to a 1B pool on the route `inference/chat`."""
    from controlplane.choices import Channel
    from scaling.choices import FallbackPhase
    from scaling.models import FallbackActivation

    spare = Pool.objects.create(cluster=pool.cluster, team=pool.team, name="chat-1b", namespace="inference",
                                deployment="vllm-chat-1b", model_name="llama-3.2-1b", gpu_type="L4")
    return FallbackActivation.objects.create(
        pool=pool, fallback_pool=spare, route_namespace="inference", route_name="chat", primary_backend="vllm-chat-8b",
        fallback_backend="vllm-chat-1b", phase=FallbackPhase.ACTIVE, trigger="auto", share=share,
        target_percent=target_percent, route_percent=route_percent, created_channel=Channel.AUTO)


def test_each_tick_stores_p99_errors_kv_cache_prefix_hits_and_the_fallback_share(pool: Pool) -> None:
    """The incident view's charts and the alerts over days read these columns; unknown stays None."""
    from datetime import datetime, timezone as tz

    from scaling.engine.signals import PoolSignals, Reading

    now = datetime(2026, 11, 30, 11, 40, tzinfo=tz.utc)
    pool = Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules").get(pk=pool.pk)
    fresh = lambda value: Reading(float(value), 0.0)  # noqa: E731
    signals = PoolSignals(pool=pool.name, queue_depth=fresh(3), request_rate_rps=fresh(4.0), ready_replicas=fresh(2),
                          desired_replicas=fresh(2), arriving_replicas=fresh(0), ttft_p95_s=fresh(0.4),
                          ttft_p99_s=fresh(0.9), e2e_p95_s=fresh(3.0), e2e_p99_s=Reading(5.0, 120.0),  # stale
                          error_rate=fresh(0.02), kv_cache_usage=fresh(0.81), prefix_cache_hit_rate=fresh(0.35),
                          waiting_per_ready_replica=(fresh(1), fresh(2)))
    loop.tick_pool(pool, signals, now)
    sample = SignalSample.objects.get(pool=pool, at=now)
    assert (sample.ttft_p99_s, sample.e2e_p99_s, sample.error_rate, sample.kv_cache_usage,
            sample.prefix_cache_hit_rate, sample.fallback_share) == (0.9, None, 0.02, 0.81, 0.35, 0.0)
    assert (sample.request_rate_rps, sample.queue_depth, sample.ttft_p95_s, sample.e2e_p95_s) == (4.0, 3.0, 0.4, 3.0)

    _open_fallback(pool, share=0.5, target_percent=40, route_percent=30)
    later = now.replace(minute=41)
    loop.tick_pool(pool, signals, later)
    assert SignalSample.objects.get(pool=pool, at=later).fallback_share == 0.3  # what the route holds, read back


def test_while_the_fallback_takes_a_share_the_pool_plans_for_the_routes_rate_not_for_what_is_left(pool: Pool) -> None:
    """The headless surge held the primary at 3 replicas for minutes while the fallback carried 79 % of the
    route: the planner read the primary's own rate, the part the fallback had not taken, as the demand."""
    from datetime import datetime, timezone as tz

    from scaling.engine.signals import PoolSignals, Reading
    from scaling.models import PlannerMemory

    now = datetime(2026, 11, 30, 11, 40, tzinfo=tz.utc)
    fresh = lambda value: Reading(float(value), 0.0)  # noqa: E731
    twin = Pool.objects.create(cluster=pool.cluster, team=pool.team, name="chat-8b-twin", namespace="inference",
                               deployment="vllm-chat-8b-twin", model_name=pool.model_name, gpu_type=pool.gpu_type,
                               min_replicas=1, max_replicas=8)
    twin.slos.create(indicator=pool.slos.get().indicator, threshold=1000, objective=0.99)
    spare = _open_fallback(pool, share=0.8, target_percent=80, route_percent=80).fallback_pool
    own = dict(queue_depth=fresh(0), request_rate_rps=fresh(5.0), ready_replicas=fresh(2), desired_replicas=fresh(2),
               arriving_replicas=fresh(0), ttft_p95_s=fresh(0.4), ttft_p99_s=fresh(0.6),
               waiting_per_ready_replica=(fresh(0), fresh(0)))
    pools = {p.pk: p for p in Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules")
             .filter(pk__in=[pool.pk, twin.pk, spare.pk])}
    read = {pool.pk: PoolSignals(pool=pool.name, **own), twin.pk: PoolSignals(pool=twin.name, **own),
            spare.pk: PoolSignals(pool=spare.name, request_rate_rps=fresh(20.0))}
    rates = loop._fallback_rates(list(pools.values()), read, now)
    assert set(rates) == {pool.pk} and rates[pool.pk].value == 20.0  # only the pool that has a fallback

    diverted = loop.tick_pool(pools[pool.pk], read[pool.pk], now, fallback_rate=rates[pool.pk])
    alone = loop.tick_pool(pools[twin.pk], read[twin.pk], now)
    # (Both targets are within the scale-up limit's +4 of 2; the rate term says what each planned for.)
    def rate_term(tick: loop.PoolTick) -> int:
        return next(t["replicas"] for t in tick.decided["terms"] if t["name"] == "ReactiveRequestRate")

    assert rate_term(diverted) > rate_term(alone)
    assert diverted.decided["target_replicas"] >= alone.decided["target_replicas"]
    assert SignalSample.objects.get(pool=pool, at=now).request_rate_rps == 25.0  # the demand, for the forecasts
    assert SignalSample.objects.get(pool=twin, at=now).request_rate_rps == 5.0
    # What the fallback step reads back is the pool's own rate: it adds the fallback's itself.
    assert PlannerMemory.objects.get(pool=pool).last_signals["request_rate_rps"] == 5.0
    # The capacity correction learned from the 5 req/s the pool carried, as its twin's did.
    assert (PlannerMemory.objects.get(pool=pool).state["capacity_correction"]
            == PlannerMemory.objects.get(pool=twin).state["capacity_correction"])

    # The fallback's rate unknown: the demand is unknown (the planner holds), not the primary's part alone.
    later = now.replace(minute=41)
    loop.tick_pool(pools[pool.pk], read[pool.pk], later, fallback_rate=Reading(None, None))
    assert SignalSample.objects.get(pool=pool, at=later).request_rate_rps is None


def test_with_no_fallback_open_the_gateways_spill_over_is_demand_and_a_missing_reading_does_not_hold(
        pool: Pool) -> None:
    """The gateway spills late requests to the standing-by fallback before any tick sees a surge: what the
    fallback pool answers is the pool's overflow. Its rate unknown, the pool plans on its own rate alone."""
    from datetime import datetime, timezone as tz

    from scaling.engine.signals import PoolSignals, Reading

    now = datetime(2026, 11, 30, 11, 40, tzinfo=tz.utc)
    fresh = lambda value: Reading(float(value), 0.0)  # noqa: E731
    spare = Pool.objects.create(cluster=pool.cluster, team=pool.team, name="chat-1b", namespace="inference",
                                deployment="vllm-chat-1b", model_name="llama-3.2-1b", gpu_type="L4")
    Pool.objects.filter(pk=pool.pk).update(fallback_pool=spare)
    pools = list(Pool.objects.select_related("cluster", "team").filter(pk__in=[pool.pk, spare.pk]))
    own = PoolSignals(pool=pool.name, request_rate_rps=fresh(5.0))
    rates = loop._fallback_rates(pools, {pool.pk: own, spare.pk: PoolSignals(pool=spare.name,
                                                                             request_rate_rps=fresh(6.0))}, now)
    assert set(rates) == {pool.pk} and rates[pool.pk].value == 6.0
    # The tick plans on 11 req/s and keeps the share the fallback answered beside the weight's 0 (the charts').
    primary = Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules").get(pk=pool.pk)
    loop.tick_pool(primary, own, now, fallback_rate=rates[pool.pk])
    sample = SignalSample.objects.get(pool=pool, at=now)
    assert (sample.request_rate_rps, sample.fallback_share, sample.fallback_answered_share) == (11.0, 0.0, 0.5455)
    # The standing-by pool not read this tick nor ever before: left out, so the pool is not held for it.
    assert loop._fallback_rates(pools, {pool.pk: own}, now) == {}
    later = now.replace(minute=41)
    loop.tick_pool(primary, own, later)
    assert SignalSample.objects.get(pool=pool, at=later).fallback_answered_share is None


def test_a_pool_without_batch_slots_reads_its_work_share_against_the_deployments_max_num_seqs(
        kube_pool: Pool, settings, monkeypatch) -> None:  # noqa: ANN001
    """The emulated Deployment runs vLLM with --max-num-seqs 2 and the pool states no batch slots: the loop reads
    the slots off the pod template, so the busy share term acts without anyone typing them in. A number the
    pool states wins, and the page says which it reads."""
    from datetime import datetime, timezone as tz

    from scaling.drivers.signals import SignalRead
    from scaling.engine.signals import PoolSignals, Reading

    class OneRunningRequest:  # Prometheus's answer: one request in the batch (the real source: test_loop_prometheus)
        def read(self, selectors):  # noqa: ANN001, ANN202
            return SignalRead({s.name: PoolSignals(pool=s.name, running_requests=Reading(1.0, 0.0)) for s in selectors})

    monkeypatch.setattr(loop, "_signal_source", lambda cluster: OneRunningRequest())
    now = datetime(2026, 12, 3, 12, 0, tzinfo=tz.utc)
    assert kube_pool.batch_slots is None and kube_pool.batch_slots_in_use is None  # never read yet

    def read() -> dict:  # noqa: ANN202
        signals, errors = loop.read_cluster(kube_pool.cluster, [kube_pool], now)
        assert errors == {}
        return signals

    assert wait_until(lambda: read()[kube_pool.pk].ready_replicas.value == 1, 10)  # its replica has loaded
    signals = read()
    assert signals[kube_pool.pk].work_share.value == 0.5  # 1 running of 1 ready replica x 2 slots
    kube_pool = Pool.objects.get(pk=kube_pool.pk)
    assert kube_pool.status.batch_slots == 2 and kube_pool.batch_slots_in_use == 2

    kube_pool.batch_slots = 8
    assert read()[kube_pool.pk].work_share.value == 0.125  # the pool's own number wins
    assert kube_pool.batch_slots_in_use == 8


def test_when_another_team_edits_the_deployments_max_num_seqs_the_next_read_follows_it(
        kube_pool: Pool, kube, settings) -> None:  # noqa: ANN001
    """The slots are read every tick, never remembered past the next read: a changed command line is read as
    changed, and one that stops stating the flag leaves the pool with nothing to read the batch fill against."""
    from datetime import datetime, timezone as tz

    from kubernetes import client

    from sandbox.kube.rbac import admin_client

    settings.PROMETHEUS_ENABLED = False
    now = datetime(2026, 12, 3, 12, 0, tzinfo=tz.utc)
    apps = client.AppsV1Api(admin_client(kube.url))  # another team, with its own rights on the Deployment

    def edit_args(args: list[str]) -> None:
        body = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args}]
        apps.patch_namespaced_deployment("vllm-chat-8b", "inference", body)

    def slots_read() -> int | None:
        _, errors = loop.read_cluster(kube_pool.cluster, [kube_pool], now)
        assert errors == {}
        return Pool.objects.get(pk=kube_pool.pk).batch_slots_in_use

    assert slots_read() == 2
    edit_args(["--model", "tiny", "--max-num-seqs=48"])
    assert slots_read() == 48
    edit_args(["--model", "tiny"])
    assert slots_read() is None


def test_a_window_the_planner_acts_on_carries_its_peak_of_a_week_ago(pool: Pool) -> None:
    # Monday 09:00-10:00 UTC; now Monday 08:59. Last Monday's window peaked at 200 req/s (samples just
    # outside it, and other days, do not count); the window of tomorrow is not acted on, so not read.
    from datetime import datetime, timedelta, timezone as tz

    from controlplane.models import ScheduleWindow

    now = datetime(2026, 11, 30, 8, 59, tzinfo=tz.utc)
    ScheduleWindow.objects.create(pool=pool, name="morning", weekday=0, start="09:00", end="10:00")
    ScheduleWindow.objects.create(pool=pool, name="tuesday", weekday=1, start="09:00", end="10:00")
    week_ago = now - timedelta(days=7)
    for minutes, rate in ((0, 90.0), (30, 200.0), (62, 500.0), (24 * 60, 700.0)):
        SignalSample.objects.create(pool=pool, at=week_ago + timedelta(minutes=minutes + 1), request_rate_rps=rate)
    plan = loop.pool_plan(pool)
    monday, tuesday = sorted(loop.schedule_windows(pool, plan, now), key=lambda w: w.start_s)
    assert monday.end_s == datetime(2026, 11, 30, 10, 0, tzinfo=tz.utc).timestamp()
    assert (monday.last_peak_rps, tuesday.last_peak_rps) == (200.0, None)
