"""The emulated Kubernetes API server: real HTTP, the paths and JSON the official clients expect.

Serves discovery, Deployments (+ /scale, /status), Pods, Services, Namespaces, Gateway API
HTTPRoutes, Istio VirtualServices, KEDA ScaledObjects and HorizontalPodAutoscalers (autoscaling/v2): get, list (label and field selectors), update (PUT) and patch
(merge, JSON, and strategic merge for built-in kinds only; a CRD answers 415 to strategic merge,
as a real cluster does), and watch. Optionally a bearer token (`required_token`) and RBAC (`rbac`: the
shipped ClusterRole, which `SandboxCluster` turns on). Sandbox-only control routes live under /sandbox/.
"""
from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sandbox.httpserver import QuietHandler, QuietHTTPServer
from sandbox.kube import rbac, resources, tables
from sandbox.kube.errors import ApiError
from sandbox.kube.patch import PatchError, json_patch, merge_patch
from sandbox.kube.resources import ResourceType
from sandbox.kube.selectors import field_matcher, label_matcher, selector_string
from sandbox.kube.store import Object, ObjectStore

STREAMED = object()  # the handler already wrote the answer (a watch)
WATCH_POLL_S = 0.1
MAX_WATCH_S = 1800.0
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@dataclass
class KubeFaults:
    """Fault knobs for the API server, changeable at any time (also via PUT /sandbox/faults)."""

    latency_s: float = 0.0  # delay before every answer
    error_rate: float = 0.0  # fraction of API requests answered 500
    fail_next: int = 0  # the next N API requests are answered 500
    conflict_storm: int = 0  # the next N writes (PUT/PATCH) are answered 409
    late_write_answer_s: float = 0.0  # a write is applied at once, its answer sent this much later
    # The next N API requests are answered 429 with this Retry-After, as API Priority and Fairness throttles.
    throttle_next: int = 0
    throttle_retry_after_s: int = 1


@dataclass(frozen=True)
class Route:
    resource: ResourceType
    namespace: str | None
    name: str | None
    subresource: str


PodFaultHook = Callable[[str, str, dict[str, Any]], dict[str, Any]]


def parse_path(parts: list[str]) -> Route | None:
    """Split /api/v1/... or /apis/g/v/... into resource, namespace, name and subresource."""
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    elif len(rest) == 2 and rest[0] == "namespaces" and group == "":
        rest = ["namespaces", rest[1]]
    if not rest or len(rest) > 3:
        return None
    resource = resources.find(group, version, rest[0])
    if resource is None or (namespace is not None and not resource.namespaced):
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in resource.subresources:
        return None
    return Route(resource, namespace, name, sub)


class KubeApiServer:
    """Runs the API server on a loopback port. `url` is what a kubeconfig's `server:` takes."""

    def __init__(self, store: ObjectStore, host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = store
        self.faults = KubeFaults()
        self.stopping = False  # ends open watches
        self.pod_fault_hook: PodFaultHook | None = None
        # When set, every API request must carry "Authorization: Bearer <token>" (401 otherwise),
        # as a real API server does for a service account or a kubeconfig user.
        self.required_token: str | None = None
        # When set, every API request is authorized against these grants (sandbox/kube/rbac.py), 403 otherwise.
        self.rbac: frozenset[rbac.Grant] | None = None
        self.host = host
        self._httpd = _Server((host, port), _Handler)
        self._httpd.api = self
        self._thread: threading.Thread | None = None
        self._fault_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._httpd.server_port}"

    def start(self) -> KubeApiServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="kube-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        self._httpd.shutdown()
        self._httpd.server_close()

    def take_fault(self, method: str) -> ApiError | None:
        """Decide whether this request fails by injection (and use up a counted fault)."""
        with self._fault_lock:
            faults = self.faults
            if faults.throttle_next > 0:
                faults.throttle_next -= 1
                return ApiError(429, "Too many requests, please try again later. (injected)",
                                retry_after_s=faults.throttle_retry_after_s)
            if faults.fail_next > 0:
                faults.fail_next -= 1
                return ApiError(500, "injected fault: internal error")
            if faults.error_rate and random.random() < faults.error_rate:
                return ApiError(500, "injected fault: internal error")
            if method in ("PUT", "PATCH") and faults.conflict_storm > 0:
                faults.conflict_storm -= 1
                return ApiError(409, "Operation cannot be fulfilled: the object has been modified; please "
                                     "apply your changes to the latest version and try again (injected)")
        return None


