"""The sandbox cluster: Kubernetes objects wired to the vLLM fleet emulator.

A small controller loop plays the roles of the Deployment/ReplicaSet controllers, the kubelet and
KEDA's HPA: it starts or stops emulated replicas to match each Deployment's `spec.replicas` (a
ScaledObject's min/max clamp it, as KEDA's HPA would, and so do those of any HorizontalPodAutoscaler whose
scaleTargetRef is the Deployment), publishes one Pod per replica (Ready only
once the replica listens), restarts replicas that died, and keeps Deployment status current.
KEDA's pause annotations hold: `paused-replicas: N` pins the Deployment at N, `paused: "true"` stops the clamping.
One route (`route_name`) lists every pool's Service; the gateway reads its weights. The route is a
Gateway API HTTPRoute by default, or an Istio VirtualService (`route_kind="virtualservice"`).
"""
from __future__ import annotations

import hashlib
import json
import secrets
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from scaling.sim.profiles import SCHEDULING_POLICIES, PoolProfile

from sandbox.fleet import Fleet
from sandbox.kube import resources as res
from sandbox.kube.errors import ApiError
from sandbox.kube import rbac
from sandbox.kube.server import KubeApiServer
from sandbox.kube.store import Object, ObjectStore, now_rfc3339
from sandbox.replica import EmulatedReplica, ReplicaState

RECONCILE_INTERVAL_S = 0.1  # wall seconds
BASE_URL_ANNOTATION = "sandbox.headroom.dev/base-url"
GATEWAY_NAME = "sandbox-gateway"
KEDA_PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
KEDA_PAUSED = "autoscaling.keda.sh/paused"


@dataclass(frozen=True)
class PoolSpec:
    name: str  # the Deployment's (and Service's) name
    profile: PoolProfile
    namespace: str = "sandbox"
    model: str | None = None  # served model name; the profile's by default
    replicas: int = 1
    cold_start_s: float | None = None  # model seconds; the profile's p50 by default
    weight: int = 1  # initial HTTPRoute weight
    keda: bool = False  # create a ScaledObject that owns the Deployment's replica range
    hpa: bool = False  # create a HorizontalPodAutoscaler that owns it (min_replicas at least 1)
    min_replicas: int = 0
    max_replicas: int = 20
    scheduling_policy: str = "fcfs"  # vLLM's --scheduling-policy, in the Deployment's container args

    @property
    def served_model(self) -> str:
        return self.model or self.profile.model

    @property
    def labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": self.name}


@dataclass
class _PodRecord:
    replica: EmulatedReplica
    pod_name: str
    died_at: float | None = None  # model time the replica was found dead
    created: str = field(default_factory=now_rfc3339)
    ready_since: str | None = None  # when the Ready condition last became True (wall clock)


