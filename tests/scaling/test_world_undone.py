"""A write that landed while its worker died, then undone by a person before the attempt resumed.

The resumed attempt finds the count the change was decided from: by the count alone that reads as "never
written", and it wrote the target again, overruling the person (control-loop.md, Execution: "an attempt that
is resumed or retried writes only onto an object whose spec nobody changed since the earlier attempt read it").
The object's generation, recorded with each attempt's intent, tells the two apart."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.choices import ScalingTarget
from controlplane.models import Pool
from sandbox.kube import resources as res
from sandbox.kube.cluster import SandboxCluster
from scaling import services
from scaling.choices import ProposalState
from scaling.drivers.cluster import DriverError, ScaleOutcome, ScalePremise, Workload
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.models import Proposal

from tests.scaling.test_safety import _DiesAfterWriting
from tests.scaling.world import NS, approved, apps, audits, replicas, set_replicas, stop_controller

HPA, SCALED_OBJECT = "chat-hpa", "chat-so"


class _UnavailableOnce(_DiesAfterWriting):
    """The API server answers the write with a 503 before it lands: the attempt is retried after its backoff."""

    def scale(self, workload: Workload, replicas: int, premise: ScalePremise | None = None) -> ScaleOutcome:
        raise DriverError("scale deployment: HTTP 503: unavailable", permanent=False, status=503)


def _resume(proposal: Proposal) -> Proposal:
    """The lease runs out and the sweep's next worker takes the proposal up again."""
    resumed = services.claim_execution(proposal.pk, now=timezone.now() + timedelta(hours=1))
    assert resumed is not None and resumed.attempts == 2
    return resumed


def _lands_then_dies(proposal: Proposal, kube: SandboxCluster) -> None:
    claimed = services.claim_execution(proposal.pk)
    with pytest.raises(SystemExit):
        services.apply_change(claimed, _DiesAfterWriting(kube.url))


def _ends_stale_without_writing(proposal: Proposal, kube: SandboxCluster) -> Proposal:
    done = services.apply_change(_resume(proposal), KubernetesDriver(kube.url))
    assert done.state == ProposalState.STALE, (done.state, done.last_error)
    assert "may have landed and been undone" in done.last_error, done.last_error
    assert "generation" in done.last_error and audits(done, "scale") == 0
    return done


def _pool(kube_pool: Pool, **fields: object) -> Pool:
    Pool.objects.filter(pk=kube_pool.pk).update(**fields)
    return Pool.objects.select_related("cluster", "team").get(pk=kube_pool.pk)


def test_a_deployment_scaled_back_by_a_person_is_not_scaled_up_again(kube_pool: Pool, alice: User, bob: User,
                                                                      kube: SandboxCluster) -> None:
    proposal = approved(kube_pool, 3, alice, bob)
    _lands_then_dies(proposal, kube)
    assert replicas(kube) == 3
    set_replicas(kube, 1)  # the on-call, seeing 3 replicas nobody recorded, scales back by hand
    _ends_stale_without_writing(proposal, kube)
    assert replicas(kube) == 1


def test_an_hpa_floor_lowered_back_by_a_person_is_not_raised_again(kube_pool: Pool, alice: User, bob: User,
                                                                   kube: SandboxCluster) -> None:
    kube.store.create(res.HPAS, {"metadata": {"name": HPA, "namespace": NS}, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-chat-8b"},
        "minReplicas": 1, "maxReplicas": 8}, "status": {}})
    pool = _pool(kube_pool, scaling_target=ScalingTarget.HPA)
    proposal = approved(pool, 3, alice, bob)
    stop_controller(kube)  # the floor moves before the HPA controller syncs the Deployment
    _lands_then_dies(proposal, kube)
    kube.store.update(res.HPAS, NS, HPA, lambda hpa: {**hpa, "spec": {**hpa["spec"], "minReplicas": 1}})
    _ends_stale_without_writing(proposal, kube)
    assert kube.store.get(res.HPAS, NS, HPA)["spec"]["minReplicas"] == 1


def test_a_keda_floor_lowered_back_by_a_person_is_not_raised_again(kube_pool: Pool, alice: User, bob: User,
                                                                   kube: SandboxCluster) -> None:
    kube.store.create(res.SCALEDOBJECTS, {"metadata": {"name": SCALED_OBJECT, "namespace": NS}, "spec": {
        "scaleTargetRef": {"name": "vllm-chat-8b"}, "minReplicaCount": 1, "maxReplicaCount": 8}, "status": {}})
    pool = _pool(kube_pool, scaling_target=ScalingTarget.KEDA, scaled_object=SCALED_OBJECT)
    proposal = approved(pool, 3, alice, bob)
    stop_controller(kube)
    _lands_then_dies(proposal, kube)
    kube.store.update(res.SCALEDOBJECTS, NS, SCALED_OBJECT,
                      lambda so: {**so, "spec": {**so["spec"], "minReplicaCount": 1}})
    _ends_stale_without_writing(proposal, kube)
    assert kube.store.get(res.SCALEDOBJECTS, NS, SCALED_OBJECT)["spec"]["minReplicaCount"] == 1


def test_a_write_that_never_landed_is_made_by_the_next_attempt(kube_pool: Pool, alice: User, bob: User,
                                                               kube: SandboxCluster) -> None:
    """The generation is unchanged since the first attempt read it: nothing landed, nobody acted; write."""
    proposal = approved(kube_pool, 3, alice, bob)
    waiting = services.execute(proposal.pk, _UnavailableOnce(kube.url))
    assert waiting.state == ProposalState.EXECUTING and replicas(kube) == 1
    done = services.apply_change(_resume(proposal), KubernetesDriver(kube.url))
    assert done.applied_at is not None and done.applied_from_replicas == 1, (done.state, done.last_error)
    assert replicas(kube) == 3


def test_a_landed_write_still_in_place_is_not_repeated(kube_pool: Pool, alice: User, bob: User,
                                                       kube: SandboxCluster) -> None:
    proposal = approved(kube_pool, 3, alice, bob)
    _lands_then_dies(proposal, kube)
    done = services.apply_change(_resume(proposal), KubernetesDriver(kube.url))
    assert done.applied_at is not None and done.applied_from_replicas is None  # found at 3: nothing written
    assert audits(done, "scale") == 1 and replicas(kube) == 3


def test_a_spec_changed_by_a_rollout_since_the_first_attempt_is_not_written_blind(kube_pool: Pool, alice: User,
                                                                                 bob: User,
                                                                                 kube: SandboxCluster) -> None:
    """The first attempt's write broke; meanwhile the team rolled out a new image. The generation cannot say
    whose change it was, so the retry stands down (stale) and the loop proposes again from what runs now."""
    proposal = approved(kube_pool, 3, alice, bob)
    services.execute(proposal.pk, _UnavailableOnce(kube.url))
    apps(kube).patch_namespaced_deployment("vllm-chat-8b", NS, {"spec": {"template": {"metadata": {
        "annotations": {"rollout": "v2"}}}}})
    done = services.apply_change(_resume(proposal), KubernetesDriver(kube.url))
    assert done.state == ProposalState.STALE and replicas(kube) == 1, (done.state, done.last_error)
    assert "nothing written by this attempt" in done.last_error
