"""Which ClusterDriver serves a cluster, with which credentials. The one place that knows the backends."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

from controlplane import config
from controlplane.choices import ScalingTarget
from controlplane.models import Cluster, Pool
from scaling.drivers.cluster import ClusterDriver, DriverError, Workload
from scaling.drivers.kubernetes import KubeCredentials, KubernetesDriver
from scaling.drivers.routers import HTTPRouteRouter, VirtualServiceRouter
from scaling.drivers.routing import Router

# Where Kubernetes mounts a pod's service account (Headroom's own, when it runs in the cluster).
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise DriverError(f"cannot read the {what} at {path}: {exc.strerror}", permanent=True) from None


def credentials(cluster: Cluster) -> KubeCredentials:
    """The credentials a cluster's `credentials_ref` points at (read at each use, so a rotated Secret applies)."""
    try:
        ref = config.parse_credentials_ref(cluster.credentials_ref)
    except ValueError as exc:
        raise DriverError(f"cluster {cluster.name}: credentials_ref: {exc}", permanent=True) from None
    folder = Path(settings.KUBE_CREDENTIALS_DIR)
    if ref.kind == "token":
        # A real API server's certificate is signed by the cluster's own CA: it comes as NAME.ca.crt beside the token.
        ca = folder / f"{ref.name}.ca.crt"
        return KubeCredentials(token=_read(folder / ref.name, f"token of cluster {cluster.name}"),
                               ca_file=str(ca) if ca.is_file() else None)
    if ref.kind == "kubeconfig":
        path = folder / ref.name
        _read(path, f"kubeconfig of cluster {cluster.name}")
        return KubeCredentials(kubeconfig=str(path))
    if ref.kind == config.IN_CLUSTER:
        ca = SERVICE_ACCOUNT_DIR / "ca.crt"
        return KubeCredentials(token=_read(SERVICE_ACCOUNT_DIR / "token", "service account token"),
                               ca_file=str(ca) if ca.exists() else None)
    return KubeCredentials()


# The route kinds Headroom moves traffic on (scaling.choices.RouterKind names them).
ROUTERS: dict[str, type[HTTPRouteRouter] | type[VirtualServiceRouter]] = {
    "httproute": HTTPRouteRouter,
    "virtualservice": VirtualServiceRouter,
}


def _check_enabled() -> None:
    if not settings.KUBERNETES_ENABLED:
        raise DriverError(
            "the Kubernetes integration is off (set KUBERNETES_ENABLED=true to act on clusters)", permanent=True
        )


def cluster_driver(cluster: Cluster) -> ClusterDriver:
    _check_enabled()
    return KubernetesDriver(cluster.kube_api_url, credentials=credentials(cluster),
                            timeout_s=settings.KUBERNETES_TIMEOUT_S)


def workload_of(pool: Pool) -> Workload:
    scaled_object = pool.scaled_object if pool.scaling_target == ScalingTarget.KEDA else ""
    return Workload(namespace=pool.namespace, deployment=pool.deployment, scaled_object=scaled_object,
                    hpa=pool.scaling_target == ScalingTarget.HPA)


def route_router(cluster: Cluster, kind: str) -> Router:
    """The Router for a route of `kind` in `cluster`."""
    _check_enabled()
    if kind not in ROUTERS:
        raise DriverError(f"no router for route kind {kind!r}; known: {', '.join(sorted(ROUTERS))}", permanent=True)
    return ROUTERS[kind](cluster.kube_api_url, credentials=credentials(cluster), timeout_s=settings.KUBERNETES_TIMEOUT_S)