class SandboxCluster:
    def __init__(self, fleet: Fleet, store: ObjectStore | None = None, route_name: str = "sandbox-route",
                 route_namespace: str = "sandbox", restart_delay_s: float = 5.0, route_kind: str = "httproute") -> None:
        if route_kind not in ROUTE_KINDS:
            raise ValueError(f"route_kind must be one of {sorted(ROUTE_KINDS)}, got {route_kind!r}")
        self.route = ROUTE_KINDS[route_kind]
        self.fleet = fleet
        self.store = store or ObjectStore()
        self.route_name = route_name
        self.route_namespace = route_namespace
        self.restart_delay_s = restart_delay_s  # model seconds a dead container waits to restart
        self.api = KubeApiServer(self.store)
        self.api.rbac = rbac.cluster_role_grants()  # Headroom may do here only what the shipped role grants
        self.api.pod_fault_hook = self._pod_faults
        self.pools: dict[tuple[str, str], PoolSpec] = {}
        self._pods: dict[tuple[str, str], list[_PodRecord]] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for namespace in ("default", route_namespace):
            self._ensure_namespace(namespace)
        self.store.create(self.route.resource, self.route.build(route_name, route_namespace))

    @property
    def url(self) -> str:
        return self.api.url

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> SandboxCluster:
        self.api.start()
        self._thread = threading.Thread(target=self._loop, name="sandbox-controller", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.api.stop()

    def __enter__(self) -> SandboxCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- pools -----------------------------------------------------------------------------
    def add_pool(self, spec: PoolSpec) -> None:
        """Create the pool's Deployment, Service, route backend and (optionally) ScaledObject or HPA."""
        with self._lock:
            self._ensure_namespace(spec.namespace)
            self.pools[(spec.namespace, spec.name)] = spec
            self._pods[(spec.namespace, spec.name)] = []
            self.store.create(res.DEPLOYMENTS, _deployment_object(spec))
            self.store.create(res.SERVICES, _service_object(spec))
            if spec.keda:
                self.store.create(res.SCALEDOBJECTS, _scaled_object(spec))
            if spec.hpa:
                self.store.create(res.HPAS, _hpa_object(spec))
            self.store.update(self.route.resource, self.route_namespace, self.route_name,
                              lambda route: self.route.add_backend(route, spec, self.route_namespace))
        self.reconcile()

    def replicas(self, namespace: str, name: str) -> list[EmulatedReplica]:
        with self._lock:
            return [record.replica for record in self._pods.get((namespace, name), [])]

    def ready_replicas(self, namespace: str, name: str) -> list[EmulatedReplica]:
        return [replica for replica in self.replicas(namespace, name) if replica.ready]

    def route_weights(self) -> list[tuple[PoolSpec, int]]:
        """(pool, weight) for every backend of the sandbox route, as stored right now."""
        route = self.store.find(self.route.resource, self.route_namespace, self.route_name)
        if route is None:
            return []
        weighted = []
        for namespace, name, weight in self.route.backends(route, self.route_namespace):
            pool = self.pools.get((namespace, name))
            if pool is not None:
                weighted.append((pool, weight))
        return weighted

    # --- the controller --------------------------------------------------------------------
    def _loop(self) -> None:
        last_error = ""
        while not self._stop.wait(RECONCILE_INTERVAL_S):
            try:
                self.reconcile()
                last_error = ""
            except Exception as error:  # keep the controller alive; say what went wrong, once
                if repr(error) != last_error:
                    print(f"sandbox controller: reconcile failed: {error!r}", file=sys.stderr, flush=True)
                last_error = repr(error)

    def reconcile(self) -> None:
        with self._lock:
            for key, spec in self.pools.items():
                self._reconcile_pool(key, spec)

    def _reconcile_pool(self, key: tuple[str, str], spec: PoolSpec) -> None:
        namespace, name = key
        deployment = self.store.find(res.DEPLOYMENTS, namespace, name)
        if deployment is None:
            return
        desired = self._apply_hpas(spec, self._apply_keda(spec, deployment))
        records = self._pods[key]
        self._restart_dead(records)
        while len(records) < desired:
            records.append(self._start_pod(spec, deployment))
        while len(records) > desired:
            # Like the ReplicaSet controller: remove not-ready pods first, then the newest.
            victim = max(records, key=lambda r: (not r.replica.ready, r.created))
            records.remove(victim)
            self.fleet.remove_replica(victim.replica)
            self.store.delete(res.PODS, namespace, victim.pod_name)
        for record in records:
            if record.replica.ready and record.ready_since is None:
                # Sub-second, unlike a kubelet: cold starts of a second in tests must measure right.
                record.ready_since = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            elif not record.replica.ready:
                record.ready_since = None
            self.store.put(res.PODS, _pod_object(spec, deployment, record))
        self.store.set_status(res.DEPLOYMENTS, namespace, name, _deployment_status(deployment, records))

    def _apply_keda(self, spec: PoolSpec, deployment: Object) -> int:
        desired = int(deployment["spec"].get("replicas", 1))
        scaled = self.store.find(res.SCALEDOBJECTS, spec.namespace, spec.name)
        if scaled is None:
            return desired
        annotations = scaled["metadata"].get("annotations") or {}
        pinned = annotations.get(KEDA_PAUSED_REPLICAS)
        if pinned is not None and str(pinned).isdigit():  # KEDA scales the target to N, then stops
            clamped = int(pinned)
        elif str(annotations.get(KEDA_PAUSED, "")).lower() == "true":  # the HPA is gone: nothing clamps
            return desired
        else:
            low = int(scaled["spec"].get("minReplicaCount", 0))
            high = int(scaled["spec"].get("maxReplicaCount", 100))
            clamped = min(max(desired, low), high)
        if clamped != desired:
            self._set_replicas(spec, clamped)
        return clamped

    def _set_replicas(self, spec: PoolSpec, replicas: int) -> None:
        """An autoscaler's write of the Deployment's replicas (KEDA's HPA, or an HPA)."""
        def set_replicas(obj: Object) -> Object:
            obj["spec"]["replicas"] = replicas
            return obj

        self.store.update(res.DEPLOYMENTS, spec.namespace, spec.name, set_replicas)

    def _apply_hpas(self, spec: PoolSpec, desired: int) -> int:
        """Every HorizontalPodAutoscaler whose scaleTargetRef is the Deployment holds its replicas within
        [minReplicas, maxReplicas] (it reads no metrics here), as its controller does at each sync: a count
        written to the Deployment outside that range is undone, whoever wrote it."""
        clamped = desired
        for hpa in self.store.list(res.HPAS, spec.namespace)[0]:
            target = hpa["spec"].get("scaleTargetRef") or {}
            if (target.get("kind"), target.get("name")) != ("Deployment", spec.name):
                continue
            low, high = int(hpa["spec"].get("minReplicas", 1)), int(hpa["spec"]["maxReplicas"])
            clamped = min(max(clamped, low), high)
            self.store.set_status(res.HPAS, spec.namespace, hpa["metadata"]["name"],
                                  {"currentReplicas": desired, "desiredReplicas": clamped})
        if clamped != desired:
            self._set_replicas(spec, clamped)
        return clamped

    def _restart_dead(self, records: list[_PodRecord]) -> None:
        now = self.fleet.clock.now()
        for record in records:
            if record.replica.state is not ReplicaState.DEAD:
                record.died_at = None
                continue
            if record.died_at is None:
                record.died_at = now
            elif now - record.died_at >= self.restart_delay_s:
                record.died_at = None
                port = record.replica.port
                record.replica.restart()
                if record.replica.port != port:
                    self.fleet.replica_moved()

    def _start_pod(self, spec: PoolSpec, deployment: Object) -> _PodRecord:
        template_hash = _template_hash(deployment)
        pod_name = f"{spec.name}-{template_hash}-{secrets.token_hex(3)[:5]}"
        cold_start = spec.profile.cold_start_p50_s if spec.cold_start_s is None else spec.cold_start_s
        replica = self.fleet.add_replica(spec.served_model, profile=spec.profile, cold_start_s=cold_start,
                                         pool=f"{spec.namespace}/{spec.name}", name=pod_name,
                                         scheduling_policy=_scheduling_policy(deployment))
        return _PodRecord(replica, pod_name)

    def _ensure_namespace(self, namespace: str) -> None:
        if self.store.find(res.NAMESPACES, "", namespace) is None:
            self.store.create(res.NAMESPACES, {"metadata": {"name": namespace}, "spec": {"finalizers": ["kubernetes"]},
                                               "status": {"phase": "Active"}})

    def _pod_faults(self, namespace: str, pod_name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """PUT /sandbox/pods/{ns}/{pod}/faults: kill, hang, slow down or break one replica."""
        with self._lock:
            record = next((r for (ns, _), records in self._pods.items() if ns == namespace
                           for r in records if r.pod_name == pod_name), None)
        if record is None:
            raise ApiError(404, f'pods "{pod_name}" not found')
        replica = record.replica
        if changes.get("kill"):
            replica.kill()
        if "hung" in changes:
            replica.set_hung(bool(changes["hung"]))
        for knob in ("extra_latency_s", "error_rate", "max_num_queued_reqs"):
            if knob in changes:
                setattr(replica.faults, knob, changes[knob])
        if "slowdown" in changes:
            replica.engine.slowdown = float(changes["slowdown"])
        return {"pod": pod_name, "state": replica.state.value, "hung": replica.faults.hung,
                "extra_latency_s": replica.faults.extra_latency_s, "error_rate": replica.faults.error_rate,
                "slowdown": replica.engine.slowdown}


# --- object builders -----------------------------------------------------------------------
def _scheduling_policy(deployment: Object) -> str:
    """The `--scheduling-policy` of the Deployment's vLLM container, as vLLM parses its arguments
    (`--scheduling-policy priority` or `--scheduling-policy=priority`); fcfs when absent or unknown."""
    containers = deployment["spec"]["template"]["spec"].get("containers") or [{}]
    args = [str(a) for a in containers[0].get("args") or []]
    for i, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name == "--scheduling-policy":
            value = value or (args[i + 1] if i + 1 < len(args) else "")
            return value if value in SCHEDULING_POLICIES else "fcfs"
    return "fcfs"


def _template_hash(deployment: Object) -> str:
    template = json.dumps(deployment["spec"]["template"], sort_keys=True).encode()
    return hashlib.sha256(template).hexdigest()[:10]


def _deployment_object(spec: PoolSpec) -> Object:
    return {
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": dict(spec.labels),
                     "annotations": {"headroom.dev/model": spec.served_model,
                                     "headroom.dev/gpu-type": spec.profile.gpu_type}},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": dict(spec.labels)},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": dict(spec.labels)},
                "spec": {"containers": [{
                    "name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
                    "args": ["--model", spec.served_model, "--max-num-seqs", str(spec.profile.max_num_seqs),
                             *(["--scheduling-policy", spec.scheduling_policy]
                               if spec.scheduling_policy != "fcfs" else [])],
                    "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"}],
                    "resources": {"limits": {"nvidia.com/gpu": str(spec.profile.gpus_per_replica)}},
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                }]},
            },
        },
        "status": {"observedGeneration": 0, "replicas": 0},
    }


