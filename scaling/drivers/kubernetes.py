"""ClusterDriver on the official `kubernetes` client.

Scales through the Deployment's /scale subresource with a merge patch that carries the
resourceVersion it read, so a concurrent writer makes us re-read (409) instead of being overwritten.
Where KEDA owns the Deployment, the ScaledObject's minReplicaCount is raised instead, and where a
HorizontalPodAutoscaler does, its minReplicas: writing spec.replicas of an autoscaled Deployment would be
undone at the HPA's next sync, so such a write is refused, naming the autoscaler. Every write re-checks its
premise on each read (the first and the one after each 409) and writes nothing when it no longer holds.
Authenticates with a bearer token or a kubeconfig's current context (`KubeCredentials`).
Every connection goes through the connect-time address guard with `CLUSTER_ALLOWED_NETWORKS`
(`controlplane.netguard`): a cluster's address is an admin's input, never a way into our own network.
"""
from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError, InvalidHeader
from urllib3.util import Retry

from controlplane import netguard
from scaling.drivers.cluster import (
    DriverError, PremiseChanged, ReplicaStatus, ScaleOutcome, ScalePremise, Workload, stated_max_num_seqs)

MAX_CONFLICT_RETRIES = 5
KEDA = ("keda.sh", "v1alpha1", "scaledobjects")
MERGE_PATCH = "application/merge-patch+json"


def _api_message(exc: ApiException) -> str:
    """The Status message the API server sent, else the HTTP reason."""
    try:
        return json.loads(exc.body or "{}").get("message") or exc.reason or str(exc.status)
    except (ValueError, AttributeError):
        return exc.reason or str(exc.status)


def _check(premise: ScalePremise | None, live: int) -> None:
    refusal = premise.refusal(live) if premise is not None else None
    if refusal is not None:
        raise PremiseChanged(live, refusal)


def _check_undone(premise: ScalePremise | None, generation: int | None, holds: int) -> None:
    refusal = premise.undone(generation, holds) if premise is not None else None
    if refusal is not None:
        raise PremiseChanged(holds, refusal)


def _floor_in_place(premise: ScalePremise | None, floor: int, replicas: int) -> bool:
    """Whether an autoscaler's floor needs no write: it is at the target, or someone moved it past the target the
    way the change goes (raised above a scale-up's, lowered below a scale-down's) before its autoscaler synced.
    Writing the target then would undo their change, against the direction that was approved."""
    if floor == replicas or premise is None:
        return floor == replicas
    return floor > replicas if premise.target > premise.decided_from else floor < replicas


def _ready_since(pod: client.V1Pod) -> datetime | None:
    for condition in (pod.status.conditions or []) if pod.status else []:
        if condition.type == "Ready":
            return condition.last_transition_time if condition.status == "True" else None
    return None


def added_pods_ready_at(pods: list[client.V1Pod], since: datetime, count: int) -> datetime | None:
    """When the last of the `count` pods a write at `since` added became Ready; None while one is not.

    Creation stamps have whole seconds, so a pod created within the second of the write counts as
    added unless it was already Ready before the write (no pod the write added can be), and pods
    that share a second cannot be told apart: all of them are waited for. An older one among them
    started first, so the latest Ready is still the added pods' own. Left open: an older pod still
    starting, created in the write's second while the added ones got the next, is taken as added
    (only a list of the pods at the write would tell them apart).
    """
    floor = since.replace(microsecond=0)

    def could_be_added(pod: client.V1Pod) -> bool:
        created, ready = pod.metadata.creation_timestamp, _ready_since(pod)
        return created is not None and created >= floor and (ready is None or ready >= since)

    candidates = sorted(filter(could_be_added, pods), key=lambda pod: pod.metadata.creation_timestamp)
    if count <= 0 or len(candidates) < count:
        return None
    # Later pods belong to a later write; those created in the same second as the last counted one may not.
    last_second = candidates[count - 1].metadata.creation_timestamp
    added = [pod for pod in candidates if pod.metadata.creation_timestamp <= last_second]
    ready_times = [_ready_since(pod) for pod in added]
    if any(at is None for at in ready_times):
        return None
    return max(ready_times)  # type: ignore[type-var]


