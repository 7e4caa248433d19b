"""Routers on the official `kubernetes` client: Gateway API HTTPRoute and Istio VirtualService.

Both are custom objects, changed with a merge patch that carries the resourceVersion read (a
concurrent writer makes us re-read on 409, never overwrites it). A merge patch replaces lists
whole, so the patch carries the route's full rule list with only the weights changed. The weights
of one rule are the route's weights: the first rule that names every backend of the change.
Before each write the route's full weights are validated (`scaling.engine.shifting`); after it,
the route is read back and must hold what was written.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from scaling.drivers.cluster import DriverError
from scaling.drivers.kubernetes import MAX_CONFLICT_RETRIES, MERGE_PATCH, KubeCredentials, _driver_error, api_client
from scaling.drivers.routing import RouteRef, RoutePremiseChanged, RouteWeights, WeightOutcome, WeightPremise
from scaling.engine.shifting import WeightError, WeightScheme, validate_weights

Obj = dict[str, Any]


class _CustomObjectRouter:
    """One custom-object route kind: where its rules and weights sit is told by the subclass."""

    group = version = plural = kind = ""
    scheme = WeightScheme(max_weight=0)
    rules_key = ""  # spec.<rules_key>: the list of rules
    refs_key = ""  # rule.<refs_key>: the weighted backends of one rule

    def __init__(self, api_url: str, *, credentials: KubeCredentials | None = None, timeout_s: float = 10.0) -> None:
        self._api_client = api_client(api_url, credentials)
        self._custom = client.CustomObjectsApi(self._api_client)
        self._timeout = timeout_s

    def close(self) -> None:
        self._api_client.close()

    # --- what differs by kind -----------------------------------------------------------------
    def backend_of(self, ref: Obj) -> str:
        raise NotImplementedError

    def default_weight(self, refs: list[Obj]) -> int:
        raise NotImplementedError

    # --- shared ---------------------------------------------------------------------------------
    def _rules(self, obj: Obj) -> list[Obj]:
        return list((obj.get("spec") or {}).get(self.rules_key) or [])

    def _rule_index(self, obj: Obj, backends: set[str] | None) -> int:
        """The rule whose weights are the route's: the first naming all of `backends` (any backend, for None).

        A rule of its own for one class (the primary alone, matched on a header) may come first: it is
        skipped. Where no rule names them all, the first naming one of them, so the caller can say which
        backend the route lacks (and set_weights refuses)."""
        named = [{self.backend_of(ref) for ref in rule.get(self.refs_key) or []} for rule in self._rules(obj)]
        wanted = backends or set()
        for index, names in enumerate(named):
            if names and wanted <= names:
                return index
        for index, names in enumerate(named):
            if names & wanted:
                return index
        raise DriverError(f"{self.kind} {obj['metadata'].get('namespace')}/{obj['metadata'].get('name')} has no rule "
                          f"with {'backends' if backends is None else ', '.join(sorted(backends))}", permanent=True)

    def _weights(self, rule: Obj) -> dict[str, int]:
        refs = rule.get(self.refs_key) or []
        default = self.default_weight(refs)
        return {self.backend_of(ref): int(ref.get("weight", default)) for ref in refs}

    def _get(self, route: RouteRef) -> Obj:
        return self._custom.get_namespaced_custom_object(self.group, self.version, route.namespace, self.plural,
                                                         route.name, _request_timeout=self._timeout)

    def _where(self, route: RouteRef) -> str:
        return f"{self.kind} {route.namespace}/{route.name}"

    def read(self, route: RouteRef, backends: set[str] | None = None) -> RouteWeights:
        try:
            obj = self._get(route)
        except (ApiException, HTTPError, OSError) as exc:
            raise _driver_error(f"read {self._where(route)}", exc) from None
        rule = self._rules(obj)[self._rule_index(obj, backends)]
        return RouteWeights(self._weights(rule), obj["metadata"].get("resourceVersion", ""),
                            obj["metadata"].get("generation"))

    def set_weights(self, route: RouteRef, target: Mapping[str, int], premise: WeightPremise) -> WeightOutcome:
        conflicts = 0
        backends = set(target)
        while True:
            try:
                obj = self._get(route)
                rules = self._rules(obj)
                index = self._rule_index(obj, backends)
                live = self._weights(rules[index])
                missing = backends - set(live)
                if missing:
                    raise DriverError(f"{self._where(route)} has no backend {', '.join(sorted(missing))}", permanent=True)
                refusal = premise.refusal(live, target)
                if refusal is not None:
                    raise RoutePremiseChanged(live, refusal)
                if all(live[backend] == weight for backend, weight in target.items()):
                    return WeightOutcome(live, live, wrote=False, conflicts=conflicts,
                                         resource_version=obj["metadata"].get("resourceVersion", ""))
                if (undone := premise.undone(obj["metadata"].get("generation"))) is not None:
                    raise RoutePremiseChanged(live, undone)
                wanted = {**live, **target}
                try:
                    validate_weights(wanted, self.scheme)
                except WeightError as exc:
                    raise DriverError(f"refusing to write {self._where(route)}: {exc}", permanent=True) from None
                patched = copy.deepcopy(rules)
                for ref in patched[index].get(self.refs_key) or []:
                    ref["weight"] = wanted[self.backend_of(ref)]
                body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                        "spec": {self.rules_key: patched}}
                self._custom.patch_namespaced_custom_object(
                    self.group, self.version, route.namespace, self.plural, route.name, body,
                    _content_type=MERGE_PATCH, _request_timeout=self._timeout)
                break
            except ApiException as exc:
                if exc.status == 409 and conflicts < MAX_CONFLICT_RETRIES:
                    conflicts += 1
                    continue  # someone wrote in between: re-read and re-check the premise
                raise _driver_error(f"set weights of {self._where(route)}", exc) from None
            except (HTTPError, OSError) as exc:
                raise _driver_error(f"set weights of {self._where(route)}", exc) from None
        after = self.read(route, backends)
        if any(after.weights.get(backend) != weight for backend, weight in wanted.items()):
            raise DriverError(f"{self._where(route)} reads {after.weights} after writing {wanted}", permanent=False)
        return WeightOutcome(live, after.weights, wrote=True, conflicts=conflicts, resource_version=after.resource_version)


class HTTPRouteRouter(_CustomObjectRouter):
    """Gateway API: `spec.rules[].backendRefs[].weight`, proportional, 0-1,000,000 (default 1)."""

    group, version, plural, kind = "gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute"
    scheme = WeightScheme(max_weight=1_000_000)
    rules_key, refs_key = "rules", "backendRefs"

    def backend_of(self, ref: Obj) -> str:
        return str(ref.get("name", ""))

    def default_weight(self, refs: list[Obj]) -> int:
        return 1


class VirtualServiceRouter(_CustomObjectRouter):
    """Istio: `spec.http[].route[].weight`, in percent, adding up to 100 (a lone destination gets 100).

    A backend is the destination's short host name (`reviews` for `reviews.prod.svc.cluster.local`),
    with `/subset` when the destination names one (`reviews/v2`).
    """

    group, version, plural, kind = "networking.istio.io", "v1", "virtualservices", "VirtualService"
    scheme = WeightScheme(max_weight=100, total=100)
    rules_key, refs_key = "http", "route"

    def backend_of(self, ref: Obj) -> str:
        destination = ref.get("destination") or {}
        host = str(destination.get("host", "")).split(".")[0]
        return f"{host}/{destination['subset']}" if destination.get("subset") else host

    def default_weight(self, refs: list[Obj]) -> int:
        return 100 if len(refs) == 1 else 0
