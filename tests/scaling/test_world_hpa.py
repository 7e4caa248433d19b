"""Scenario 1: a pool scaled through its HorizontalPodAutoscaler while the world moves between approval and
execution. control-loop.md, Execution step 3: "none, two, KEDA's own, a floor of 0 or one above the HPA's
`maxReplicas` fail at once, naming what was found"; design.md §7 "never applies a step twice"; control-loop.md
"writes only while the change still goes the approved way"."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.choices import ScalingTarget
from controlplane.models import Pool
from sandbox.kube import resources as res
from sandbox.kube.cluster import SandboxCluster
from sandbox.replica import wait_until
from scaling import services
from scaling.choices import ProposalState
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.models import Proposal

from tests.scaling.world import NS, approved, audits, replicas, stop_controller

HPA = "chat-hpa"


def _hpa(kube: SandboxCluster, name: str = HPA, *, owner: str = "", minimum: int = 1, maximum: int = 8) -> None:
    metadata: dict = {"name": name, "namespace": NS}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": owner,
                                        "uid": "0000", "controller": True}]
    kube.store.create(res.HPAS, {"metadata": metadata, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-chat-8b"},
        "minReplicas": minimum, "maxReplicas": maximum}, "status": {}})


def _hpa_pool(kube_pool: Pool, kube: SandboxCluster) -> Pool:
    _hpa(kube)
    Pool.objects.filter(pk=kube_pool.pk).update(scaling_target=ScalingTarget.HPA)
    return Pool.objects.select_related("cluster", "team").get(pk=kube_pool.pk)


def _edit_hpa(kube: SandboxCluster, name: str = HPA, **spec: object) -> None:
    def change(obj: dict) -> dict:
        obj["spec"].update(spec)
        return obj
    kube.store.update(res.HPAS, NS, name, change)


def _ends_failed_once(proposal: Proposal, kube: SandboxCluster, expected: str) -> None:
    driver = KubernetesDriver(kube.url)
    done = services.execute(proposal.pk, driver)
    assert done is not None and done.state == ProposalState.FAILED, (done and done.state, done and done.last_error)
    assert expected in done.last_error, done.last_error
    assert services.execute(proposal.pk, driver) is None  # a retried task finds nothing to do
    services.advance()  # the sweep neither
    done.refresh_from_db()
    assert done.state == ProposalState.FAILED and done.attempts == 1
    assert audits(done, "failed") == 1 and audits(done, "scale") == 0
    assert replicas(kube) == 1


def test_hpa_max_lowered_below_the_target_after_approval(kube_pool: Pool, alice: User, bob: User,
                                                         kube: SandboxCluster) -> None:
    pool = _hpa_pool(kube_pool, kube)
    proposal = approved(pool, 5, alice, bob)
    _edit_hpa(kube, maxReplicas=3)  # another team caps the HPA (a GPU quota)
    _ends_failed_once(proposal, kube, "allows at most 3 replicas; 5 asked")
    assert kube.store.get(res.HPAS, NS, HPA)["spec"]["minReplicas"] == 1


def test_hpa_deleted_after_approval(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    pool = _hpa_pool(kube_pool, kube)
    proposal = approved(pool, 3, alice, bob)
    kube.store.delete(res.HPAS, NS, HPA)
    _ends_failed_once(proposal, kube, "no HorizontalPodAutoscaler scales Deployment inference/vllm-chat-8b")


def test_second_hpa_added_after_approval(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    pool = _hpa_pool(kube_pool, kube)
    proposal = approved(pool, 3, alice, bob)
    _hpa(kube, "other-teams-hpa")
    _ends_failed_once(proposal, kube, "2 HorizontalPodAutoscalers scale Deployment")
    assert kube.store.get(res.HPAS, NS, HPA)["spec"]["minReplicas"] == 1
    assert kube.store.get(res.HPAS, NS, "other-teams-hpa")["spec"]["minReplicas"] == 1


def test_keda_takes_over_after_approval(kube_pool: Pool, alice: User, bob: User, kube: SandboxCluster) -> None:
    pool = _hpa_pool(kube_pool, kube)
    proposal = approved(pool, 3, alice, bob)
    kube.store.delete(res.HPAS, NS, HPA)
    _hpa(kube, "keda-hpa-vllm-chat-8b", owner="chat-scaler")
    _ends_failed_once(proposal, kube, "is KEDA's, which resets its minReplicas")
    assert kube.store.get(res.HPAS, NS, "keda-hpa-vllm-chat-8b")["spec"]["minReplicas"] == 1


def test_hpa_retargeted_at_another_deployment_after_approval(kube_pool: Pool, alice: User, bob: User,
                                                              kube: SandboxCluster) -> None:
    pool = _hpa_pool(kube_pool, kube)
    proposal = approved(pool, 3, alice, bob)
    _edit_hpa(kube, scaleTargetRef={"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-other"})
    _ends_failed_once(proposal, kube, "no HorizontalPodAutoscaler scales Deployment")


def test_a_resumed_execution_whose_write_landed_writes_nothing_again(kube_pool: Pool, alice: User, bob: User,
                                                                       kube: SandboxCluster) -> None:
    pool = _hpa_pool(kube_pool, kube)
    proposal = approved(pool, 3, alice, bob)
    claimed = services.claim_execution(proposal.pk)
    services._record_intent(claimed, timezone.now(), KubernetesDriver(kube.url).generation(services.workload_of(pool)))
    # Worker 1's write lands, then the worker dies before recording it.
    KubernetesDriver(kube.url).scale(services.workload_of(pool), 3,
                                     services.ScalePremise(decided_from=1, target=3))
    assert kube.store.get(res.HPAS, NS, HPA)["spec"]["minReplicas"] == 3
    Proposal.objects.filter(pk=proposal.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert services.advance()["resumed"] == 1
    assert wait_until(lambda: replicas(kube) == 3, 5)
    done = Proposal.objects.get(pk=proposal.pk)
    if done.state == ProposalState.EXECUTING:
        wait_until(lambda: services.track_readiness(done, KubernetesDriver(kube.url)).state != ProposalState.EXECUTING, 10)
        done.refresh_from_db()
    assert done.state == ProposalState.SUCCEEDED, (done.state, done.last_error)
    assert audits(done, "scale") == 1
    assert done.applied_from_replicas is None  # the resumed attempt wrote nothing
    assert kube.store.get(res.HPAS, NS, HPA)["spec"]["minReplicas"] == 3


def test_a_scale_up_never_lowers_a_floor_someone_raised_meanwhile(kube_pool: Pool, alice: User, bob: User,
                                                                  kube: SandboxCluster) -> None:
    """Approved 1 → 3 through the HPA. Before the worker runs, another team raises the HPA's floor to 6 for its
    launch; the HPA controller has not synced yet (it does every 15 s), so the Deployment still runs 1.
    Writing minReplicas 3 now lowers that floor from 6 to 3: a scale-up approved, a scale-down written."""
    pool = _hpa_pool(kube_pool, kube)
    proposal = approved(pool, 3, alice, bob)
    stop_controller(kube)
    _edit_hpa(kube, minReplicas=6)
    done = services.execute(proposal.pk, KubernetesDriver(kube.url))
    floor = kube.store.get(res.HPAS, NS, HPA)["spec"]["minReplicas"]
    assert floor == 6, (f"the HPA's floor went 6 → {floor}; proposal {done.state}: "
                        f"{done.events.order_by('pk').last().comment}")


def test_keda_too_a_scale_up_never_lowers_a_floor_someone_raised_meanwhile(kube_pool: Pool, alice: User, bob: User,
                                                                         kube: SandboxCluster) -> None:
    """The same moment through a KEDA ScaledObject: minReplicaCount raised to 6 by another team, KEDA's HPA not
    yet synced; the approved 1 → 3 writes minReplicaCount 3."""
    kube.store.create(res.SCALEDOBJECTS, {"metadata": {"name": "vllm-chat-8b", "namespace": NS}, "spec": {
        "scaleTargetRef": {"name": "vllm-chat-8b"}, "minReplicaCount": 1, "maxReplicaCount": 8}, "status": {}})
    Pool.objects.filter(pk=kube_pool.pk).update(scaling_target=ScalingTarget.KEDA, scaled_object="vllm-chat-8b")
    pool = Pool.objects.select_related("cluster", "team").get(pk=kube_pool.pk)
    proposal = approved(pool, 3, alice, bob)
    stop_controller(kube)

    def raise_floor(obj: dict) -> dict:
        obj["spec"]["minReplicaCount"] = 6
        return obj
    kube.store.update(res.SCALEDOBJECTS, NS, "vllm-chat-8b", raise_floor)
    done = services.execute(proposal.pk, KubernetesDriver(kube.url))
    floor = kube.store.get(res.SCALEDOBJECTS, NS, "vllm-chat-8b")["spec"]["minReplicaCount"]
    assert floor == 6, f"the ScaledObject's floor went 6 → {floor}; proposal {done.state}"


def test_after_an_hpa_max_was_lowered_the_loop_does_not_fail_a_new_proposal_every_minute(
        kube_pool: Pool, kube: SandboxCluster) -> None:
    """Another team lowers the HPA's maxReplicas to 3 during a surge; the planner (pool max 8) keeps asking for 5.
    Each minute the loop's key is new: without a hold, a reactive 3 → 5 would be auto-approved, fail on the HPA's
    ceiling and be audited every minute. The same change waits 15 minutes after it failed."""
    from scaling import loop
    from scaling.drivers.cluster import ReplicaStatus
    from scaling.engine.decide import Decision
    from scaling.engine.planner import PlannerState
    
    pool = _hpa_pool(kube_pool, kube)
    _edit_hpa(kube, minReplicas=3)
    assert wait_until(lambda: replicas(kube) == 3, 5)
    _edit_hpa(kube, maxReplicas=3)
    services.record_status(pool, ReplicaStatus(3, 3), timezone.now())
    wants_five = Decision(target_replicas=5, current_replicas=3, ready_replicas=3, arriving_replicas=0, terms=(),
                          binding="reactive", reasons=("queue 12 per ready replica",), hold=False,
                          signals_unknown_for_s=0.0, staleness_alert=False, capacity_per_replica_rps=1.0,
                          prescale=None, state=PlannerState())
    start = timezone.now().replace(second=5, microsecond=0)
    for minute in range(5):  # five minutes of the surge, one tick a minute shown
        loop.act(pool, wants_five, {}, {}, start + timedelta(minutes=minute))
        services.advance()
    failed = Proposal.objects.filter(pool=pool, state=ProposalState.FAILED)
    assert failed.count() == 1, (f"{failed.count()} proposals failed in 5 minutes, each "
                                 f"'{failed.first().last_error}'")
    said = loop.act(pool, wants_five, {}, {}, start + timedelta(minutes=6))
    assert said[0].startswith(f"no proposal: the same change (#{failed.get().pk}, 3 → 5) failed at"), said
    later = failed.get().finished_at + timedelta(seconds=loop.FAILED_CHANGE_HOLD_S + 1)
    assert loop.act(pool, wants_five, {}, {}, later)[0].startswith("proposal #")  # and then it may try again


def test_a_scale_down_through_the_hpa_ends_once_the_floor_is_lowered(kube_pool: Pool, alice: User, bob: User,
                                                                      kube: SandboxCluster) -> None:
    """Through an HPA a scale-down only lowers the floor (5 → 2); the HPA then decides, on its own metrics, how
    many run, and here they keep 5 (a busy CPU, a stabilization window). The change is done once the floor is
    written: waiting for 2 would fail it 'only 5 of 2 replicas ready' although everything Headroom wrote holds."""
    pool = _hpa_pool(kube_pool, kube)
    _edit_hpa(kube, minReplicas=5)
    assert wait_until(lambda: len(kube.ready_replicas(NS, "vllm-chat-8b")) == 5, 10)
    from scaling.drivers.cluster import ReplicaStatus
    services.record_status(pool, ReplicaStatus(5, 5), timezone.now())
    proposal = approved(pool, 2, alice, bob, current=5)
    driver = KubernetesDriver(kube.url)
    written = services.execute(proposal.pk, driver)
    assert kube.store.get(res.HPAS, NS, HPA)["spec"]["minReplicas"] == 2
    assert written.state == ProposalState.SUCCEEDED, written.last_error
    assert written.events.order_by("pk").last().comment.startswith("floor lowered to 2: the autoscaler runs 5 now")