# kubectl's (and the API server's) rendering of a matchExpressions requirement.
_SELECTOR_OPERATORS = {"In": "{key} in ({values})", "NotIn": "{key} notin ({values})", "Exists": "{key}",
                       "DoesNotExist": "!{key}"}


def _keda_owner(hpa: dict) -> str:
    """The ScaledObject that made this HPA ('' for one a person made): KEDA owns the HPAs it creates."""
    owners = hpa["metadata"].get("ownerReferences") or []
    return next((str(owner.get("name")) for owner in owners if owner.get("kind") == "ScaledObject"), "")


def _min_replicas(hpa: dict) -> int:
    return int(hpa["spec"].get("minReplicas") or 1)  # Kubernetes' default


def _pod_selector(deployment: client.V1Deployment) -> str:
    """The Deployment's spec.selector (matchLabels and matchExpressions) as a labelSelector query.

    An empty one would list every pod in the namespace (another pool's pods as this pool's endpoints
    and cold starts), so it is refused, as is an operator we cannot render.
    """
    where = f"{deployment.metadata.namespace}/{deployment.metadata.name}"
    selector = deployment.spec.selector if deployment.spec else None
    terms = [f"{key}={value}" for key, value in sorted(((selector and selector.match_labels) or {}).items())]
    for expression in (selector and selector.match_expressions) or []:
        form = _SELECTOR_OPERATORS.get(expression.operator)
        if form is None:
            raise DriverError(f"Deployment {where}: selector operator {expression.operator!r} is not one of "
                              f"{', '.join(_SELECTOR_OPERATORS)}", permanent=True)
        terms.append(form.format(key=expression.key, values=",".join(sorted(expression.values or []))))
    if not terms:
        raise DriverError(f"Deployment {where} has an empty pod selector: it would select every pod in "
                          f"{deployment.metadata.namespace}", permanent=True)
    return ",".join(terms)


def _command_lines(deployment: client.V1Deployment) -> list[list[str]]:
    """Each container of the pod template: its command, then its args."""
    template = deployment.spec.template if deployment.spec else None
    containers = (template.spec.containers or []) if template and template.spec else []
    return [[*(c.command or []), *(c.args or [])] for c in containers]


def _retry_after(exc: ApiException) -> float | None:
    """The seconds an API server asks a client to wait (429 from API Priority and Fairness, 503), if it says."""
    header = (exc.headers or {}).get("Retry-After")
    if header is None:
        return None
    try:
        return max(0.0, float(Retry().parse_retry_after(header)))
    except (InvalidHeader, ValueError):
        return None


def _driver_error(action: str, exc: Exception) -> DriverError:
    if isinstance(exc, netguard.OutboundRefused):
        return DriverError(f"{action}: {exc}", permanent=True)
    if isinstance(exc, ApiException):
        permanent = exc.status is not None and 400 <= exc.status < 500 and exc.status not in (408, 409, 429)
        return DriverError(f"{action}: HTTP {exc.status}: {_api_message(exc)}", permanent=permanent, status=exc.status,
                           retry_after_s=_retry_after(exc))
    if untrusted := _certificate_failure(exc):
        # Retrying cannot help: the next tick meets the same certificate with the same trust store.
        return DriverError(f"{action}: the API server's certificate is not trusted ({untrusted}): put its CA next to "
                           "the token as NAME.ca.crt, or use a kubeconfig with certificate-authority-data",
                           permanent=True)
    return DriverError(f"{action}: {exc}", permanent=False)


def _certificate_failure(exc: BaseException) -> str | None:
    """Why TLS verification refused the server, when that is what `exc` comes down to (urllib3 wraps the
    ssl error in an SSLError inside a MaxRetryError); None for any other failure."""
    seen: set[int] = set()
    pending: list[object] = [exc]
    while pending:
        current = pending.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return current.verify_message or str(current)
        pending.extend([getattr(current, "reason", None), current.__cause__, current.__context__, *current.args])
    return None


@dataclass(frozen=True)
class KubeCredentials:
    """How to authenticate: a bearer token, or a kubeconfig file's current context; neither for none."""

    token: str | None = None
    kubeconfig: str | None = None
    ca_file: str | None = None  # the API server's CA (with a token); a kubeconfig carries its own

    def __repr__(self) -> str:  # never print a token
        return f"KubeCredentials(token={'***' if self.token else None}, kubeconfig={self.kubeconfig!r})"


