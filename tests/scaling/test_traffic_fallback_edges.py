"""The edges of shifts and fallbacks a person meets: a fallback whose pool was retargeted or whose policy went
while it was open, a double click on approve or restore, the pool page's latest shift, and an idempotency key
reused for another shift. The route lives in the sandbox's Kubernetes API emulator."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db.models import Model
from django.test import Client
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Cluster, Pool, Team
from scaling import fallbacks, traffic
from scaling.choices import FallbackPhase, ShiftPhase
from scaling.drivers.cluster import DriverError
from scaling.drivers.registry import route_router
from scaling.models import FallbackActivation, FallbackPolicy, TrafficShift

from tests.core.conftest import alice, bob, cluster, ml_team, token_client  # noqa: F401
from tests.core.test_permission_matrix import form_data
from tests.scaling.test_fallbacks import feed, policy  # noqa: F401
from tests.scaling.test_traffic import GIVING, NS, RECEIVING, ROUTE, _pool, _weights, observe, pools, sandbox  # noqa: F401

SHIFTS, FALLBACKS = "/api/v1/shifts/", "/api/v1/fallbacks/"


def _audited(action: str, obj: Model) -> int:
    return AuditEvent.objects.filter(action=action, object_type=obj._meta.label_lower, object_id=str(obj.pk)).count()


def _activate(sandbox, pools, user: User) -> FallbackActivation:  # noqa: ANN001, F811
    """A person's drill: a quarter of the pool's traffic on its fallback."""
    activation = fallbacks.activate(pools[0], 0.25, core.Actor(user, Channel.API), "drill")
    assert activation.route_percent == 25 and _weights(sandbox[0]) == {GIVING: 75, RECEIVING: 25}
    return activation


class _WriteTimesOut:
    """The sandbox's router, whose writes time out before they land (a transient error)."""

    def __init__(self, router) -> None:  # noqa: ANN001
        self.router, self.scheme = router, router.scheme

    def read(self, route, backends=None):  # noqa: ANN001, ANN201
        return self.router.read(route, backends)

    def set_weights(self, route, target, premise):  # noqa: ANN001, ANN201
        raise DriverError("patch HTTPRoute inference/sandbox-route: timed out", permanent=False)


# --- 1. an open fallback is restored from its own record, and nothing strands it ---------------------


@pytest.mark.parametrize("change", ["policy deleted", "fallback cleared", "fallback changed"])
def test_it_restores_from_the_activations_record_whatever_happened_to_the_policy(
        alice: User, sandbox, pools, policy, cluster: Cluster, ml_team: Team, change: str) -> None:  # noqa: ANN001, F811
    activation = _activate(sandbox, pools, alice)
    # Past the guards (a row written before they existed, or by hand in the database).
    if change == "policy deleted":
        FallbackPolicy.objects.filter(pk=policy.pk).delete()
    else:
        other = _pool(cluster, ml_team, "chat-1b", "vllm-chat-1b") if change == "fallback changed" else None
        Pool.objects.filter(pk=pools[0].pk).update(fallback_pool=other)
    restored = token_client(alice).post(f"{FALLBACKS}restore/", {"pool": pools[0].pk}, format="json")
    assert restored.status_code == 200, restored.data
    assert (restored.data["id"], restored.data["phase"]) == (activation.pk, "restored")
    assert _weights(sandbox[0]) == {GIVING: 100, RECEIVING: 0}


def test_it_refuses_deleting_the_policy_while_a_fallback_is_open(alice: User, bob: User, sandbox, pools,  # noqa: ANN001, F811
                                                                 policy) -> None:  # noqa: F811
    activation = _activate(sandbox, pools, alice)
    admin = token_client(bob)
    refused = admin.delete(f"/api/v1/fallback-policies/{policy.pk}/")
    assert refused.status_code == 409, refused.data
    assert f"fallback #{activation.pk}" in refused.data["detail"] and "restore it first" in refused.data["detail"]
    assert FallbackPolicy.objects.filter(pk=policy.pk).exists() and _audited("delete", policy) == 0
    token_client(alice).post(f"{FALLBACKS}restore/", {"pool": pools[0].pk}, format="json")
    assert admin.delete(f"/api/v1/fallback-policies/{policy.pk}/").status_code == 204
    assert _audited("delete", policy) == 1


