"""The PromQL the Prometheus source sends, how it reads odd answers, and its durations (no server needed)."""
from __future__ import annotations

import pytest

import re

from controlplane.models import MAX_DEPLOYMENT_NAME
from scaling.drivers.prometheus import (
    DEPLOYMENT_OF_POD,
    ENDPOINT_FAILURES,
    ENDPOINT_REQUESTS,
    FRESHNESS,
    WAITING_PER_REPLICA,
    QUERIES,
    LabelMapping,
    PrometheusConfig,
    PrometheusSignalSource,
    duration_s,
    render,
)
from scaling.drivers.signals import PoolSelector

POOL_LABELS = {"namespace": "prod", "deployment": "chat"}


@pytest.mark.parametrize("mapping", [LabelMapping(), LabelMapping(pool_labels=("namespace", "model_name"), selector='job="vllm"')])
def test_it_groups_every_query_by_the_pool_labels(mapping):
    by = ", ".join(mapping.pool_labels)
    for name, template in {**QUERIES, **{f"freshness:{k}": v for k, v in FRESHNESS.items()}}.items():
        query = render(template, mapping, "1m")
        assert f"by ({by}" in query, name
        assert not any(hole in query for hole in ("{by}", "{sel}", "{w}", "{join}", "{{", "}}")), name
        if mapping.selector:
            assert mapping.selector in query, name


def test_every_vllm_series_has_its_deployment_read_from_the_pod_before_it_is_grouped():
    templates = [*QUERIES.values(), *FRESHNESS.values(), WAITING_PER_REPLICA, ENDPOINT_REQUESTS, ENDPOINT_FAILURES]
    for template in templates:
        query = render(template, LabelMapping(), "1m")
        assert query.count("vllm:") == query.count('label_replace(') > 0, query
        assert query.count('"deployment", "$1", "pod"') == query.count("vllm:"), query


def _without_counted_once(query: str) -> str:
    """`query` with every `max without (<scrape labels>) (…)` group cut out (balanced parentheses)."""
    head = "max without (job, instance, service, endpoint) ("
    while (start := query.find(head)) >= 0:
        depth, at = 1, start + len(head)
        while depth:
            depth += {"(": 1, ")": -1}.get(query[at], 0)
            at += 1
        query = query[:start] + query[at:]
    return query


def test_every_series_is_counted_once_however_many_jobs_scrape_it():
    templates = [*QUERIES.values(), *FRESHNESS.values(), WAITING_PER_REPLICA, ENDPOINT_REQUESTS, ENDPOINT_FAILURES]
    for template in templates:
        left = _without_counted_once(render(template, LabelMapping(), "1m"))
        assert not any(series in left for series in ("vllm:", "http_requests_total", "DCGM_")), left


def test_a_scrape_label_that_names_the_pool_is_kept():
    query = render(QUERIES["queue_depth"], LabelMapping(pool_labels=("job", "model_name"), derived=()), "1m")
    assert "max without (instance, service, endpoint) (" in query


@pytest.mark.parametrize(("pod", "deployment"), [
    ("chat-7d9f8c6b5-x2k4p", "chat"),
    ("chat-canary-7d9f8c6b5-x2k4p", "chat-canary"),  # never read as chat's
    ("vllm-llama-3-1-8b-5f6b7c8d9b-abcde", "vllm-llama-3-1-8b"),
    ("chat-0", None),  # a StatefulSet's pod: not a Deployment's
    ("chat-7d9f8c6b5x2k4p", None),
])
def test_the_deployment_is_read_from_its_pods_names(pod, deployment):
    # Prometheus anchors label_replace's expression at both ends, as fullmatch does (RE2 and re agree here).
    match = re.fullmatch(DEPLOYMENT_OF_POD, pod)
    assert (match[1] if match else None) == deployment


def test_the_longest_deployment_name_still_has_pods_it_can_be_read_from():
    # Kubernetes: pod name = (ReplicaSet name + "-")[:58] + 5 characters; ReplicaSet = Deployment + "-" + hash (<= 10).
    deployment = "d" * MAX_DEPLOYMENT_NAME
    pod = (f"{deployment}-{'7' * 10}-")[:58] + "x2k4p"
    assert re.fullmatch(DEPLOYMENT_OF_POD, pod)[1] == deployment
    longer = "d" * (MAX_DEPLOYMENT_NAME + 1)
    assert re.fullmatch(DEPLOYMENT_OF_POD, (f"{longer}-{'7' * 10}-")[:58] + "x2k4p") is None


class FakeClient:
    def __init__(self, answer):
        self.answer = answer

    def custom_query(self, query, params=None, timeout=None):
        return self.answer(query)


@pytest.mark.parametrize(
    ("case", "series"),
    [
        ("a matrix instead of a vector", {"metric": POOL_LABELS, "values": [[1.0, "3"]]}),
        ("a value that is not a number", {"metric": POOL_LABELS, "value": [1.0, "many"]}),
        ("+Inf", {"metric": POOL_LABELS, "value": [1.0, "+Inf"]}),
    ],
)
def test_it_reads_malformed_answers_as_unknown(case, series):
    def answer(query):
        if "timestamp(" in query:
            return [{"metric": POOL_LABELS, "value": [100.0, "99"]}]
        return [series]

    source = PrometheusSignalSource(PrometheusConfig("http://unused"), client=FakeClient(answer))  # type: ignore[arg-type]
    signals = source.read([PoolSelector("pool", POOL_LABELS)], at_s=100.0)["pool"]
    assert not signals.queue_depth.is_known, case


@pytest.mark.parametrize(("window", "seconds"), [("30s", 30), ("1m", 60), ("1m30s", 90), ("2h", 7200), ("500ms", 0.5)])
def test_it_reads_the_rate_window_in_seconds(window, seconds) -> None:
    assert duration_s(window) == seconds


@pytest.mark.parametrize("window", ["", "1", "m", "1 m", "-1m", "1m junk"])
def test_it_refuses_a_rate_window_that_is_not_a_duration(window) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        duration_s(window)
