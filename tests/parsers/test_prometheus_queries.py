"""The PromQL the Prometheus source sends, how it reads odd answers, and its durations (no server needed)."""
from __future__ import annotations

import pytest

from scaling.drivers.prometheus import (
    FRESHNESS,
    QUERIES,
    LabelMapping,
    PrometheusConfig,
    PrometheusSignalSource,
    duration_s,
    render,
)
from scaling.drivers.signals import PoolSelector


@pytest.mark.parametrize("mapping", [LabelMapping(), LabelMapping(pool_labels=("namespace", "model_name"), selector='job="vllm"')])
def test_it_groups_every_query_by_the_pool_labels(mapping):
    by = ", ".join(mapping.pool_labels)
    for name, template in {**QUERIES, **{f"freshness:{k}": v for k, v in FRESHNESS.items()}}.items():
        query = render(template, mapping, "1m")
        assert f"by ({by}" in query, name
        assert not any(hole in query for hole in ("{by}", "{sel}", "{w}", "{join}", "{{", "}}")), name
        if mapping.selector:
            assert mapping.selector in query, name


class FakeClient:
    def __init__(self, answer):
        self.answer = answer

    def custom_query(self, query, params=None, timeout=None):
        return self.answer(query)


@pytest.mark.parametrize(
    ("case", "series"),
    [
        ("a matrix instead of a vector", {"metric": {"model_name": "m"}, "values": [[1.0, "3"]]}),
        ("a value that is not a number", {"metric": {"model_name": "m"}, "value": [1.0, "many"]}),
        ("+Inf", {"metric": {"model_name": "m"}, "value": [1.0, "+Inf"]}),
    ],
)
def test_it_reads_malformed_answers_as_unknown(case, series):
    def answer(query):
        if "timestamp(" in query:
            return [{"metric": {"model_name": "m"}, "value": [100.0, "99"]}]
        return [series]

    source = PrometheusSignalSource(PrometheusConfig("http://unused"), client=FakeClient(answer))  # type: ignore[arg-type]
    signals = source.read([PoolSelector("pool", {"model_name": "m"})], at_s=100.0)["pool"]
    assert not signals.queue_depth.is_known, case


@pytest.mark.parametrize(("window", "seconds"), [("30s", 30), ("1m", 60), ("1m30s", 90), ("2h", 7200), ("500ms", 0.5)])
def test_it_reads_the_rate_window_in_seconds(window, seconds) -> None:
    assert duration_s(window) == seconds


@pytest.mark.parametrize("window", ["", "1", "m", "1 m", "-1m", "1m junk"])
def test_it_refuses_a_rate_window_that_is_not_a_duration(window) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        duration_s(window)