@pytest.mark.parametrize("change", ["cleared", "changed"])
def test_it_refuses_retargeting_the_fallback_pool_while_a_fallback_is_open(
        alice: User, bob: User, sandbox, pools, policy, cluster: Cluster, ml_team: Team, change: str) -> None:  # noqa: ANN001, F811
    activation = _activate(sandbox, pools, alice)
    other = _pool(cluster, ml_team, "chat-1b", "vllm-chat-1b")
    target = other.pk if change == "changed" else None
    refused = token_client(bob).patch(f"/api/v1/pools/{pools[0].pk}/", {"fallback_pool": target}, format="json")
    assert refused.status_code == 409, refused.data
    says = str(refused.data["fallback_pool"])
    assert f"fallback #{activation.pk}" in says and "restore it first" in says
    client = Client()
    client.force_login(bob)
    primary = Pool.objects.get(pk=pools[0].pk)
    page = client.post(f"/pool/{primary.pk}/edit/", form_data("pool", primary, bob, fallback_pool=target or ""))
    assert page.status_code == 200 and f"fallback #{activation.pk}" in page.content.decode()
    assert Pool.objects.get(pk=pools[0].pk).fallback_pool_id == pools[1].pk
    assert _audited("update", pools[0]) == 0
    # Other edits of the pool go on; and once restored, the fallback pool may change.
    assert token_client(bob).patch(f"/api/v1/pools/{pools[0].pk}/", {"max_replicas": 2}, format="json").status_code == 200
    token_client(alice).post(f"{FALLBACKS}restore/", {"pool": pools[0].pk}, format="json")
    changed = token_client(bob).patch(f"/api/v1/pools/{pools[0].pk}/", {"fallback_pool": target}, format="json")
    assert changed.status_code == 200 and changed.data["fallback_pool"] == target


@pytest.mark.parametrize("change", ["policy deleted", "policy disabled"])
def test_a_restore_whose_write_failed_is_finished_by_the_beat_with_no_policy_ticking(
        alice: User, sandbox, pools, policy, change: str) -> None:  # noqa: ANN001, F811
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    entered = fallbacks.tick(policy.pk, now=now)  # the policy's own entry: no person holds it
    assert (entered.forced, _weights(sandbox[0])) == (False, {GIVING: 42, RECEIVING: 58})
    if change == "policy deleted":
        FallbackPolicy.objects.filter(pk=policy.pk).delete()
    else:
        FallbackPolicy.objects.filter(pk=policy.pk).update(enabled=False)
    router = _WriteTimesOut(route_router(pools[0].cluster, "httproute"))
    activation = fallbacks.restore(pools[0], core.Actor(alice, Channel.API), "back", router=router)
    assert activation.phase == FallbackPhase.RESTORING and "timed out" in activation.last_error
    fallbacks.advance(now=now + timedelta(seconds=15))
    assert FallbackActivation.objects.get(pk=activation.pk).phase == FallbackPhase.RESTORED
    assert _weights(sandbox[0]) == {GIVING: 100, RECEIVING: 0}


# --- 2. approving a shift's step twice ------------------------------------------------------------


def _waiting_shift(sandbox, pools, user: User) -> TrafficShift:  # noqa: ANN001, F811
    shift = traffic.start(pools[0], pools[1], core.Actor(user, Channel.API), hold_s=15, gated_steps=[1])
    now = timezone.now()
    observe(*sandbox, pools, now)
    shift = traffic.tick(shift.pk, now=now)
    assert shift.phase == ShiftPhase.WAITING_APPROVAL
    return shift


