"""The API server's RBAC authorizer, for the ClusterRole Headroom ships (deploy/kubernetes/rbac.yaml).

A real cluster answers 403 to a request its role does not grant; an emulator without RBAC would let the
driver use a verb the shipped role lacks and hide it until a user's first breaker opened. The sandbox
therefore authorizes every API request against that role, as the service account it binds.
"""
from __future__ import annotations

from pathlib import Path

import yaml

SHIPPED_ROLE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "rbac.yaml"
SERVICE_ACCOUNT = "system:serviceaccount:headroom:headroom"
# Requests with this bearer token act as the cluster's admin, not as Headroom: other teams' edits in
# tests and stories (`admin_client`). Anything else is Headroom's service account.
ADMIN_TOKEN = "sandbox-cluster-admin"

Grant = tuple[str, str, str]  # API group, resource (with "/subresource"), verb


def cluster_role_grants(path: Path = SHIPPED_ROLE, name: str = "headroom-controller") -> frozenset[Grant]:
    """Every (group, resource, verb) the named ClusterRole in `path` grants."""
    with path.open() as manifests:
        role = next(doc for doc in yaml.safe_load_all(manifests)
                    if doc and doc.get("kind") == "ClusterRole" and doc["metadata"]["name"] == name)
    return frozenset((group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
                     for resource in rule["resources"] for verb in rule["verbs"])


def verb_of(method: str, named: bool, watch: bool) -> str:
    """The RBAC verb of a request: get / list / watch for reads, update for PUT, patch for PATCH."""
    if method == "GET":
        return "get" if named else ("watch" if watch else "list")
    return {"PUT": "update", "PATCH": "patch", "POST": "create", "DELETE": "delete"}.get(method, method.lower())


def refusal(grants: frozenset[Grant], group: str, resource: str, verb: str, name: str, namespace: str | None) -> str:
    """The API server's Forbidden message, or '' when the role grants the request."""
    if (group, resource, verb) in grants:
        return ""
    qualified = f"{resource.split('/')[0]}.{group}" if group else resource.split("/")[0]
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return (f'{qualified} "{name}" is forbidden: User "{SERVICE_ACCOUNT}" cannot {verb} resource "{resource}" '
            f'in API group "{group}"{where}')


def admin_client(url: str):  # noqa: ANN201 (kubernetes.client.ApiClient)
    """An API client acting as the cluster's admin (someone other than Headroom) on the sandbox's API."""
    from kubernetes import client

    configuration = client.Configuration(host=url)
    configuration.api_key = {"BearerToken": ADMIN_TOKEN}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(configuration)
