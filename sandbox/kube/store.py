"""The emulated API server's object store: one resourceVersion counter, optimistic concurrency.

Every write bumps the global resourceVersion and stamps it on the object; a write that names an
older resourceVersion than the stored one is refused with 409 Conflict, as etcd-backed storage does.
"""
from __future__ import annotations

import copy
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sandbox.kube.errors import conflict, invalid, not_found
from sandbox.kube.resources import ResourceType
from sandbox.kube.selectors import field_matcher, label_matcher

Object = dict[str, Any]
Key = tuple[str, str, str]  # (resource key, namespace, name)
EVENT_HISTORY = 5000  # changes kept for watchers; an older resourceVersion gets 410 Gone


@dataclass(frozen=True)
class WatchEvent:
    resource_version: int
    key: Key
    type: str  # ADDED, MODIFIED, DELETED
    object: Object


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectStore:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[Key, Object] = {}
        self._version = 1000
        self._events: deque[WatchEvent] = deque(maxlen=EVENT_HISTORY)

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._version)

    def _commit(self, key: Key, obj: Object, event: str) -> None:
        """Stamp a new resourceVersion, store the object and remember the change for watchers."""
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        self._objects[key] = obj
        self._events.append(WatchEvent(self._version, key, event, copy.deepcopy(obj)))

    def events_since(self, resource_version: int, resource: ResourceType,
                     namespace: str | None) -> list[WatchEvent] | None:
        """Changes after `resource_version`, or None when they are older than the kept history (410)."""
        with self._lock:
            if self._events and resource_version < self._events[0].resource_version - 1:
                return None
            return [event for event in self._events if event.resource_version > resource_version
                    and event.key[0] == resource.key and (namespace is None or event.key[1] == namespace)]

    # --- reads -----------------------------------------------------------------------------
    def get(self, resource: ResourceType, namespace: str, name: str) -> Object:
        with self._lock:
            stored = self._objects.get((resource.key, namespace, name))
            if stored is None:
                raise not_found(resource.plural, resource.group, name)
            return copy.deepcopy(stored)

    def find(self, resource: ResourceType, namespace: str, name: str) -> Object | None:
        with self._lock:
            stored = self._objects.get((resource.key, namespace, name))
            return copy.deepcopy(stored) if stored is not None else None

    def list(self, resource: ResourceType, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[Object], str]:
        labels_match = label_matcher(label_selector)
        fields_match = field_matcher(field_selector)
        with self._lock:
            items = [
                copy.deepcopy(obj) for (key, ns, _), obj in sorted(self._objects.items())
                if key == resource.key and (namespace is None or ns == namespace)
                and labels_match(obj["metadata"].get("labels") or {}) and fields_match(obj)
            ]
            return items, str(self._version)

    # --- writes ----------------------------------------------------------------------------
    def create(self, resource: ResourceType, obj: Object) -> Object:
        obj = copy.deepcopy(obj)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        metadata = obj.setdefault("metadata", {})
        namespace = metadata.get("namespace", "") if resource.namespaced else ""
        key = (resource.key, namespace, metadata["name"])
        with self._lock:
            if key in self._objects:
                raise invalid(resource.kind, resource.group, metadata["name"], "already exists")
            metadata.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
            self._commit(key, obj, "ADDED")
            return copy.deepcopy(obj)

    def update(self, resource: ResourceType, namespace: str, name: str, change: Callable[[Object], Object],
               *, subresource: str = "") -> Object:
        """Apply `change` to a copy of the stored object, atomically.

        The changed object's metadata.resourceVersion, if set, is a precondition. Writes to the main
        resource keep the stored status; writes to /status keep the stored spec (as the API server does).
        """
        with self._lock:
            key = (resource.key, namespace, name)
            stored = self._objects.get(key)
            if stored is None:
                raise not_found(resource.plural, resource.group, name)
            changed = change(copy.deepcopy(stored))
            if not isinstance(changed, dict) or not isinstance(changed.get("metadata"), dict):
                raise invalid(resource.kind, resource.group, name, "metadata: Required value")
            expected = changed["metadata"].get("resourceVersion")
            if expected not in (None, "") and expected != stored["metadata"]["resourceVersion"]:
                raise conflict(resource.plural, resource.group, name)
            if changed["metadata"].get("name", name) != name:
                raise invalid(resource.kind, resource.group, name, "metadata.name: field is immutable")
            if subresource == "status":
                changed = {**copy.deepcopy(stored), "status": changed.get("status")}
            elif "status" in stored or "status" in changed:
                changed["status"] = copy.deepcopy(stored.get("status"))
                if changed["status"] is None:
                    changed.pop("status")
            for immutable in ("uid", "creationTimestamp", "namespace", "generation"):
                if immutable in stored["metadata"]:
                    changed["metadata"][immutable] = stored["metadata"][immutable]
            changed["metadata"]["name"] = name
            changed["apiVersion"], changed["kind"] = resource.api_version, resource.kind
            if changed.get("spec") != stored.get("spec"):
                changed["metadata"]["generation"] = stored["metadata"].get("generation", 1) + 1
            changed["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
            if changed == stored:
                return copy.deepcopy(stored)  # a no-op write does not bump the resourceVersion
            self._commit(key, changed, "MODIFIED")
            return copy.deepcopy(changed)

    def set_status(self, resource: ResourceType, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Controller-side status write; bumps the resourceVersion only when something changed."""
        key = (resource.key, namespace, name)
        with self._lock:
            stored = self._objects.get(key)
            if stored is None or stored.get("status") == status:
                return
            stored["status"] = copy.deepcopy(status)
            self._commit(key, stored, "MODIFIED")

    def put(self, resource: ResourceType, obj: Object) -> None:
        """Controller-side create-or-replace (pods), bumping only on change."""
        metadata = obj["metadata"]
        key = (resource.key, metadata.get("namespace", ""), metadata["name"])
        with self._lock:
            stored = self._objects.get(key)
            if stored is None:
                self.create(resource, obj)
                return
            candidate = copy.deepcopy(obj)
            candidate["metadata"] = {**stored["metadata"], **candidate["metadata"],
                                     "resourceVersion": stored["metadata"]["resourceVersion"]}
            # A pod's labels are its clients' after creation (a breaker's ejection label): keep theirs.
            candidate["metadata"]["labels"] = {**(stored["metadata"].get("labels") or {}),
                                               **(obj["metadata"].get("labels") or {})}
            candidate["apiVersion"], candidate["kind"] = resource.api_version, resource.kind
            if candidate != stored:
                self._commit(key, candidate, "MODIFIED")

    def delete(self, resource: ResourceType, namespace: str, name: str) -> None:
        key = (resource.key, namespace, name)
        with self._lock:
            gone = self._objects.pop(key, None)
            if gone is not None:
                self._version += 1
                self._events.append(WatchEvent(self._version, key, "DELETED", gone))
