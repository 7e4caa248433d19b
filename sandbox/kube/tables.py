"""Server-side printing (`meta.k8s.io/v1` Table), so `kubectl get` shows the usual columns."""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from sandbox.kube import resources as res
from sandbox.kube.resources import ResourceType
from sandbox.kube.store import Object

Column = tuple[str, str, Callable[[Object], Any]]  # name, type, cell


def wants_table(accept: str | None) -> bool:
    return bool(accept) and "as=Table" in accept  # type: ignore[operator]


def _age(obj: Object) -> str:
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = int((datetime.now(timezone.utc) - datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ")
                   .replace(tzinfo=timezone.utc)).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{max(0, seconds)}s"


def _pod_ready(pod: Object) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(statuses)}"


def _pod_status(pod: Object) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            return waiting.get("reason", "Waiting")
    return (pod.get("status") or {}).get("phase", "Unknown")


def _restarts(pod: Object) -> int:
    return sum(s.get("restartCount", 0) for s in (pod.get("status") or {}).get("containerStatuses") or [])


def _deployment_ready(deployment: Object) -> str:
    ready = (deployment.get("status") or {}).get("readyReplicas", 0)
    return f"{ready}/{deployment['spec'].get('replicas', 1)}"


def _weights(route: Object) -> str:
    refs = [ref for rule in route["spec"].get("rules") or [] for ref in rule.get("backendRefs") or []]
    return ",".join(f"{ref['name']}={ref.get('weight', 1)}" for ref in refs)


def _destinations(service: Object) -> str:
    routes = [ref for http in (service.get("spec") or {}).get("http") or [] for ref in http.get("route") or []]
    return ",".join(f"{ref['destination']['host']}={ref.get('weight', 100)}" for ref in routes)


NAME: Column = ("Name", "string", lambda o: o["metadata"]["name"])
AGE: Column = ("Age", "string", _age)
COLUMNS: dict[str, list[Column]] = {
    res.DEPLOYMENTS.key: [
        NAME,
        ("Ready", "string", _deployment_ready),
        ("Up-to-date", "integer", lambda d: (d.get("status") or {}).get("updatedReplicas", 0)),
        ("Available", "integer", lambda d: (d.get("status") or {}).get("availableReplicas", 0)),
        AGE,
    ],
    res.PODS.key: [NAME, ("Ready", "string", _pod_ready), ("Status", "string", _pod_status),
                   ("Restarts", "integer", _restarts), AGE],
    res.HTTPROUTES.key: [NAME, ("Backends", "string", _weights), AGE],
    res.VIRTUALSERVICES.key: [NAME, ("Destinations", "string", _destinations), AGE],
    res.SCALEDOBJECTS.key: [
        NAME, ("Min", "integer", lambda s: s["spec"].get("minReplicaCount", 0)),
        ("Max", "integer", lambda s: s["spec"].get("maxReplicaCount", 100)), AGE],
    res.HPAS.key: [
        NAME, ("Reference", "string", lambda h: f"{h['spec']['scaleTargetRef'].get('kind')}/"
                                                f"{h['spec']['scaleTargetRef'].get('name')}"),
        ("Minpods", "integer", lambda h: h["spec"].get("minReplicas", 1)),
        ("Maxpods", "integer", lambda h: h["spec"].get("maxReplicas")),
        ("Replicas", "integer", lambda h: (h.get("status") or {}).get("currentReplicas", 0)), AGE],
}


def table(resource: ResourceType, items: list[Object], resource_version: str) -> dict[str, Any]:
    columns = COLUMNS.get(resource.key, [NAME, AGE])
    return {
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [{"name": name, "type": kind, "format": "name" if name == "Name" else "",
                               "description": "", "priority": 0} for name, kind, _ in columns],
        "rows": [{"cells": [cell(obj) for _, _, cell in columns],
                  "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}} for obj in items],
    }
