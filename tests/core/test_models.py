"""The database itself refuses inconsistent inventory, whatever path the write takes."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from controlplane.config import parse_gpu_prices, parse_off_hours
from controlplane.models import SLO, Pool, ScheduleWindow


def _pool_kwargs(pool: Pool, **changes) -> dict:  # noqa: ANN003
    fields = {
        "cluster": pool.cluster, "team": pool.team, "name": "other", "namespace": "inference",
        "deployment": "vllm-other", "model_name": "m", "gpu_type": "H100", "min_replicas": 1, "max_replicas": 2,
    }
    return fields | changes


@pytest.mark.parametrize(
    "changes",
    [
        {"min_replicas": 5, "max_replicas": 3},
        {"gpus_per_replica": 0},
        {"warm_pool_fraction": 1.5},
        {"warm_pool_fraction": -0.1},
        {"max_replicas": 0, "min_replicas": 0},
        {"target_queue_per_replica": 0},
        {"cold_start_p50_s": 100, "cold_start_p95_s": 50},
        {"name": "chat-8b"},  # unique per cluster
    ],
)
def test_it_refuses_inconsistent_pools_in_the_database(pool: Pool, changes: dict) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Pool.objects.create(**_pool_kwargs(pool, **changes))


def test_it_refuses_a_pool_that_is_its_own_fallback(pool: Pool) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Pool.objects.filter(pk=pool.pk).update(fallback_pool=pool)


def test_it_allows_the_same_pool_name_in_another_cluster(pool: Pool, search_pool: Pool) -> None:
    other = Pool.objects.create(**_pool_kwargs(pool, cluster=search_pool.cluster, name="chat-8b"))
    same_name = Pool.objects.filter(name="chat-8b").order_by("pk")
    assert [(p.pk, p.cluster_id) for p in same_name] == [(pool.pk, pool.cluster_id), (other.pk, search_pool.cluster_id)]
    assert pool.cluster_id != search_pool.cluster_id


def test_it_names_the_field_when_min_exceeds_max(pool: Pool) -> None:
    candidate = Pool(**_pool_kwargs(pool, min_replicas=9, max_replicas=3))
    with pytest.raises(ValidationError) as excinfo:
        candidate.full_clean()
    assert "min_replicas" in excinfo.value.message_dict
    assert "must not exceed max_replicas (3)" in excinfo.value.message_dict["min_replicas"][0]


def test_it_requires_the_fallback_in_the_same_cluster(pool: Pool, search_pool: Pool) -> None:
    pool.fallback_pool = search_pool
    with pytest.raises(ValidationError) as excinfo:
        pool.full_clean()
    assert "same cluster" in excinfo.value.message_dict["fallback_pool"][0]


def test_it_refuses_slo_objectives_outside_zero_one(pool: Pool) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        SLO.objects.create(pool=pool, indicator="e2e_p99", threshold=2000, objective=1.5)


def test_it_refuses_a_schedule_window_of_zero_length(pool: Pool) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        ScheduleWindow.objects.create(pool=pool, name="x", weekday=0, start="09:00", end="09:00")


def test_it_has_readable_names(pool: Pool) -> None:
    assert str(pool) == "gpu-us-east/chat-8b"
    assert str(pool.slos.get()) == "gpu-us-east/chat-8b: ttft_p95 ≤ 1000 ms for 99.00%"


def test_it_parses_off_hours_windows_across_midnight() -> None:
    [window] = parse_off_hours([{"weekdays": [4], "start": "22:00", "end": "06:00"}])
    from datetime import time

    assert window.contains(4, time(23, 0))  # Friday night
    assert window.contains(5, time(5, 59))  # early Saturday belongs to Friday's window
    assert not window.contains(5, time(6, 0))
    assert not window.contains(4, time(21, 59))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"weekdays": [1]}, "must be a list"),
        ([{"weekdays": [7], "start": "00:00", "end": "01:00"}], "weekdays must be"),
        ([{"weekdays": [1], "start": "25:00", "end": "01:00"}], "start must be 'HH:MM'"),
        ([{"weekdays": [1], "start": "01:00", "end": "01:00"}], "must differ"),
        ([{"weekdays": [1], "start": "01:00", "end": "02:00", "tz": "x"}], "unknown keys: tz"),
    ],
)
def test_it_explains_bad_off_hours(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_off_hours(raw)


def test_it_explains_bad_gpu_prices() -> None:
    with pytest.raises(ValueError, match="H100: on_demand must be a number"):
        parse_gpu_prices({"H100": {"on_demand": "cheap"}})
    assert parse_gpu_prices({"L4": {"on_demand": 0.8}})["L4"].spot_usd_per_hour is None