class _Server(QuietHTTPServer):
    api: KubeApiServer


class _Handler(QuietHandler):
    server: _Server

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # --- plumbing --------------------------------------------------------------------------
    def _handle(self, method: str) -> None:
        api = self.server.api
        url = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = [part for part in url.path.split("/") if part]
        try:
            if parts[:1] == ["sandbox"]:
                self._send(200, self._sandbox(method, parts[1:], body))
                return
            as_admin = self.headers.get("Authorization") == f"Bearer {rbac.ADMIN_TOKEN}"
            if (api.required_token is not None and not as_admin
                    and self.headers.get("Authorization") != f"Bearer {api.required_token}"):
                raise ApiError(401, "Unauthorized")
            if api.faults.latency_s > 0:
                time.sleep(api.faults.latency_s)
            injected = api.take_fault(method)
            if injected is not None:
                raise injected
            answer = self._api(method, parts, query, body, as_admin)
            if method in ("PUT", "PATCH", "POST") and api.faults.late_write_answer_s > 0:
                time.sleep(api.faults.late_write_answer_s)  # the write landed; the client may give up first
            if answer is not STREAMED:
                self._send(200, answer)
        except ApiError as error:
            self._send(error.code, error.status(), retry_after_s=error.retry_after_s)

    def _send(self, status: int, payload: Any, retry_after_s: int | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if retry_after_s is not None:
            self.send_header("Retry-After", str(retry_after_s))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    @staticmethod
    def _json(body: bytes) -> Any:
        try:
            return json.loads(body or b"null")
        except json.JSONDecodeError as error:
            raise ApiError(400, f"the body of the request is not valid JSON: {error}") from None

    # --- the Kubernetes API ----------------------------------------------------------------
    def _authorize(self, method: str, route: Route, query: dict[str, str]) -> None:
        grants = self.server.api.rbac
        if grants is None:
            return
        resource = route.resource.plural + (f"/{route.subresource}" if route.subresource else "")
        verb = rbac.verb_of(method, route.name is not None, (query.get("watch") or "").lower() in ("1", "true"))
        refused = rbac.refusal(grants, route.resource.group, resource, verb, route.name or "", route.namespace)
        if refused:
            raise ApiError(403, refused, reason="Forbidden", name=route.name or "", group=route.resource.group,
                           kind=route.resource.plural)

    def _api(self, method: str, parts: list[str], query: dict[str, str], body: bytes, as_admin: bool = False) -> Any:
        discovery = self._discovery(parts) if method == "GET" else None
        if discovery is not None:
            return discovery
        route = parse_path(parts)
        if route is None:
            raise ApiError(404, "the server could not find the requested resource")
        if not as_admin:
            self._authorize(method, route, query)
        if route.name is None:
            if method != "GET":
                raise ApiError(405, f"the server does not allow this method on {route.resource.key}")
            if (query.get("watch") or "").lower() in ("1", "true"):
                self._watch(route, query)
                return STREAMED
            return self._list(route, query)
        if method == "GET":
            return self._get(route)
        if method == "PUT":
            return self._write(route, lambda current: self._json(body))
        if method == "PATCH":
            return self._write(route, self._patcher(route.resource, body))
        raise ApiError(405, f"the server does not allow this method on {route.resource.key}")

    def _discovery(self, parts: list[str]) -> Any:
        address = f"{self.server.api.host}:{self.server.server_port}"
        if parts == ["version"]:
            return resources.version_info()
        if parts == ["api"]:
            return resources.core_versions(address)
        if parts == ["api", "v1"]:
            return resources.resource_list("", "v1")
        if parts == ["apis"]:
            return resources.group_list()
        if len(parts) == 2 and parts[0] == "apis":
            return resources.group(parts[1])
        if len(parts) == 3 and parts[0] == "apis":
            return resources.resource_list(parts[1], parts[2])
        return None

    def _list(self, route: Route, query: dict[str, str]) -> Object:
        try:
            items, version = self.server.api.store.list(
                route.resource, route.namespace, query.get("labelSelector"), query.get("fieldSelector"))
        except ValueError as error:
            raise ApiError(400, str(error)) from None
        if tables.wants_table(self.headers.get("Accept")):
            return tables.table(route.resource, items, version)
        return {"kind": f"{route.resource.kind}List", "apiVersion": route.resource.api_version,
                "metadata": {"resourceVersion": version}, "items": items}

    def _watch(self, route: Route, query: dict[str, str]) -> None:
        """Stream changes as JSON lines ({"type", "object"}) until timeoutSeconds or the client leaves."""
        api, resource = self.server.api, route.resource
        try:
            labels_match = label_matcher(query.get("labelSelector"))
            fields_match = field_matcher(query.get("fieldSelector"))
        except ValueError as error:
            raise ApiError(400, str(error)) from None
        since = query.get("resourceVersion") or "0"
        initial: list[Object] = []
        if since == "0":  # no starting point: the current objects first, as ADDED
            initial, since = api.store.list(resource, route.namespace, query.get("labelSelector"),
                                            query.get("fieldSelector"))
        if not since.isdigit():
            raise ApiError(400, f"invalid resourceVersion {since!r}")
        last = int(since)
        if api.store.events_since(last, resource, route.namespace) is None:
            raise ApiError(410, f"too old resource version: {last}", reason="Expired")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + min(float(query.get("timeoutSeconds") or MAX_WATCH_S), MAX_WATCH_S)
        try:
            for obj in initial:
                self._send_event("ADDED", obj)
            while time.monotonic() < deadline and not api.stopping:
                events = api.store.events_since(last, resource, route.namespace)
                if events is None:
                    self._send_event("ERROR", ApiError(410, "too old resource version", reason="Expired").status())
                    break
                for event in events:
                    last = event.resource_version
                    if labels_match(event.object["metadata"].get("labels") or {}) and fields_match(event.object):
                        self._send_event(event.type, event.object)
                time.sleep(WATCH_POLL_S)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True  # the watcher went away

    def _send_event(self, kind: str, obj: Object) -> None:
        line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
        self.wfile.flush()

    def _get(self, route: Route) -> Object:
        obj = self.server.api.store.get(route.resource, route.namespace or "", route.name or "")
        if route.subresource == "scale":
            return to_scale(obj)
        if not route.subresource and tables.wants_table(self.headers.get("Accept")):
            return tables.table(route.resource, [obj], obj["metadata"]["resourceVersion"])
        return obj

    def _patcher(self, resource: ResourceType, body: bytes) -> Callable[[Object], Object]:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        document = self._json(body)
        if content_type == JSON_PATCH:
            return lambda current: json_patch(current, document)
        if content_type == MERGE or (content_type == STRATEGIC and not resource.custom):
            if not isinstance(document, dict):
                raise ApiError(400, "a merge patch must be a JSON object")
            return lambda current: merge_patch(current, document)
        accepted = f"{JSON_PATCH}, {MERGE}" + ("" if resource.custom else f", {STRATEGIC}")
        raise ApiError(415, f"the body of the request was in an unknown format - accepted media types "
                            f"include: {accepted}")

    def _write(self, route: Route, change: Callable[[Object], Object]) -> Object:
        store = self.server.api.store
        resource, namespace, name = route.resource, route.namespace or "", route.name or ""

        def apply(current: Object) -> Object:
            try:
                if route.subresource == "scale":
                    return from_scale(current, change(to_scale(current)))
                return change(current)
            except PatchError as error:
                raise ApiError(422, str(error), name=name, group=resource.group, kind=resource.kind) from None

        updated = store.update(resource, namespace, name, lambda current: validate(resource, apply(current)),
                               subresource="status" if route.subresource == "status" else "")
        return to_scale(updated) if route.subresource == "scale" else updated

    # --- sandbox control routes ------------------------------------------------------------
    def _sandbox(self, method: str, parts: list[str], body: bytes) -> Any:
        api = self.server.api
        if parts == ["faults"]:
            if method in ("PUT", "POST", "PATCH"):
                changes = self._json(body) or {}
                known = {field.name for field in fields(KubeFaults)}
                unknown = set(changes) - known
                if unknown:
                    raise ApiError(400, f"unknown fault knobs {sorted(unknown)}; known: {sorted(known)}")
                for key, value in changes.items():
                    setattr(api.faults, key, value)
            return asdict(api.faults)
        if len(parts) == 4 and parts[0] == "pods" and parts[3] == "faults" and api.pod_fault_hook:
            return api.pod_fault_hook(parts[1], parts[2], self._json(body) or {})
        raise ApiError(404, "unknown sandbox route")


def to_scale(deployment: Object) -> Object:
    """The autoscaling/v1 Scale view of a Deployment (shares its resourceVersion)."""
    metadata = deployment["metadata"]
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {key: metadata[key] for key in ("name", "namespace", "uid", "resourceVersion",
                                                    "creationTimestamp") if key in metadata},
        "spec": {"replicas": deployment["spec"].get("replicas", 1)},
        "status": {"replicas": (deployment.get("status") or {}).get("replicas", 0),
                   "selector": selector_string(deployment["spec"]["selector"])},
    }


