"""Ids in request bodies are whole numbers: a JSON integer or a string of digits. 3.7, 3.0, true, "3.5" and
"3.0" are a 400 naming the field, never the object whose id they round to (the ORM would truncate them)."""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from rest_framework import serializers

from controlplane.api.fields import StrictIdField, StrictPrimaryKeyRelatedField
from controlplane.models import SLO, Cluster, Pool, Team
from scaling.models import FallbackPolicy, Proposal, TrafficShift

from .conftest import token_client

SERIALIZER_MODULES = ("controlplane.api.serializers", "scaling.api.serializers", "incidents.api.serializers")


def _not_ids(pk: int) -> list[object]:
    """What rounds (or is cast) to `pk` but is no id."""
    return [pk + 0.7, float(pk), f"{pk}.0", f"{pk}.5", f" {pk}", f"{pk}\n", f"+{pk}", True, [pk], {"id": pk}]


def _pool(cluster: Cluster, team: Team, name: str) -> Pool:
    return Pool.objects.create(cluster=cluster, team=team, name=name, namespace="inference", deployment=f"vllm-{name}",
                               model_name=name, gpu_type="H100", min_replicas=1, max_replicas=8,
                               route_name="chat", route_backend=f"vllm-{name}")


@pytest.fixture
def pools(pool: Pool, cluster: Cluster, ml_team: Team) -> tuple[Pool, Pool]:
    return pool, _pool(cluster, ml_team, "chat-1b")


def _cases(pools: tuple[Pool, Pool]) -> Iterator[tuple[str, str, dict, str, object]]:
    """(method, url, payload, the id's field, the id) for a representative endpoint of each app."""
    pool, other = pools
    yield "post", "/api/v1/slos/", {"indicator": "e2e_p95", "threshold": 2000, "objective": 0.99}, "pool", pool.pk
    yield "post", "/api/v1/schedules/", {"name": "peak", "weekday": 1, "start": "09:00", "end": "11:00",
                                         "time_zone": "UTC"}, "pool", pool.pk
    yield "patch", f"/api/v1/pools/{pool.pk}/", {}, "fallback_pool", other.pk
    yield "post", "/api/v1/proposals/", {"target_replicas": 2}, "pool", pool.pk
    yield "post", "/api/v1/shifts/", {"to_pool": other.pk}, "from_pool", pool.pk
    yield "post", "/api/v1/fallbacks/activate/", {"share": 0.5}, "pool", pool.pk
    yield "post", "/api/v1/fallback-policies/", {}, "pool", pool.pk
    yield "post", "/api/v1/reports/", {}, "pool", pool.pk


def test_every_pk_field_in_a_body_refuses_what_is_no_whole_number(bob: User, pools: tuple[Pool, Pool]) -> None:
    client = token_client(bob)
    for method, url, payload, field, pk in _cases(pools):
        for value in _not_ids(pk):
            response = getattr(client, method)(url, payload | {field: value}, format="json")
            assert response.status_code == 400 and field in response.data, (url, value, response.data)
    assert SLO.objects.count() == 1 and not Proposal.objects.exists() and not TrafficShift.objects.exists()
    assert not FallbackPolicy.objects.exists() and Pool.objects.get(pk=pools[0].pk).fallback_pool_id is None


def test_a_float_id_is_refused_with_a_sentence_naming_what_an_id_is(bob: User, pools: tuple[Pool, Pool]) -> None:
    response = token_client(bob).post("/api/v1/proposals/", {"pool": pools[0].pk + 0.7, "target_replicas": 2},
                                      format="json")
    assert response.status_code == 400
    assert "whole-number id" in str(response.data["pool"]) and "received float" in str(response.data["pool"])


@pytest.mark.parametrize("as_text", [False, True])
def test_an_integer_or_a_string_of_digits_is_an_id(bob: User, pools: tuple[Pool, Pool], as_text: bool) -> None:
    pool, other = pools
    value = str(other.pk) if as_text else other.pk
    response = token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {"fallback_pool": value}, format="json")
    assert response.status_code == 200 and response.data["fallback_pool"] == other.pk, response.data
    created = token_client(bob).post("/api/v1/slos/", {"pool": str(pool.pk) if as_text else pool.pk,
                                                       "indicator": "e2e_p95", "threshold": 2000, "objective": 0.99},
                                     format="json")
    assert created.status_code == 201, created.data


@pytest.mark.parametrize("pk", [0, -3, 2**63, 10**30, "99999999999999999999999"])
def test_an_id_of_nothing_is_a_400_not_a_500(bob: User, pools: tuple[Pool, Pool], pk: object) -> None:
    response = token_client(bob).post("/api/v1/proposals/", {"pool": pk, "target_replicas": 2}, format="json")
    assert response.status_code == 400 and "pool" in response.data, response.data


@pytest.mark.parametrize(("url", "payload", "field"), [
    ("/api/v1/proposals/bulk/", {"ids": [1.0], "verdict": "approve"}, "ids"),
    ("/api/v1/proposals/bulk/", {"ids": ["2.0"], "verdict": "approve"}, "ids"),
    ("/api/v1/proposals/bulk/", {"ids": [True], "verdict": "reject"}, "ids"),
    ("/api/v1/playbook-runs/", {"incident": 1.0, "playbook": 1}, "incident"),
    ("/api/v1/playbook-runs/", {"incident": 1, "playbook": "1.0"}, "playbook"),
])
def test_ids_taken_as_numbers_are_whole_numbers_too(alice: User, url: str, payload: dict, field: str) -> None:
    response = token_client(alice).post(url, payload, format="json")
    assert response.status_code == 400 and field in response.data, response.data


def _serializer_classes() -> Iterator[type[serializers.Serializer]]:
    for name in SERIALIZER_MODULES:
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            abstract = issubclass(cls, serializers.ModelSerializer) and not hasattr(cls, "Meta")
            if issubclass(cls, serializers.Serializer) and cls.__module__ == name and not abstract:
                yield cls


def test_every_writable_related_field_of_the_api_goes_through_the_strict_field() -> None:
    loose = []
    for cls in _serializer_classes():
        for name, field in cls().fields.items():
            target = getattr(field, "child_relation", field)
            if isinstance(target, serializers.RelatedField) and not target.read_only:
                if isinstance(target, serializers.PrimaryKeyRelatedField) and \
                        not isinstance(target, StrictPrimaryKeyRelatedField):
                    loose.append(f"{cls.__name__}.{name}")
    assert not loose, loose


def test_the_strict_fields_take_integers_and_digit_strings_only() -> None:
    field = StrictIdField()
    assert field.run_validation(12) == 12 and field.run_validation("12") == 12
    for value in (12.0, 12.5, "12.0", "+12", "1_2", "١٢", True, None):
        with pytest.raises(serializers.ValidationError):
            field.run_validation(value)
