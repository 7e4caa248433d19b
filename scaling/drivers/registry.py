"""Which ClusterDriver serves a cluster. The one place that knows the backends."""
from __future__ import annotations

from django.conf import settings

from controlplane.choices import ScalingTarget
from controlplane.models import Cluster, Pool
from scaling.drivers.cluster import ClusterDriver, DriverError, Workload
from scaling.drivers.kubernetes import KubernetesDriver


def cluster_driver(cluster: Cluster) -> ClusterDriver:
    if not settings.KUBERNETES_ENABLED:
        raise DriverError(
            "the Kubernetes integration is off (set KUBERNETES_ENABLED=true to act on clusters)", permanent=True
        )
    return KubernetesDriver(cluster.kube_api_url, timeout_s=settings.KUBERNETES_TIMEOUT_S)


def workload_of(pool: Pool) -> Workload:
    scaled_object = pool.scaled_object if pool.scaling_target == ScalingTarget.KEDA else ""
    return Workload(namespace=pool.namespace, deployment=pool.deployment, scaled_object=scaled_object)
