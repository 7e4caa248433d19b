"""The sandbox's API server authorizes as a real one does, with the ClusterRole Headroom ships: the driver
is tried against the role users install, not against an API that grants everything."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from sandbox.fleet import Fleet
from sandbox.kube import rbac
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from scaling.drivers.cluster import Workload
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.sim.profiles import get_profile

NS = "inference"


def test_every_call_the_driver_makes_is_granted_by_the_shipped_role() -> None:
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=2)
    with Fleet() as fleet, SandboxCluster(fleet, route_namespace=NS) as kube:
        kube.add_pool(PoolSpec(name="chat", profile=profile, namespace=NS, replicas=1, cold_start_s=0.2, max_replicas=4))
        kube.add_pool(PoolSpec(name="batch", profile=profile, namespace=NS, replicas=1, cold_start_s=0.2,
                               max_replicas=4, keda=True))
        kube.add_pool(PoolSpec(name="served", profile=profile, namespace=NS, replicas=1, cold_start_s=0.2,
                               min_replicas=1, max_replicas=4, hpa=True))
        assert kube.api.rbac == rbac.cluster_role_grants()
        driver = KubernetesDriver(kube.url)
        plain, keda = Workload(NS, "chat"), Workload(NS, "batch", scaled_object="batch")
        assert driver.status(plain).desired == 1
        [pod] = driver.endpoints(plain)
        driver.set_routable(NS, pod, False)  # an open breaker's label: 403 before the role granted patch
        driver.set_routable(NS, pod, True)
        driver.added_pods_ready_at(plain, datetime.now(timezone.utc), 1)
        assert driver.scale(plain, 2).wrote and driver.scale(keda, 2).wrote
        assert driver.scale(Workload(NS, "served", hpa=True), 2).wrote  # reads the HPAs, patches one
        driver.close()


def test_a_verb_the_role_lacks_is_forbidden() -> None:
    grants = rbac.cluster_role_grants()
    assert rbac.refusal(grants, "apps", "deployments/scale", "patch", "chat", NS) == ""
    refused = rbac.refusal(grants, "apps", "deployments", "patch", "chat", NS)
    assert refused.startswith('deployments.apps "chat" is forbidden') and "cannot patch" in refused
    assert rbac.refusal(grants, "", "secrets", "get", "creds", NS)