def api_client(api_url: str, credentials: KubeCredentials | None = None, verify_tls: bool = True) -> client.ApiClient:
    """A client for one cluster's API server: its address, with the credentials' user and TLS settings."""
    credentials = credentials or KubeCredentials()
    configuration = client.Configuration()
    if credentials.kubeconfig:
        try:
            kube_config.load_kube_config(config_file=credentials.kubeconfig, client_configuration=configuration,
                                         persist_config=False)
        except (ConfigException, OSError, ValueError) as exc:
            raise DriverError(f"kubeconfig {credentials.kubeconfig}: {exc}", permanent=True) from None
    # The cluster's own address wins: the kubeconfig lends its user and TLS settings.
    configuration.host = api_url.rstrip("/")
    configuration.verify_ssl = verify_tls
    configuration.retries = 0  # retries are ours and bounded, never hidden in urllib3
    if credentials.token:
        configuration.api_key = {"BearerToken": credentials.token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    if credentials.ca_file:
        configuration.ssl_ca_cert = credentials.ca_file
    api = client.ApiClient(configuration)
    # Every connection to the API server goes through the address guard (no proxy is ever configured).
    api.rest_client.pool_manager.pool_classes_by_scheme = netguard.checked_pool_classes(netguard.CLUSTERS)
    return api


# A circuit breaker's ejection: pods with this label are left out of the route's endpoints (the sandbox
# gateway honours it; in a cluster, the route's Service selects `headroom.io/ejected` away, docs/traffic.md).
EJECTED_LABEL = "headroom.io/ejected"


class KubernetesDriver:
    def __init__(self, api_url: str, *, credentials: KubeCredentials | None = None, timeout_s: float = 10.0,
                 verify_tls: bool = True):
        self._api_client = api_client(api_url, credentials, verify_tls)
        self._apps = client.AppsV1Api(self._api_client)
        self._custom = client.CustomObjectsApi(self._api_client)
        self._core = client.CoreV1Api(self._api_client)
        self._autoscaling = client.AutoscalingV2Api(self._api_client)
        self._timeout = timeout_s

    def close(self) -> None:
        self._api_client.close()

    def status(self, workload: Workload) -> ReplicaStatus:
        try:
            deployment = self._apps.read_namespaced_deployment(
                workload.deployment, workload.namespace, _request_timeout=self._timeout
            )
        except (ApiException, HTTPError, OSError, netguard.OutboundRefused) as exc:
            raise _driver_error(f"read deployment {workload.namespace}/{workload.deployment}", exc) from None
        return ReplicaStatus(
            desired=deployment.spec.replicas or 0,
            ready=(deployment.status.ready_replicas or 0) if deployment.status else 0,
            updated_at_resource_version=deployment.metadata.resource_version or "",
            batch_slots=stated_max_num_seqs(_command_lines(deployment)),
        )

    def endpoints(self, workload: Workload) -> dict[str, bool]:
        """The workload's pods (pod name → routable: not labelled ejected by a breaker)."""
        try:
            deployment = self._apps.read_namespaced_deployment(
                workload.deployment, workload.namespace, _request_timeout=self._timeout
            )
            pods = self._core.list_namespaced_pod(workload.namespace, label_selector=_pod_selector(deployment),
                                                  _request_timeout=self._timeout)
        except (ApiException, HTTPError, OSError) as exc:
            raise _driver_error(f"list pods of {workload.namespace}/{workload.deployment}", exc) from None
        return {pod.metadata.name: (pod.metadata.labels or {}).get(EJECTED_LABEL) != "true" for pod in pods.items}

    def set_routable(self, namespace: str, pod: str, routable: bool) -> None:
        """Label the pod ejected (or remove the label): the route's endpoints leave ejected pods out.
        A merge patch of one label: idempotent, and it touches nothing else on the pod."""
        body = {"metadata": {"labels": {EJECTED_LABEL: None if routable else "true"}}}
        try:
            self._core.patch_namespaced_pod(pod, namespace, body, _request_timeout=self._timeout)
        except (ApiException, HTTPError, OSError) as exc:
            raise _driver_error(f"label pod {namespace}/{pod}", exc) from None

    def added_pods_ready_at(self, workload: Workload, since: datetime, count: int) -> datetime | None:
        where = f"{workload.namespace}/{workload.deployment}"
        try:
            deployment = self._apps.read_namespaced_deployment(
                workload.deployment, workload.namespace, _request_timeout=self._timeout
            )
            pods = self._core.list_namespaced_pod(workload.namespace, label_selector=_pod_selector(deployment),
                                                  _request_timeout=self._timeout)
        except (ApiException, HTTPError, OSError, netguard.OutboundRefused) as exc:
            raise _driver_error(f"list pods of {where}", exc) from None
        return added_pods_ready_at(pods.items, since, count)

    def scale(self, workload: Workload, replicas: int, premise: ScalePremise | None = None) -> ScaleOutcome:
        if replicas < 0:
            raise DriverError(f"refusing to scale to {replicas} replicas", permanent=True)
        if workload.scaled_object:
            return self._scale_keda(workload, replicas, premise)
        if workload.hpa:
            return self._scale_hpa(workload, replicas, premise)
        return self._scale_deployment(workload, replicas, premise)

    def generation(self, workload: Workload) -> int | None:
        try:
            if workload.scaled_object:
                return (self._the_scaled_object(workload).get("metadata") or {}).get("generation")
            if workload.hpa:
                return self._the_autoscaler(workload)["metadata"].get("generation")
            return self._apps.read_namespaced_deployment(
                workload.deployment, workload.namespace, _request_timeout=self._timeout).metadata.generation
        except (ApiException, HTTPError, OSError, ValueError, netguard.OutboundRefused) as exc:
            raise _driver_error(f"read the generation of what scales {workload.namespace}/{workload.deployment}",
                                exc) from None

    def _retrying(self, action: str, attempt: Callable[[int], ScaleOutcome]) -> ScaleOutcome:
        """Run one read-check-write `attempt` (given the conflicts so far); on 409 someone wrote in between, so it
        runs again from a fresh read, up to MAX_CONFLICT_RETRIES times. Other failures are the driver's errors."""
        conflicts = 0
        while True:
            try:
                return attempt(conflicts)
            except ApiException as exc:
                if exc.status == 409 and conflicts < MAX_CONFLICT_RETRIES:
                    conflicts += 1
                    continue
                raise _driver_error(action, exc) from None
            except (HTTPError, OSError, ValueError, netguard.OutboundRefused) as exc:
                raise _driver_error(action, exc) from None

    def _scale_deployment(self, workload: Workload, replicas: int, premise: ScalePremise | None) -> ScaleOutcome:
        where = f"{workload.namespace}/{workload.deployment}"

        def attempt(conflicts: int) -> ScaleOutcome:
            # The Deployment itself, not its /scale view: that view has no generation. They share a resourceVersion.
            deployment = self._apps.read_namespaced_deployment(
                workload.deployment, workload.namespace, _request_timeout=self._timeout
            )
            previous = deployment.spec.replicas or 0
            _check(premise, previous)
            if previous == replicas:
                return ScaleOutcome(previous, replicas, wrote=False, conflicts=conflicts)
            _check_undone(premise, deployment.metadata.generation, previous)
            self._refuse_if_autoscaled(workload)
            body = {"metadata": {"resourceVersion": deployment.metadata.resource_version},
                    "spec": {"replicas": replicas}}
            self._apps.patch_namespaced_deployment_scale(
                workload.deployment, workload.namespace, body,
                _content_type=MERGE_PATCH, _request_timeout=self._timeout,
            )
            return ScaleOutcome(previous, replicas, wrote=True, conflicts=conflicts)

        return self._retrying(f"scale deployment {where}", attempt)

    def _autoscalers_of(self, workload: Workload) -> list[dict]:
        """The HorizontalPodAutoscalers whose scaleTargetRef is the pool's Deployment (KEDA's own included).

        Read as plain JSON: the client's typed model refuses an HPA whose controller has not yet written its
        status (`desiredReplicas` is required there), which a just-created HPA is."""
        answer = self._autoscaling.list_namespaced_horizontal_pod_autoscaler(
            workload.namespace, _request_timeout=self._timeout, _preload_content=False)
        listed = json.loads(answer.data or b"{}").get("items") or []
        return [hpa for hpa in listed
                if ((hpa.get("spec") or {}).get("scaleTargetRef") or {}).get("kind") == "Deployment"
                and hpa["spec"]["scaleTargetRef"].get("name") == workload.deployment]

    def _refuse_if_autoscaled(self, workload: Workload) -> None:
        """Refuse to write the replicas of a Deployment an autoscaler owns: the HPA would undo the count at its
        next sync (15 s), and the two would fight for as long as the pool is under pressure."""
        try:
            autoscalers = self._autoscalers_of(workload)
        except ApiException as exc:
            if exc.status in (403, 404):
                return  # a role installed before HPAs were read: write as earlier versions did
            raise
        if not autoscalers:
            return
        hpa = autoscalers[0]
        where, name = f"{workload.namespace}/{workload.deployment}", hpa["metadata"]["name"]
        keda = _keda_owner(hpa)
        if keda:
            raise DriverError(f"Deployment {where} is scaled by KEDA ScaledObject {workload.namespace}/{keda} (through "
                              f"HPA {name}), which would undo a replica count written to it: set the "
                              f"pool's scaling target to KEDA with ScaledObject {keda}", permanent=True)
        raise DriverError(f"Deployment {where} is scaled by HorizontalPodAutoscaler {workload.namespace}/{name} "
                          f"(minReplicas {_min_replicas(hpa)}, maxReplicas {hpa['spec'].get('maxReplicas')}), which "
                          "would undo a replica count written to it: set the pool's scaling target to HPA, and "
                          "Headroom raises its minReplicas instead", permanent=True)

    def _the_autoscaler(self, workload: Workload) -> dict:
        where = f"{workload.namespace}/{workload.deployment}"
        autoscalers = self._autoscalers_of(workload)
        if not autoscalers:
            raise DriverError(f"no HorizontalPodAutoscaler scales Deployment {where}: create one, or set the pool's "
                              "scaling target to the Deployment", permanent=True)
        if len(autoscalers) > 1:
            names = ", ".join(sorted(hpa["metadata"]["name"] for hpa in autoscalers))
            raise DriverError(f"{len(autoscalers)} HorizontalPodAutoscalers scale Deployment {where} ({names}); "
                              "Kubernetes acts on none of them until one is left", permanent=True)
        keda = _keda_owner(autoscalers[0])
        if keda:
            raise DriverError(f"the HorizontalPodAutoscaler of Deployment {where} is KEDA's, which resets its "
                              f"minReplicas: set the pool's scaling target to KEDA with ScaledObject {keda}",
                              permanent=True)
        return autoscalers[0]

    def _running(self, workload: Workload, premise: ScalePremise | None) -> int:
        """The replicas the Deployment runs, which its autoscaler sets, with the premise checked on them: a floor
        change counts from them (raising the floor from 1 to 5 under 3 running adds 2 pods)."""
        running = self._apps.read_namespaced_deployment_scale(
            workload.deployment, workload.namespace, _request_timeout=self._timeout).spec.replicas or 0
        _check(premise, running)
        return running

    def _scale_hpa(self, workload: Workload, replicas: int, premise: ScalePremise | None) -> ScaleOutcome:
        where = f"{workload.namespace}/{workload.deployment}"
        if replicas < 1:
            raise DriverError(f"a HorizontalPodAutoscaler keeps at least 1 replica; {replicas} asked for "
                              f"Deployment {where}", permanent=True)

        def attempt(conflicts: int) -> ScaleOutcome:
            running = self._running(workload, premise)
            hpa = self._the_autoscaler(workload)
            name, maximum = hpa["metadata"]["name"], int(hpa["spec"].get("maxReplicas") or 0)
            if _floor_in_place(premise, _min_replicas(hpa), replicas):
                return ScaleOutcome(running, replicas, wrote=False, conflicts=conflicts)
            _check_undone(premise, hpa["metadata"].get("generation"), _min_replicas(hpa))
            if replicas > maximum:
                raise DriverError(f"HorizontalPodAutoscaler {workload.namespace}/{name} allows at most {maximum} "
                                  f"replicas; {replicas} asked", permanent=True)
            body = {"metadata": {"resourceVersion": hpa["metadata"].get("resourceVersion")},
                    "spec": {"minReplicas": replicas}}
            self._autoscaling.patch_namespaced_horizontal_pod_autoscaler(
                name, workload.namespace, body,
                _content_type=MERGE_PATCH, _request_timeout=self._timeout, _preload_content=False,
            )
            return ScaleOutcome(running, replicas, wrote=True, conflicts=conflicts)

        return self._retrying(f"scale HorizontalPodAutoscaler of {where}", attempt)

    def _the_scaled_object(self, workload: Workload) -> dict:
        """The pool's ScaledObject, refused (permanently) where a floor written to it would do nothing or scale
        another team's Deployment."""
        group, version, plural = KEDA
        where = f"{workload.namespace}/{workload.scaled_object}"
        scaled = self._custom.get_namespaced_custom_object(
            group, version, workload.namespace, plural, workload.scaled_object, _request_timeout=self._timeout
        )
        # A paused ScaledObject neither follows minReplicaCount nor scales (KEDA removes its HPA).
        annotations = (scaled.get("metadata") or {}).get("annotations") or {}
        pinned = annotations.get("autoscaling.keda.sh/paused-replicas")
        paused = str(annotations.get("autoscaling.keda.sh/paused", "")).lower() == "true"
        if pinned is not None or paused:
            annotation = (f"autoscaling.keda.sh/paused-replicas={pinned}" if pinned is not None
                          else "autoscaling.keda.sh/paused=true")
            raise DriverError(f"ScaledObject {where} is paused ({annotation}): Headroom's floor would do "
                              "nothing; remove the annotation to let it scale", permanent=True)
        # A ScaledObject scales what its scaleTargetRef names (a Deployment unless it says otherwise): one
        # that names another Deployment is not this pool's, whoever made it or repointed it.
        target = (scaled.get("spec") or {}).get("scaleTargetRef") or {}
        if target.get("name") != workload.deployment or target.get("kind", "Deployment") != "Deployment":
            raise DriverError(f"ScaledObject {where} scales {target.get('kind', 'Deployment')} "
                              f"{target.get('name')!r}, not this pool's Deployment {workload.deployment!r}: "
                              "nothing written", permanent=True)
        return scaled

    def check_writable(self, workload: Workload) -> None:
        try:
            if workload.scaled_object:
                self._the_scaled_object(workload)
            elif workload.hpa:
                self._the_autoscaler(workload)
            else:
                self._refuse_if_autoscaled(workload)
        except (ApiException, HTTPError, OSError, ValueError, netguard.OutboundRefused) as exc:
            raise _driver_error(f"check what scales {workload.namespace}/{workload.deployment}", exc) from None

    def _scale_keda(self, workload: Workload, replicas: int, premise: ScalePremise | None) -> ScaleOutcome:
        group, version, plural = KEDA
        where = f"{workload.namespace}/{workload.scaled_object}"

        def attempt(conflicts: int) -> ScaleOutcome:
            running = self._running(workload, premise)
            scaled = self._the_scaled_object(workload)
            spec = scaled.get("spec", {})
            floor = int(spec.get("minReplicaCount", 0))
            if _floor_in_place(premise, floor, replicas):
                return ScaleOutcome(running, replicas, wrote=False, conflicts=conflicts)
            _check_undone(premise, scaled["metadata"].get("generation"), floor)
            maximum = spec.get("maxReplicaCount")
            if maximum is not None and replicas > int(maximum):
                raise DriverError(
                    f"ScaledObject {where} allows at most {maximum} replicas; {replicas} asked", permanent=True
                )
            body = {
                "metadata": {"resourceVersion": scaled["metadata"]["resourceVersion"]},
                "spec": {"minReplicaCount": replicas},
            }
            self._custom.patch_namespaced_custom_object(
                group, version, workload.namespace, plural, workload.scaled_object, body,
                _content_type=MERGE_PATCH, _request_timeout=self._timeout,
            )
            return ScaleOutcome(running, replicas, wrote=True, conflicts=conflicts)

        return self._retrying(f"scale ScaledObject {where}", attempt)
