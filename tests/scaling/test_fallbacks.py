"""Fallback activations live: real route weights in the Kubernetes API emulator, requests through the
sandbox gateway, PostgreSQL rows. The signals are what the control loop would store for each pool at its
tick (PlannerMemory, PoolStatus), fed directly as the shift tests do."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import requests
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from sandbox.kube import resources as res
from scaling import fallbacks, services, traffic
from scaling.choices import FallbackPhase, ShiftPhase
from scaling.drivers.cluster import ReplicaStatus
from scaling.drivers.registry import route_router
from scaling.models import FallbackActivation, FallbackPolicy, PlannerMemory

from tests.core.conftest import alice, charlie, cluster, ml_team, search_team  # noqa: F401
from tests.scaling.test_traffic import GIVING, NS, RECEIVING, ROUTE, _weights, pools, sandbox  # noqa: F401

PRIMARY_CAPACITY = 50.0  # req/s one replica serves at its SLO (the pools fixture's)


@pytest.fixture
def policy(pools) -> FallbackPolicy:  # noqa: ANN001, F811
    """The primary at its maximum of one replica, the warm pool as its fallback."""
    primary, fallback = pools
    Pool.objects.filter(pk=primary.pk).update(max_replicas=1, fallback_pool=fallback)
    return FallbackPolicy.objects.create(pool=primary, exit_after_s=60, return_step_hold_s=30)


def feed(pools, now: datetime, primary_rps: float, ttft_s: float, fallback_rps: float = 0.0,  # noqa: ANN001, F811
         ready: int = 1, desired: int = 1) -> None:
    """One loop tick's stored signals: each pool's rate and TTFT p95, and the replicas the cluster reports."""
    for pool, rate, latency in ((pools[0], primary_rps, ttft_s), (pools[1], fallback_rps, 0.1)):
        # The fallback pool's two ready replicas take up to 85 req/s: they never limit the share here.
        services.record_status(pool, ReplicaStatus(desired, ready) if pool == pools[0] else ReplicaStatus(2, 2), now)
        PlannerMemory.objects.update_or_create(pool=pool, defaults={
            "last_signals": {"request_rate_rps": rate, "ttft_p95_s": latency, "queue_time_p95_s": None},
            "last_decision": {"at": now.isoformat()}})


def served_by(gateway, count: int = 40) -> dict[str, int]:  # noqa: ANN001
    served = {GIVING: 0, RECEIVING: 0}
    for _ in range(count):
        response = requests.post(gateway.url + "/v1/completions", timeout=30,
                                 json={"model": "chat", "prompt": "hi", "max_tokens": 1})
        served[response.headers["x-sandbox-pool"]] += 1
    return served


def test_an_overloaded_pool_at_its_maximum_falls_back_and_returns_in_steps(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    kube, gateway = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)  # twice what its one replica serves, 2 s over a 1 s SLO
    activation = fallbacks.tick(policy.pk, now=now)
    assert activation.phase == FallbackPhase.ACTIVE and activation.trigger == "auto"
    # The overflow: 100 req/s less 85 % of 50 served by the primary = 57.5 % of the traffic.
    assert activation.route_percent == activation.target_percent == 58
    assert _weights(kube) == {GIVING: 42, RECEIVING: 58}
    assert "at its maximum of 1 replicas" in activation.reasons[0]
    split = served_by(gateway)
    assert split[RECEIVING] > 0 and split[GIVING] > 0
    # A noisy signal: latency dips below the exit threshold and back, while the fallback carries 58 %.
    # The share never falls while active, and nothing returns before a calm minute with capacity.
    percents = []
    for tick, latency in enumerate([0.3, 1.6, 0.2, 1.4, 0.3, 1.8, 0.2]):
        now += timedelta(seconds=15)
        feed(pools, now, primary_rps=42.0, fallback_rps=58.0, ttft_s=latency)
        activation = fallbacks.tick(policy.pk, now=now)
        percents.append((activation.phase, activation.route_percent))
    assert set(percents) == {(FallbackPhase.ACTIVE, 58)}, percents
    assert _weights(kube) == {GIVING: 42, RECEIVING: 58}
    # The surge ends: demand of 30 req/s fits the ready replica, latency calm. After the demand window
    # forgets the peak and a calm minute, the return steps 50 %, 25 %, 0 % of the share, each held 30 s.
    timeline = []
    for _ in range(20):
        now += timedelta(seconds=15)
        feed(pools, now, primary_rps=30.0 * (1 - activation.route_percent / 100),
             fallback_rps=30.0 * activation.route_percent / 100, ttft_s=0.2)
        activation = fallbacks.tick(policy.pk, now=now)
        timeline.append((activation.phase, activation.route_percent))
        if activation.phase == FallbackPhase.RESTORED:
            break
    assert activation.phase == FallbackPhase.RESTORED, timeline
    written = [percent for _, percent in timeline]
    assert [p for i, p in enumerate(written) if i == 0 or p != written[i - 1]] == [58, 29, 15, 0], timeline
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}
    assert served_by(gateway, 20) == {GIVING: 20, RECEIVING: 0}
    kinds = list(activation.events.values_list("kind", flat=True))
    assert kinds[0] == "entered" and "return_started" in kinds and kinds[-1] == "route_restored"
    audited = set(AuditEvent.objects.filter(object_type="scaling.fallbackactivation", object_id=str(activation.pk))
                  .values_list("action", flat=True))
    assert {"fallback-entered", "fallback-return_started", "fallback-route_restored"} <= audited
    # Restored, the next tick does not enter again on a calm signal.
    now += timedelta(seconds=15)
    feed(pools, now, primary_rps=30.0, ttft_s=0.2)
    assert fallbacks.tick(policy.pk, now=now) is None  # no open activation
    assert FallbackActivation.objects.count() == 1


def test_capacity_arriving_in_time_keeps_the_traffic_home(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    Pool.objects.filter(pk=pools[0].pk).update(max_replicas=8)
    now = timezone.now()
    for _ in range(3):  # under the maximum and only briefly over the SLO: no entry without a sustained overload
        feed(pools, now, primary_rps=40.0, ttft_s=0.5)
        assert fallbacks.tick(policy.pk, now=now) is None
        now += timedelta(seconds=15)
    assert _weights(sandbox[0]) == {GIVING: 100, RECEIVING: 0}
    assert "no overload" in FallbackPolicy.objects.get(pk=policy.pk).last_decision["reasons"][0]


def test_the_gateways_spill_over_is_shown_on_the_pool_page_and_moves_no_weight(  # noqa: ANN001, F811
        sandbox, pools, policy, alice: User, client) -> None:
    """The gateway spills late requests to the standing-by fallback: the primary's latency stays fine while the
    fallback model answers half the route. Headroom names it and leaves the weights to the gateway's rule."""
    Pool.objects.filter(pk=pools[0].pk).update(max_replicas=8)
    now = timezone.now()
    feed(pools, now, primary_rps=30.0, fallback_rps=30.0, ttft_s=0.3)
    assert fallbacks.tick(policy.pk, now=now) is None
    assert _weights(sandbox[0]) == {GIVING: 100, RECEIVING: 0}
    decision = FallbackPolicy.objects.get(pk=policy.pk).last_decision
    assert decision["spilled_share"] == 0.5
    assert "the gateway spilled 50% of the route's requests to the fallback" in decision["reasons"][0]
    client.force_login(alice)
    page = client.get(f"/pools/{pools[0].pk}/").content.decode()
    assert 'id="spill-over"' in page and "<b>50 %</b>" in page
    # Spill-over does not hide an overload it cannot absorb: latency over the SLO still moves a share.
    for _ in range(3):
        now += timedelta(seconds=15)
        feed(pools, now, primary_rps=30.0, fallback_rps=30.0, ttft_s=2.0)
        activation = fallbacks.tick(policy.pk, now=now)
    assert activation is not None and activation.phase == FallbackPhase.ACTIVE
    page = client.get(f"/pools/{pools[0].pk}/").content.decode()
    assert 'id="spill-over"' not in page  # an active fallback's card says what it carries