def from_scale(deployment: Object, scale: Object) -> Object:
    if not isinstance(scale, dict) or not isinstance(scale.get("spec"), dict):
        name = deployment["metadata"]["name"]
        raise ApiError(422, f'Scale.autoscaling "{name}" is invalid: spec: Required value')
    deployment["spec"]["replicas"] = scale["spec"].get("replicas")
    deployment["metadata"]["resourceVersion"] = (scale.get("metadata") or {}).get("resourceVersion")
    return deployment


def validate(resource: ResourceType, obj: Object) -> Object:
    """The few validation rules whose absence would hide a client bug."""
    name = (obj.get("metadata") or {}).get("name", "")
    if resource is resources.DEPLOYMENTS:
        replicas = (obj.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(422, f'Deployment.apps "{name}" is invalid: spec.replicas: Invalid value: '
                                f"{json.dumps(replicas)}: must be greater than or equal to 0",
                           name=name, group="apps", kind="Deployment")
    if resource is resources.HTTPROUTES:
        for rule in (obj.get("spec") or {}).get("rules") or []:
            for ref in rule.get("backendRefs") or []:
                weight = ref.get("weight", 1)
                if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 1_000_000:
                    raise ApiError(422, f'HTTPRoute.gateway.networking.k8s.io "{name}" is invalid: '
                                        f"spec.rules[].backendRefs[].weight: Invalid value: {json.dumps(weight)}: "
                                        "must be between 0 and 1000000",
                                   name=name, group=resource.group, kind="HTTPRoute")
    if resource is resources.VIRTUALSERVICES:
        _validate_virtual_service(name, obj)
    if resource is resources.SCALEDOBJECTS:
        spec = obj.get("spec") or {}
        low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
        if not isinstance(low, int) or not isinstance(high, int) or low < 0 or low > high:
            raise ApiError(422, f'ScaledObject.keda.sh "{name}" is invalid: minReplicaCount must be an '
                                "integer between 0 and maxReplicaCount", name=name, group="keda.sh",
                           kind="ScaledObject")
    if resource is resources.HPAS:
        spec = obj.get("spec") or {}
        low, high = spec.get("minReplicas", 1), spec.get("maxReplicas")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (low, high)) or not 1 <= low <= high:
            raise ApiError(422, f'HorizontalPodAutoscaler.autoscaling "{name}" is invalid: spec.minReplicas: '
                                f"Invalid value: {json.dumps(low)}: must be between 1 and spec.maxReplicas "
                                f"({json.dumps(high)})", name=name, group="autoscaling",
                           kind="HorizontalPodAutoscaler")
    return obj


def _validate_virtual_service(name: str, obj: Object) -> None:
    """Istio's rule: route weights are 0-100 and, when any is set, those of one http route add up to 100."""
    for index, http in enumerate((obj.get("spec") or {}).get("http") or []):
        destinations = http.get("route") or []
        weights = [ref.get("weight") for ref in destinations if ref.get("weight") is not None]
        bad = [w for w in weights if not isinstance(w, int) or isinstance(w, bool) or not 0 <= w <= 100]
        problem = (f"spec.http[{index}].route[].weight: Invalid value: {json.dumps(bad[0])}: must be between 0 and 100"
                   if bad else "")
        if not problem and weights and (len(weights) != len(destinations) or sum(weights) != 100):
            problem = f"spec.http[{index}].route: total destination weight {sum(weights)} != 100"
        if problem:
            raise ApiError(422, f'VirtualService.networking.istio.io "{name}" is invalid: {problem}',
                           name=name, group=resources.VIRTUALSERVICES.group, kind="VirtualService")