def test_a_second_approve_of_a_step_is_a_409_and_audited_once(alice: User, sandbox, pools) -> None:  # noqa: ANN001, F811
    shift = _waiting_shift(sandbox, pools, alice)
    client = token_client(alice)
    first = client.post(f"{SHIFTS}{shift.pk}/approve/", format="json")
    assert first.status_code == 200 and first.data["approved_step"] == 1
    again = client.post(f"{SHIFTS}{shift.pk}/approve/", format="json")
    assert again.status_code == 409 and "already approved" in again.data["detail"], again.data
    assert again.data["id"] == shift.pk
    assert _audited("shift-approve", shift) == 1
    assert TrafficShift.objects.get(pk=shift.pk).events.filter(data__approved_step=1).count() == 1


def test_the_shift_card_shows_no_approve_button_once_the_step_is_approved(alice: User, sandbox, pools,  # noqa: ANN001, F811
                                                                         client: Client) -> None:
    shift = _waiting_shift(sandbox, pools, alice)
    client.force_login(alice)
    assert "Approve step 1</button>" in client.get(f"/pools/{pools[1].pk}/live/").content.decode()
    approved = client.post(f"/shifts/{shift.pk}/approve/")
    assert approved.status_code == 200
    assert "Approve step 1</button>" not in approved.content.decode()
    assert "Step 1 approved" in approved.content.decode()
    again = client.post(f"/shifts/{shift.pk}/approve/")  # a second click, from a page loaded before
    assert again.status_code == 409 and "already approved" in again.content.decode()
    assert "Approve step 1</button>" not in again.content.decode()
    assert "Approve step 1</button>" not in client.get(f"/pools/{pools[1].pk}/live/").content.decode()
    assert _audited("shift-approve", shift) == 1


# --- 3. restoring a fallback twice ----------------------------------------------------------------


def test_a_second_restore_while_the_first_is_being_written_is_a_409_and_audited_once(alice: User, sandbox, pools,  # noqa: ANN001, F811
                                                                                     policy) -> None:  # noqa: F811
    activation = _activate(sandbox, pools, alice)
    router = _WriteTimesOut(route_router(pools[0].cluster, "httproute"))
    first = fallbacks.restore(pools[0], core.Actor(alice, Channel.API), "back", router=router)
    assert (first.phase, first.target_percent) == (FallbackPhase.RESTORING, 0)
    again = token_client(alice).post(f"{FALLBACKS}restore/", {"pool": pools[0].pk}, format="json")
    assert again.status_code == 409 and "already being restored" in again.data["detail"], again.data
    assert (again.data["id"], again.data["phase"]) == (activation.pk, "restoring")
    with pytest.raises(fallbacks.FallbackConflict, match="already being restored"):
        fallbacks.restore(pools[0], core.Actor(alice, Channel.API))
    assert _audited("fallback-restore", activation) == 1
    fallbacks.advance()  # the beat finishes the write
    assert FallbackActivation.objects.get(pk=activation.pk).phase == FallbackPhase.RESTORED
    assert _weights(sandbox[0]) == {GIVING: 100, RECEIVING: 0}
    done = token_client(alice).post(f"{FALLBACKS}restore/", {"pool": pools[0].pk}, format="json")
    assert done.status_code == 409 and _audited("fallback-restore", activation) == 1


# --- 4. the pool page's latest shift ---------------------------------------------------------------


def _shift_row(giving: Pool, receiving: Pool, phase: str, created_at) -> TrafficShift:  # noqa: ANN001
    shift = TrafficShift.objects.create(
        cluster=giving.cluster, from_pool=giving, to_pool=receiving, route_namespace=NS, route_name=ROUTE,
        from_backend=giving.route_backend, to_backend=receiving.route_backend, steps=[80, 95, 100], hold_s=60,
        max_p95_s=1.0, max_error_rate=0.01, failure_threshold=3, no_data_deadline_s=120, phase=phase,
        start_weights={giving.route_backend: 100, receiving.route_backend: 0},
        planned_weights=[], current_weights={giving.route_backend: 100, receiving.route_backend: 0},
        idempotency_key=f"k-{phase}", created_channel=Channel.API)
    TrafficShift.objects.filter(pk=shift.pk).update(created_at=created_at)
    return shift