def test_entry_is_refused_while_a_shift_writes_the_route_and_a_shift_while_a_fallback_does(  # noqa: ANN001, F811
        sandbox, pools, policy, alice: User) -> None:  # noqa: F811
    kube, _ = sandbox
    shift = traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API))
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    assert fallbacks.tick(policy.pk, now=now) is None
    assert "entry refused: Shift #" in FallbackPolicy.objects.get(pk=policy.pk).last_decision["reasons"][-1]
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}
    traffic.rollback(shift.pk, core.Actor(alice, Channel.API))
    assert TrafficShift_phase(shift.pk) == ShiftPhase.ROLLED_BACK
    now += timedelta(seconds=15)
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    assert fallbacks.tick(policy.pk, now=now).phase == FallbackPhase.ACTIVE  # the shift gone, it enters
    with pytest.raises(traffic.ShiftConflict, match="restore it first"):
        traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API))


def TrafficShift_phase(shift_id: int) -> str:  # noqa: N802
    from scaling.models import TrafficShift

    return TrafficShift.objects.get(pk=shift_id).phase


class WorkerKilled(BaseException):
    """The process dies after the route write landed and before it was recorded."""


class _AfterTheWrite:
    """The sandbox's router, with something happening once a write has landed (`after_write`)."""

    def __init__(self, router) -> None:  # noqa: ANN001
        self.router, self.scheme = router, router.scheme

    def read(self, route, backends=None):  # noqa: ANN001, ANN201
        return self.router.read(route, backends)

    def set_weights(self, route, target, premise):  # noqa: ANN001, ANN201
        outcome = self.router.set_weights(route, target, premise)
        self.after_write()
        return outcome

    def after_write(self) -> None:
        raise NotImplementedError