def _service_object(spec: PoolSpec) -> Object:
    return {"metadata": {"name": spec.name, "namespace": spec.namespace, "labels": dict(spec.labels)},
            "spec": {"selector": dict(spec.labels), "type": "ClusterIP",
                     "ports": [{"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]}}


def _scaled_object(spec: PoolSpec) -> Object:
    return {"metadata": {"name": spec.name, "namespace": spec.namespace},
            "spec": {"scaleTargetRef": {"name": spec.name}, "minReplicaCount": spec.min_replicas,
                     "maxReplicaCount": spec.max_replicas, "pollingInterval": 15, "cooldownPeriod": 300,
                     "triggers": [{"type": "prometheus", "metadata": {
                         "query": f'sum(vllm:num_requests_waiting{{model_name="{spec.served_model}"}})',
                         "threshold": "5"}}]},
            "status": {}}


def _hpa_object(spec: PoolSpec) -> Object:
    return {"metadata": {"name": spec.name, "namespace": spec.namespace},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name},
                     "minReplicas": max(1, spec.min_replicas), "maxReplicas": spec.max_replicas,
                     "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]},
            "status": {}}


def _route_object(name: str, namespace: str) -> Object:
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"parentRefs": [{"name": GATEWAY_NAME}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                                "backendRefs": []}]},
            "status": {"parents": []}}


