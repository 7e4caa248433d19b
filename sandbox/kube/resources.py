"""The resource types the emulated API server serves, and its discovery documents."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VERBS = ["get", "list", "patch", "update"]


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: tuple[str, ...] = ()
    custom: bool = False  # a CRD: no strategic merge patch
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", subresources=("scale", "status"),
                           short_names=("deploy",))
PODS = ResourceType("", "v1", "pods", "Pod", subresources=("status",), short_names=("po",))
SERVICES = ResourceType("", "v1", "services", "Service", short_names=("svc",))
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, short_names=("ns",))
HTTPROUTES = ResourceType("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute",
                          subresources=("status",), custom=True)
VIRTUALSERVICES = ResourceType("networking.istio.io", "v1", "virtualservices", "VirtualService",
                               subresources=("status",), custom=True, short_names=("vs",))
SCALEDOBJECTS = ResourceType("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject",
                             subresources=("status",), custom=True, short_names=("so",))

HPAS = ResourceType("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler",
                    subresources=("status",), short_names=("hpa",))

RESOURCES = (DEPLOYMENTS, PODS, SERVICES, NAMESPACES, HTTPROUTES, VIRTUALSERVICES, SCALEDOBJECTS, HPAS)
GROUPS = {"apps": "v1", "autoscaling": "v2", "gateway.networking.k8s.io": "v1", "networking.istio.io": "v1",
          "keda.sh": "v1alpha1"}


def find(group: str, version: str, plural: str) -> ResourceType | None:
    for resource in RESOURCES:
        if (resource.group, resource.version, resource.plural) == (group, version, plural):
            return resource
    return None


def version_info() -> dict[str, Any]:
    return {"major": "1", "minor": "32", "gitVersion": "v1.32.0-headroom-sandbox",
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
            "platform": "linux/amd64"}


def core_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group_document(group: str, version: str) -> dict[str, Any]:
    group_version = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [group_version], "preferredVersion": group_version}


def group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group_document(group, version) for group, version in GROUPS.items()]}


def group(name: str) -> dict[str, Any] | None:
    if name not in GROUPS:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_document(name, GROUPS[name])}


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    entries: list[dict[str, Any]] = []
    for resource in RESOURCES:
        if (resource.group, resource.version) != (group, version):
            continue
        entries.append({"name": resource.plural, "singularName": resource.kind.lower(),
                        "namespaced": resource.namespaced, "kind": resource.kind, "verbs": VERBS,
                        "shortNames": list(resource.short_names)})
        for sub in resource.subresources:
            sub_group, sub_version, sub_kind = (("autoscaling", "v1", "Scale") if sub == "scale"
                                                else (resource.group, resource.version, resource.kind))
            entry = {"name": f"{resource.plural}/{sub}", "singularName": "", "namespaced": resource.namespaced,
                     "kind": sub_kind, "verbs": ["get", "patch", "update"]}
            if sub == "scale":
                entry.update(group=sub_group, version=sub_version)
            entries.append(entry)
    if not entries:
        return None
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}