class DiesAfterWrite(_AfterTheWrite):
    def after_write(self) -> None:
        raise WorkerKilled


def test_a_worker_killed_after_the_entry_write_resumes_without_writing_again(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    with pytest.raises(WorkerKilled):
        fallbacks.tick(policy.pk, router=DiesAfterWrite(route_router(pools[0].cluster, "httproute")), now=now)
    activation = FallbackActivation.objects.get()
    assert (activation.phase, activation.target_percent, activation.route_percent) == (FallbackPhase.ACTIVE, 58, 0)
    assert _weights(kube) == {GIVING: 42, RECEIVING: 58}
    now += timedelta(seconds=15)
    feed(pools, now, primary_rps=42.0, fallback_rps=58.0, ttft_s=1.5)
    activation = fallbacks.tick(policy.pk, now=now)  # the next worker
    assert activation.route_percent == 58 and activation.events.last().data["wrote"] is False
    assert FallbackActivation.objects.count() == 1


def test_an_entry_that_needs_approval_waits_for_a_person(sandbox, pools, policy, alice: User,  # noqa: ANN001, F811
                                                          charlie: User) -> None:  # noqa: F811
    kube, _ = sandbox
    FallbackPolicy.objects.filter(pk=policy.pk).update(requires_approval=True)
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    activation = fallbacks.tick(policy.pk, now=now)
    assert activation.phase == FallbackPhase.WAITING_APPROVAL and _weights(kube) == {GIVING: 100, RECEIVING: 0}
    with pytest.raises(fallbacks.FallbackForbidden):
        fallbacks.approve(pools[0], core.Actor(charlie, Channel.API))
    activation = fallbacks.approve(pools[0], core.Actor(alice, Channel.API))
    assert activation.phase == FallbackPhase.ACTIVE and _weights(kube) == {GIVING: 42, RECEIVING: 58}
    with pytest.raises(fallbacks.FallbackConflict):
        fallbacks.approve(pools[0], core.Actor(alice, Channel.API))


def test_a_person_forces_a_fallback_that_holds_until_a_person_restores_it(sandbox, pools, policy,  # noqa: ANN001, F811
                                                                          alice: User) -> None:  # noqa: F811
    kube, _ = sandbox
    actor = core.Actor(alice, Channel.API)
    activation = fallbacks.activate(pools[0], 0.3, actor, "drill")
    assert (activation.phase, activation.forced, activation.route_percent) == (FallbackPhase.ACTIVE, True, 30)
    assert fallbacks.activate(pools[0], 0.3, actor).pk == activation.pk  # idempotent
    assert _weights(kube) == {GIVING: 70, RECEIVING: 30}
    now = timezone.now()
    for _ in range(30):  # calm for many minutes: a forced fallback is not returned automatically
        feed(pools, now, primary_rps=10.0, ttft_s=0.1)
        fallbacks.tick(policy.pk, now=now)
        now += timedelta(seconds=15)
    assert _weights(kube) == {GIVING: 70, RECEIVING: 30}
    activation = fallbacks.restore(pools[0], actor, "drill over")
    assert activation.phase == FallbackPhase.RESTORED and _weights(kube) == {GIVING: 100, RECEIVING: 0}
    with pytest.raises(fallbacks.FallbackConflict, match="nothing to restore"):
        fallbacks.restore(pools[0], actor)


def test_the_beat_decides_for_every_policy(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    from controlplane.celery import app
    from scaling import tasks

    entry = app.conf.beat_schedule["advance-fallbacks"]
    assert entry["task"] == tasks.advance_fallbacks.name and entry["options"]["expires"] < entry["schedule"] == 15.0
    feed(pools, timezone.now(), primary_rps=100.0, ttft_s=2.0)
    tasks.advance_fallbacks()
    assert FallbackActivation.objects.get().route_percent == 58 and _weights(sandbox[0]) == {GIVING: 42, RECEIVING: 58}


def test_an_incident_timeline_shows_the_fallback(sandbox, pools, policy, alice: User) -> None:  # noqa: ANN001, F811
    from incidents import timeline
    from incidents.models import Incident

    pool = Pool.objects.get(pk=pools[0].pk)
    incident = Incident.objects.create(team=pool.team, cluster=pool.cluster, pool=pool, title="surge", severity="P1",
                                       opened_at=timezone.now())
    activation = fallbacks.activate(pool, 0.5, core.Actor(alice, Channel.API), "surge on chat")
    entries = [entry for entry in timeline.timeline(incident) if entry.kind == "fallback"]
    assert entries[0].title == f"Fallback #{activation.pk} to chat-8b-warm: entered (50 % of the route)"
    assert entries[0].actor == "alice" and entries[0].detail == "surge on chat" and entries[0].marker == "orange"
    assert entries[-1].url == f"/pools/{pool.pk}/live/#fallback"


def test_the_pool_page_shows_the_fallback(sandbox, pools, policy, alice: User, client) -> None:  # noqa: ANN001, F811
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    fallbacks.tick(policy.pk, now=now)
    client.force_login(alice)
    page = client.get(f"/pools/{pools[0].pk}/live/").content.decode()
    assert "Fallback to chat-8b-warm" in page and "<b>58 %</b> of the route on <code>vllm-chat-8b-warm</code>" in page
    assert "at its maximum of 1 replicas" in page


def test_a_repeated_tick_at_the_same_moment_changes_nothing(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    first = fallbacks.tick(policy.pk, now=now)
    version = kube.store.get(res.HTTPROUTES, "inference", "sandbox-route")["metadata"]["resourceVersion"]
    again = fallbacks.tick(policy.pk, now=now)  # a second worker, or the beat delivered twice
    assert again.pk == first.pk and FallbackActivation.objects.count() == 1
    assert kube.store.get(res.HTTPROUTES, "inference", "sandbox-route")["metadata"]["resourceVersion"] == version
    assert list(again.events.values_list("kind", flat=True)) == ["entered", "written"]


def test_the_traffic_returns_once_the_primarys_capacity_is_ready(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    """Demand stays at 100 req/s; the primary gets three ready replicas (127.5 req/s at 85 %): all comes home."""
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    assert fallbacks.tick(policy.pk, now=now).route_percent == 58
    Pool.objects.filter(pk=pools[0].pk).update(max_replicas=3)
    seen = []
    for _ in range(30):
        now += timedelta(seconds=15)
        percent = FallbackActivation.objects.get().route_percent
        feed(pools, now, primary_rps=100.0 * (1 - percent / 100), fallback_rps=100.0 * percent / 100, ttft_s=0.3,
             ready=3, desired=3)
        activation = fallbacks.tick(policy.pk, now=now)
        seen.append(activation.route_percent)
        if activation.phase == FallbackPhase.RESTORED:
            break
    assert activation.phase == FallbackPhase.RESTORED and _weights(kube) == {GIVING: 100, RECEIVING: 0}, seen
    assert sorted(set(seen), reverse=True) == [58, 29, 15, 0]
    # No return before a calm minute (exit_after_s): the first four ticks keep 58 %.
    assert seen[:4] == [58, 58, 58, 58]


# --- writes whose answer was lost, or whose target moved while in flight ----------------------------


class _ReadBackTimesOut(_AfterTheWrite):
    """The API server applies the patch, then the read-back times out (a transient error)."""

    def after_write(self) -> None:
        from scaling.drivers.cluster import DriverError
        raise DriverError("read HTTPRoute inference/sandbox-route: timed out", permanent=False)


class _RestoredDuringTheWrite(_AfterTheWrite):
    """A person presses 'restore' while the beat's entry write is in flight."""

    def __init__(self, router, pool, actor) -> None:  # noqa: ANN001
        super().__init__(router)
        self.pool, self.actor = pool, actor

    def after_write(self) -> None:
        fallbacks.restore(self.pool, self.actor, "not now")


def test_a_write_whose_answer_was_lost_does_not_wedge_the_fallback(sandbox, pools, policy, alice) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    fallbacks.tick(policy.pk, router=_ReadBackTimesOut(route_router(pools[0].cluster, "httproute")), now=now)
    assert _weights(kube) == {GIVING: 42, RECEIVING: 58}  # the write landed; its answer did not come
    assert FallbackActivation.objects.get().route_percent == 0
    # The overload grows before the next write: the share rises to 43 %, written from the 58 % on the route.
    for _ in range(4):
        now += timedelta(seconds=15)
        feed(pools, now, primary_rps=84.0, fallback_rps=116.0, ttft_s=3.0)
        activation = fallbacks.tick(policy.pk, now=now)
    assert activation.route_percent == activation.target_percent == 43 and not activation.last_error
    # A person's restore brings the traffic back (before, every write failed on the premise for good).
    activation = fallbacks.restore(pools[0], core.Actor(alice, Channel.API), "give it back")
    assert activation.phase == FallbackPhase.RESTORED and _weights(kube) == {GIVING: 100, RECEIVING: 0}
    traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API))  # and the route is free for a shift


def test_a_restore_during_the_entry_write_brings_the_traffic_back(sandbox, pools, policy, alice) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    router = _RestoredDuringTheWrite(route_router(pools[0].cluster, "httproute"), pools[0],
                                     core.Actor(alice, Channel.API))
    fallbacks.tick(policy.pk, router=router, now=now)
    activation = FallbackActivation.objects.get()
    assert activation.phase == FallbackPhase.RESTORED and _weights(kube) == {GIVING: 100, RECEIVING: 0}


def test_a_route_edited_by_hand_ends_the_fallback_and_holds_automatic_entries(sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    """Someone changed the route's weights by hand mid-overload: the fallback steps back (failed, one event, one
    audit record), leaves the route as that person set it, and the policy does not take it back for 30 min."""
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    fallbacks.tick(policy.pk, now=now)
    assert _weights(kube) == {GIVING: 42, RECEIVING: 58}

    def by_hand(route: dict) -> dict:  # someone sets 70/30: weights the fallback never asked for
        route["spec"]["rules"][0]["backendRefs"][0]["weight"] = 70
        route["spec"]["rules"][0]["backendRefs"][1]["weight"] = 30
        return route

    kube.store.update(res.HTTPROUTES, NS, ROUTE, by_hand)
    for _ in range(6):
        now += timedelta(seconds=15)
        feed(pools, now, primary_rps=84.0, fallback_rps=116.0, ttft_s=3.0)
        fallbacks.tick(policy.pk, now=now)
    activation = FallbackActivation.objects.get()  # no second activation while the overload goes on
    assert activation.phase == FallbackPhase.FAILED and "changed" in activation.last_error
    assert activation.events.filter(kind="failed").count() == 1 and not activation.events.filter(kind="write_failed")
    assert AuditEvent.objects.filter(action="fallback-failed", object_id=str(activation.pk)).count() == 1
    assert _weights(kube) == {GIVING: 70, RECEIVING: 30}  # never overwritten
    policy.refresh_from_db()
    assert f"entry held: fallback #{activation.pk} failed" in policy.last_decision["reasons"][-1]

    now = activation.finished_at + timedelta(seconds=fallbacks.STEP_BACK_S + 1)  # still overloaded 30 min on
    feed(pools, now, primary_rps=84.0, fallback_rps=116.0, ttft_s=3.0)
    again = fallbacks.tick(policy.pk, now=now)
    assert again.pk != activation.pk and again.phase == FallbackPhase.ACTIVE
    assert again.start_weights == {GIVING: 70, RECEIVING: 30}  # from the route as that person left it


def test_a_person_may_fall_back_while_automatic_entries_are_held(sandbox, pools, policy, alice) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    entered = fallbacks.tick(policy.pk, now=now)
    kube.store.update(res.HTTPROUTES, NS, ROUTE, lambda route: {**route, "spec": {**route["spec"], "rules": [
        {**route["spec"]["rules"][0], "backendRefs": [{**ref, "weight": w} for ref, w in
                                                      zip(route["spec"]["rules"][0]["backendRefs"], (90, 10))]}]}})
    feed(pools, now + timedelta(seconds=15), primary_rps=84.0, fallback_rps=116.0, ttft_s=3.0)
    assert fallbacks.tick(policy.pk, now=now + timedelta(seconds=15)).phase == FallbackPhase.FAILED
    assert FallbackActivation.objects.get(pk=entered.pk).phase == FallbackPhase.FAILED

    forced = fallbacks.activate(pools[0], 0.5, core.Actor(alice, Channel.API), "by hand, through Headroom")

    assert forced.phase == FallbackPhase.ACTIVE and forced.route_percent == 50
    assert _weights(kube) == {GIVING: 50, RECEIVING: 50}


def _primary_one_fallback_zero(kube) -> None:  # noqa: ANN001
    """The Gateway API's default: a backend without a weight weighs 1."""
    def by_hand(route: dict) -> dict:
        route["spec"]["rules"][0]["backendRefs"][0]["weight"] = 1
        route["spec"]["rules"][0]["backendRefs"][1]["weight"] = 0
        return route
    kube.store.update(res.HTTPROUTES, NS, ROUTE, by_hand)


def test_a_pair_weighing_1_carries_the_share_not_all_or_nothing(sandbox, pools, policy, alice) -> None:  # noqa: ANN001, F811
    kube, _ = sandbox
    _primary_one_fallback_zero(kube)
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    activation = fallbacks.tick(policy.pk, now=now)
    assert activation.route_percent == 58 and _weights(kube) == {GIVING: 42, RECEIVING: 58}  # was 0/1: everything
    restored = fallbacks.restore(pools[0], core.Actor(alice, Channel.API), "back")
    assert restored.phase == FallbackPhase.RESTORED and _weights(kube) == {GIVING: 100, RECEIVING: 0}
    forced = fallbacks.activate(pools[0], 0.3, core.Actor(alice, Channel.API), "a drill")
    assert forced.route_percent == 30 and _weights(kube) == {GIVING: 70, RECEIVING: 30}


def test_a_pool_with_an_open_fallback_cannot_be_deleted_until_it_is_restored(sandbox, pools, policy, alice) -> None:  # noqa: ANN001, F811
    from controlplane.choices import Role
    from controlplane.models import Membership
    from tests.core.conftest import token_client

    kube, _ = sandbox
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    activation = fallbacks.tick(policy.pk, now=now)
    admin = User.objects.create_user("admin-ml")
    Membership.objects.create(user=admin, team=pools[0].team, role=Role.ADMIN)
    for pool in pools:  # the primary and its fallback
        answer = token_client(admin).delete(f"/api/v1/pools/{pool.pk}/")
        assert answer.status_code == 409 and f"fallback #{activation.pk}" in answer.data["detail"], answer.data
    fallbacks.restore(pools[0], core.Actor(alice, Channel.API), "back")
    assert _weights(kube) == {GIVING: 100, RECEIVING: 0}
    assert token_client(admin).delete(f"/api/v1/pools/{pools[0].pk}/").status_code == 204