@pytest.mark.parametrize("newest", ["giving", "receiving"])
def test_the_pool_page_shows_the_latest_shift_the_pool_takes_part_in(alice: User, cluster: Cluster, ml_team: Team,  # noqa: F811
                                                                      client: Client, newest: str) -> None:
    pool, other = _pool(cluster, ml_team, "chat-8b", GIVING), _pool(cluster, ml_team, "chat-8b-warm", RECEIVING)
    earlier = timezone.now() - timedelta(hours=1)
    if newest == "giving":  # the pool took traffic an hour ago, and gives it back now
        old, new = _shift_row(other, pool, ShiftPhase.COMPLETED, earlier), _shift_row(pool, other, ShiftPhase.PENDING,
                                                                                      timezone.now())
    else:
        old, new = _shift_row(pool, other, ShiftPhase.COMPLETED, earlier), _shift_row(other, pool, ShiftPhase.PENDING,
                                                                                      timezone.now())
    client.force_login(alice)
    page = client.get(f"/pools/{pool.pk}/live/").content.decode()
    assert f"Traffic shift #{new.pk}" in page and f"Traffic shift #{old.pk}" not in page


def test_the_pool_page_shows_the_newest_of_two_shifts_the_pool_receives(alice: User, cluster: Cluster,  # noqa: F811
                                                                         ml_team: Team, client: Client) -> None:  # noqa: F811
    pool, other = _pool(cluster, ml_team, "chat-8b", GIVING), _pool(cluster, ml_team, "chat-8b-warm", RECEIVING)
    new = _shift_row(other, pool, ShiftPhase.PENDING, timezone.now())
    old = _shift_row(other, pool, ShiftPhase.COMPLETED, timezone.now() - timedelta(hours=1))  # made later, older
    client.force_login(alice)
    page = client.get(f"/pools/{pool.pk}/live/").content.decode()
    assert f"Traffic shift #{new.pk}" in page and f"Traffic shift #{old.pk}" not in page


# --- 5. an idempotency key reused for another shift -------------------------------------------------


@pytest.mark.parametrize(("changes", "says"), [
    ({"steps": [50, 100]}, "steps"),
    ({"hold_s": 30}, "hold_s"),
    ({"gated_steps": [2]}, "gated_steps"),
    ({"max_p95_s": 2.0}, "max_p95_s"),
    ({"router_kind": "virtualservice"}, "router_kind"),
])
def test_a_key_reused_with_other_parameters_is_a_409_naming_the_key(alice: User, sandbox, pools,  # noqa: ANN001, F811
                                                                    changes: dict, says: str) -> None:
    client = token_client(alice)
    payload = {"from_pool": pools[0].pk, "to_pool": pools[1].pk, "hold_s": 60, "idempotency_key": "k1"}
    first = client.post(SHIFTS, payload, format="json")
    assert first.status_code == 201, first.data
    same = client.post(SHIFTS, payload, format="json")
    assert same.status_code == 201 and same.data["id"] == first.data["id"]
    other = client.post(SHIFTS, payload | changes, format="json")
    assert other.status_code == 409, other.data
    assert "'k1'" in str(other.data["idempotency_key"]) and says in str(other.data["idempotency_key"])
    assert other.data["id"] == first.data["id"] and TrafficShift.objects.count() == 1
    assert _audited("shift-start", TrafficShift.objects.get()) == 1


def test_a_key_reused_by_the_service_with_other_steps_is_refused(alice: User, sandbox, pools) -> None:  # noqa: ANN001, F811
    actor = core.Actor(alice, Channel.API)
    shift = traffic.start(pools[0], pools[1], actor, idempotency_key="k2")
    assert traffic.start(pools[0], pools[1], actor, idempotency_key="k2", steps=[80, 95, 100]).pk == shift.pk
    with pytest.raises(traffic.ShiftConflict, match="'k2'") as refused:
        traffic.start(pools[0], pools[1], actor, idempotency_key="k2", steps=[90, 100])
    assert refused.value.field == "idempotency_key" and refused.value.status_code == 409