@dataclass(frozen=True)
class RouteKind:
    """Where one kind of route keeps its backends and weights."""

    resource: res.ResourceType
    build: Callable[[str, str], Object]
    add_backend: Callable[[Object, PoolSpec, str], Object]
    backends: Callable[[Object, str], list[tuple[str, str, int]]]  # (namespace, Service, weight)


def _http_route_backend(route: Object, spec: PoolSpec, route_namespace: str) -> Object:
    backend = {"group": "", "kind": "Service", "name": spec.name, "port": 8000, "weight": spec.weight}
    if spec.namespace != route_namespace:
        backend["namespace"] = spec.namespace
    route["spec"]["rules"][0]["backendRefs"].append(backend)
    return route


def _http_route_backends(route: Object, route_namespace: str) -> list[tuple[str, str, int]]:
    return [(ref.get("namespace", route_namespace), ref.get("name"), int(ref.get("weight", 1)))
            for rule in route["spec"].get("rules") or [] for ref in rule.get("backendRefs") or []]


def _virtual_service_object(name: str, namespace: str) -> Object:
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"hosts": [name], "gateways": [GATEWAY_NAME],
                     "http": [{"match": [{"uri": {"prefix": "/v1"}}], "route": []}]},
            "status": {}}


def _virtual_service_backend(service: Object, spec: PoolSpec, route_namespace: str) -> Object:
    host = spec.name if spec.namespace == route_namespace else f"{spec.name}.{spec.namespace}.svc.cluster.local"
    service["spec"]["http"][0]["route"].append({"destination": {"host": host, "port": {"number": 8000}},
                                               "weight": spec.weight})
    return service


def _virtual_service_backends(service: Object, route_namespace: str) -> list[tuple[str, str, int]]:
    found = []
    for http in service["spec"].get("http") or []:
        destinations = http.get("route") or []
        for ref in destinations:
            host = str(ref["destination"]["host"]).split(".")
            namespace = host[1] if len(host) > 1 else route_namespace
            found.append((namespace, host[0], int(ref.get("weight", 100 if len(destinations) == 1 else 0))))
    return found


ROUTE_KINDS = {
    "httproute": RouteKind(res.HTTPROUTES, _route_object, _http_route_backend, _http_route_backends),
    "virtualservice": RouteKind(res.VIRTUALSERVICES, _virtual_service_object, _virtual_service_backend,
                                _virtual_service_backends),
}


def _pod_object(spec: PoolSpec, deployment: Object, record: _PodRecord) -> Object:
    replica = record.replica
    template_hash = _template_hash(deployment)
    ready = replica.ready
    running = replica.state in (ReplicaState.LOADING, ReplicaState.READY)
    flag = "True" if ready else "False"
    ready_changed = record.ready_since or record.created  # as the kubelet reports a condition flip
    conditions = [{"type": kind, "status": status, "lastTransitionTime": changed}
                  for kind, status, changed in (("PodScheduled", "True", record.created),
                                                ("Initialized", "True", record.created),
                                                ("ContainersReady", flag, ready_changed), ("Ready", flag, ready_changed))]
    state = ({"running": {"startedAt": record.created}} if running
             else {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}})
    return {
        "metadata": {
            "name": record.pod_name, "namespace": spec.namespace,
            "labels": {**spec.labels, "pod-template-hash": template_hash},
            "annotations": {BASE_URL_ANNOTATION: replica.base_url},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
                                 "name": f"{spec.name}-{template_hash}", "uid": deployment["metadata"]["uid"]}],
        },
        "spec": {"nodeName": "sandbox-node", "containers": [{
            "name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
            "ports": [{"containerPort": replica.port, "name": "http", "protocol": "TCP"}]}]},
        "status": {
            "phase": "Running", "podIP": replica.host, "hostIP": replica.host, "startTime": record.created,
            "conditions": conditions,
            "containerStatuses": [{"name": "vllm", "ready": ready, "started": running,
                                   "restartCount": replica.restarts, "image": "vllm/vllm-openai:v0.32.0",
                                   "imageID": "", "containerID": f"sandbox://{record.pod_name}", "state": state}],
        },
    }


def _deployment_status(deployment: Object, records: list[_PodRecord]) -> dict[str, Any]:
    total = len(records)
    ready = sum(1 for record in records if record.replica.ready)
    status: dict[str, Any] = {
        "observedGeneration": deployment["metadata"].get("generation", 1),
        "replicas": total, "updatedReplicas": total, "readyReplicas": ready, "availableReplicas": ready,
        "conditions": [{"type": "Available", "status": "True" if ready >= total else "False",
                        "reason": "MinimumReplicasAvailable" if ready >= total else "MinimumReplicasUnavailable"}],
    }
    if total > ready:
        status["unavailableReplicas"] = total - ready
    if ready == 0:
        status.pop("readyReplicas")
        status.pop("availableReplicas")
    return status
