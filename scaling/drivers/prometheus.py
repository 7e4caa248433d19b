"""Prometheus `SignalSource`: one batched PromQL query per signal per cluster.

All the PromQL Headroom sends lives in `QUERIES` below, written against vLLM's metric names
(`../shared/reference/vllm-interface.md`) with these placeholders:
`{by}` the pool labels (`LabelMapping.pool_labels`), `{sel}` extra matchers (`LabelMapping.selector`),
`{w}` the rate window and `{ws}` the same in seconds; `{derive}…{derive_end}` (written by `_pooled`) add
the pool labels read from others before grouping: by default a pool is its namespace and Deployment, the
Deployment read from the pod's name (`LabelMapping`); `{once}` (written by `_once`) counts a pod scraped by
two jobs once. Every query groups by the pool labels, so a cluster with 200 pools costs the same queries as
one with a single pool.

Ages. Prometheus stamps an instant query's answer with the evaluation time, not the scrape time,
so the source also asks, once per source family, for the oldest scrape time per pool
(`timestamp()` of a gauge) and gives every reading of that family the age "evaluation time minus
that scrape". Readings older than 90 s, empty answers, NaN (`histogram_quantile` of no requests,
0/0 rates), HTTP or PromQL errors, timeouts and an unreachable server are all **unknown**, and so is an
answer that is not a whole, warning-free instant vector stamped at the instant asked (`query_result`).

Replica counts: `ready_replicas` is the number of replicas exporting vLLM metrics (vLLM only
listens once the model is loaded, so this is "Ready and model-loaded"). Arriving and desired
replicas come from the Kubernetes driver, which reads the Deployment itself; they are left
missing here.

Prometheus' address is an admin's input: every connection (redirects included) goes through the
connect-time address guard with `CLUSTER_ALLOWED_NETWORKS` (`controlplane.netguard`); a refused
address makes every signal unknown, with the reason in `SignalRead.errors`.

No hidden retries: the HTTP client is built with retries off and an explicit timeout, and a
failed query is reported in `SignalRead.errors`, not repeated. One read runs its queries side by
side under one deadline (`deadline_s`, shorter than the 15-s tick): a query without an answer by
then is an error and its signal unknown, so a slow Prometheus costs one tick at most.
"""
from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from controlplane import netguard
from controlplane.config import duration_s
from scaling.drivers.signals import PoolSelector, SignalRead
from scaling.engine.signals import STALE_AFTER_S, PoolSignals, Reading, plausible

# --- the PromQL -------------------------------------------------------------------------------


def _once(expr: str) -> str:
    """`expr` with each series counted once however many jobs scrape it. A pod scraped by both a PodMonitor
    and a ServiceMonitor (a common slip with the Prometheus operator) exports every series twice, labelled
    apart only by the scrape (`LabelMapping.scrape_labels`): summed as they come, its queue, load and
    engines would count double and the pool be scaled for twice its traffic."""
    return "{once}(" + expr + ")"


def _pooled(expr: str) -> str:
    """`expr` counted once (`_once`), with the pool labels the mapping derives added (by default the
    Deployment, from the pod's name), ready to be grouped by the pool labels. Range functions are wrapped
    whole: label_replace takes instant vectors."""
    return "{derive}" + _once(expr) + "{derive_end}"


# A pool's live replicas: any vLLM gauge, grouped by the pool labels (and the replica label).
_LIVE = _pooled("vllm:num_requests_running{{{sel}}}")
# Joins a per-pod series to its pool's labels (times 1: the vLLM side only lends its labels).
_POD_JOIN = " * on ({join}) group_left({carry}) (max by ({join}{by_comma}) (" + _LIVE + ") * 0 + 1)"
# A counter that may have no series at all (no errors yet) reads 0 for pools that are alive.
_OR_ZERO = " or (max by ({by}) (" + _LIVE + ") * 0)"


def _quantile(metric: str, q: float) -> str:
    rate = _pooled(f"rate({metric}_bucket{{{{{{sel}}}}}}[{{w}}])")
    return f"histogram_quantile({q}, sum by ({{by}}, le) (" + rate + "))"


# The API routes that hand the engine a request (not /v1/models, which routers and probes poll).
INFERENCE_HANDLERS = "/v1/(chat/)?completions|/v1/embeddings|/v1/responses"


def _http_5xx() -> str:
    return "sum by ({by}) (" + _once("rate(http_requests_total{{handler=~\"/v1/.*\",status=~\"5..\"}}[{w}])") + _POD_JOIN + ")"


QUERIES: dict[str, str] = {
    # gauges
    "queue_depth": "sum by ({by}) (" + _pooled("vllm:num_requests_waiting{{{sel}}}") + ")",
    "running_requests": "sum by ({by}) (" + _LIVE + ")",
    "kv_cache_usage": "avg by ({by}) (" + _pooled("vllm:kv_cache_usage_perc{{{sel}}}") + ")",
    # Pods, not series: a pod running vLLM data-parallel (`--data-parallel-size`) exports one series per engine.
    "ready_replicas": "count by ({by}) (count by ({by}, {replica}) (" + _LIVE + "))",
    "engines_per_replica": "count by ({by}) (" + _LIVE + ") / count by ({by}) (count by ({by}, {replica}) (" + _LIVE + "))",
    # latency percentiles over the rate window
    "e2e_p95_s": _quantile("vllm:e2e_request_latency_seconds", 0.95),
    "e2e_p99_s": _quantile("vllm:e2e_request_latency_seconds", 0.99),
    "ttft_p95_s": _quantile("vllm:time_to_first_token_seconds", 0.95),
    "ttft_p99_s": _quantile("vllm:time_to_first_token_seconds", 0.99),
    "queue_time_p95_s": _quantile("vllm:request_queue_time_seconds", 0.95),
    "queue_time_p99_s": _quantile("vllm:request_queue_time_seconds", 0.99),
    # rates
    # Requests *arriving*: those that left plus the change in those still in the pool (waiting and
    # running) over the window. Completions alone flatten exactly when a pool is overloaded, the moment
    # the rate matters most. What left is read from the API's answers, which count the requests clients
    # gave up on: vLLM leaves an aborted request out of `request_success_total` (vllm#31503), and under
    # overload clients time out by the hundred. A pool whose API exports no HTTP series falls back to it.
    "request_rate_rps": (
        "clamp_min((sum by ({by}) (" + _once("rate(http_requests_total{{handler=~\"" + INFERENCE_HANDLERS + "\"}}[{w}])")
        + _POD_JOIN + ") or sum by ({by}) (" + _pooled("rate(vllm:request_success_total{{{sel}}}[{w}])") + "))"
        " + (sum by ({by}) (" + _pooled("delta(vllm:num_requests_waiting{{{sel}}}[{w}])") + ")" + _OR_ZERO + ") / {ws}"
        " + (sum by ({by}) (" + _pooled("delta(vllm:num_requests_running{{{sel}}}[{w}])") + ")" + _OR_ZERO + ") / {ws}, 0)"
    ),
    "prompt_tokens_rate": "sum by ({by}) (" + _pooled("rate(vllm:prompt_tokens_total{{{sel}}}[{w}])") + ")",
    # The prompt tokens of the last scrape interval (irate: the window's last two samples): the work share's
    # prefill part is read at the tick, as a burst lands, where the rate over the window averages it away.
    "prompt_tokens_tick_rate": "sum by ({by}) (" + _pooled("irate(vllm:prompt_tokens_total{{{sel}}}[{w}])") + ")",
    "generation_tokens_rate": "sum by ({by}) (" + _pooled("rate(vllm:generation_tokens_total{{{sel}}}[{w}])") + ")",
    # errors: requests vLLM finished with an error plus HTTP 5xx answers on the API, over both;
    # NaN (unknown) when the pool served nothing in the window.
    "error_rate": (
        "((sum by ({by}) (" + _pooled("rate(vllm:request_success_total{{finished_reason=\"error\",{sel}}}[{w}])") + ")"
        + _OR_ZERO + ")"
        " + (" + _http_5xx() + _OR_ZERO + "))"
        " / ((sum by ({by}) (" + _pooled("rate(vllm:request_success_total{{{sel}}}[{w}])") + ")" + _OR_ZERO + ")"
        " + (" + _http_5xx() + _OR_ZERO + "))"
    ),
    "prefix_cache_hit_rate": (
        "sum by ({by}) (" + _pooled("rate(vllm:prefix_cache_hits_total{{{sel}}}[{w}])") + ")"
        " / sum by ({by}) (" + _pooled("rate(vllm:prefix_cache_queries_total{{{sel}}}[{w}])") + ")"
    ),
    # DCGM exports per GPU with the pod using it; joined to the pool through the pod. 0-100 -> 0-1.
    "gpu_utilization": "avg by ({by}) (" + _once("DCGM_FI_DEV_GPU_UTIL") + _POD_JOIN + ") / 100",
}
# Per replica: the queue of each ready replica (the HPA core's per-pod metric).
WAITING_PER_REPLICA = "sum by ({by}, {replica}) (" + _pooled("vllm:num_requests_waiting{{{sel}}}") + ")"
# Per replica: the API's answers and its 5xx over a window, for the endpoint circuit breakers.
# increase() never counts a series' first sample, and a pod's 5xx series is born with its first failure (a
# new pod's every series with its first request): a series born inside the window counts from 0 instead.
def _counted_in_window(series: str) -> str:
    return _once(f"(increase({series}[{{w}}]) and {series} offset {{w}}) or ({series} unless {series} offset {{w}})")


ENDPOINT_REQUESTS = ("sum by ({by}, {replica}) (" + _counted_in_window('http_requests_total{{handler=~"/v1/.*"}}')
                     + _POD_JOIN + ")")
ENDPOINT_FAILURES = ("sum by ({by}, {replica}) ("
                     + _counted_in_window('http_requests_total{{handler=~"/v1/.*",status=~"5.."}}') + _POD_JOIN + ")")
# Freshness: the oldest last-scrape time per pool, for each source family.
FRESHNESS = {
    "vllm": "min by ({by}) (" + _pooled("timestamp(vllm:num_requests_running{{{sel}}})") + ")",
    "dcgm": "min by ({by}) (" + _once("timestamp(DCGM_FI_DEV_GPU_UTIL)") + _POD_JOIN + ")",
}
SOURCE_OF = {"gpu_utilization": "dcgm"}  # every other signal comes from vLLM's /metrics


# A Deployment's pod is named <deployment>-<pod-template-hash>-<5 characters> (ReplicaSet, then the pod's
# generateName). Kubernetes cuts generated names at 63 characters, so a Deployment name over 46 characters
# leaves pods this cannot read the Deployment from: Pool.clean refuses such names.
DEPLOYMENT_OF_POD = "(.+)-[a-z0-9]{1,10}-[a-z0-9]{5}"


@dataclass(frozen=True)
class LabelMapping:
    """Which labels identify a pool in the scraped series, and how replicas are told apart.

    By default a pool is its Deployment: the namespace, and the Deployment's name taken from the pod's
    (`DEPLOYMENT_OF_POD`). Never the served model alone: two Deployments of one model (a canary, a
    new vLLM version being shifted to, one per team) would each read the other's load and latency.
    """

    pool_labels: tuple[str, ...] = ("namespace", "deployment")
    replica_label: str = "pod"
    join_labels: tuple[str, ...] = ("namespace", "pod")  # DCGM and HTTP series -> vLLM series
    selector: str = ""  # extra matchers for every vLLM series, e.g. 'job="vllm"'
    # Labels computed before grouping: (label, source label, regular expression whose group is the value).
    derived: tuple[tuple[str, str, str], ...] = (("deployment", "pod", DEPLOYMENT_OF_POD),)
    # Labels that name the scrape, not the series (those the Prometheus operator's monitors set): series that
    # differ only in these are one series scraped twice, counted once (`_once`).
    scrape_labels: tuple[str, ...] = ("job", "instance", "service", "endpoint")


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    labels: LabelMapping = field(default_factory=LabelMapping)
    timeout_s: float = 5.0  # per query, both the HTTP client's and Prometheus' own
    rate_window: str = "1m"
    deadline_s: float = 10.0  # for all the queries of one read together
    parallel_queries: int = 8


def render(template: str, labels: LabelMapping, window: str) -> str:
    """One query with its placeholders filled in."""
    carry = [label for label in labels.pool_labels if label not in labels.join_labels]
    derive_end = "".join(f', "{label}", "$1", "{source}", "{regex}")' for label, source, regex in labels.derived)
    kept = {*labels.pool_labels, *labels.join_labels, labels.replica_label}
    once = ", ".join(label for label in labels.scrape_labels if label not in kept)
    return template.format(by=", ".join(labels.pool_labels), sel=labels.selector, w=window, ws=f"{duration_s(window):g}",
                           once=f"max without ({once}) " if once else "",
                           replica=labels.replica_label, join=", ".join(labels.join_labels),
                           carry=", ".join(carry), by_comma="".join(f", {label}" for label in carry),
                           derive="label_replace(" * len(labels.derived), derive_end=derive_end)


class AnswerRefused(ValueError):
    """Prometheus (or whatever stands in front of it) answered, but not with a usable instant vector."""


def query_result(status: int, body: bytes, result_type: str = "vector") -> list[dict[str, Any]]:
    """The series of a query's answer (an instant vector; a matrix for a range query), or AnswerRefused
    saying what was wrong with it.

    Read whole, not only `data.result` as the client library does: a 200 that says `"status": "error"`, a
    scalar or matrix where a vector was asked, warnings (a partial answer: a store or remote read missing, so
    sums count part of the load), an HTML page from a proxy and a body cut short each make the signal
    unknown with a reason the on-call can act on, never a KeyError or a crash of the whole read."""
    try:
        answer = json.loads(body)
    except ValueError:
        if status != 200:
            return _refuse(f"HTTP {status}, not Prometheus' JSON (a proxy's page?): {_gist(body)}")
        return _refuse(f"an answer that is not whole JSON (cut short?): {_gist(body)}")
    if not isinstance(answer, dict):
        return _refuse(f"HTTP {status}: an answer that is not Prometheus' JSON: {_gist(body)}")
    if answer.get("status") != "success" or status != 200:
        reason = f"{answer.get('errorType') or 'error'}: {answer.get('error') or 'no reason given'}"
        return _refuse(f"HTTP {status}, status {answer.get('status')!r}: {reason}"[:300])
    data = answer.get("data") if isinstance(answer.get("data"), dict) else {}
    if data.get("resultType") != result_type or not isinstance(data.get("result"), list):
        return _refuse(f"expected a {result_type}, got resultType {data.get('resultType')!r}")
    # A warning from a store that did not answer means the sums miss part of the load; Prometheus' own
    # annotations ("PromQL info: …", "PromQL warning: …", e.g. a histogram's buckets fixed for monotonicity,
    # common on real histograms) are about the expression's arithmetic and leave the answer whole.
    if partial := [str(warning) for warning in answer.get("warnings") or () if not str(warning).startswith("PromQL ")]:
        return _refuse(f"a partial answer, not used: warnings: {'; '.join(partial)}"[:300])
    return data["result"]


def _refuse(reason: str) -> list[dict[str, Any]]:
    raise AnswerRefused(reason)


def _gist(body: bytes) -> str:
    """The start of a body as one line of text (a proxy's HTML page without its tags)."""
    text = re.sub(r"(?is)<(head|script|style)\b.*?</\1>|<[^>]*>", " ", body[:2000].decode("utf-8", errors="replace"))
    return " ".join(text.split())[:120] or "(empty)"


class CheckedPrometheus(PrometheusConnect):
    """The client library's connection, with answers read whole by `query_result`."""

    def custom_query(self, query: str, params: dict | None = None, timeout: float | None = None) -> list[dict[str, Any]]:
        return self._get("query", {"query": str(query), **(params or {})}, "vector", timeout)

    def custom_query_range(self, query: str, start_time: datetime, end_time: datetime, step: str,
                           params: dict | None = None, timeout: float | None = None) -> list[dict[str, Any]]:
        window = {"start": round(start_time.timestamp()), "end": round(end_time.timestamp()), "step": step}
        return self._get("query_range", {"query": str(query), **window, **(params or {})}, "matrix", timeout)

    def _get(self, endpoint: str, params: dict[str, Any], result_type: str, timeout: float | None) -> list[dict[str, Any]]:
        response = self._session.request(method=self._method, url=f"{self.url}/api/v1/{endpoint}", params=params,
                                         headers=self.headers, auth=self.auth,
                                         timeout=self._timeout if timeout is None else timeout)
        return query_result(response.status_code, response.content, result_type)


def _guarded_client(config: PrometheusConfig) -> PrometheusConnect:
    # Retries off: a failed read is reported and the planner holds; the next tick reads again.
    no_retries = Retry(total=0, read=False, raise_on_status=False)
    session = requests.Session()
    session.trust_env = False  # no proxy from the environment: it would reach what the guard refuses
    prometheus = CheckedPrometheus(url=config.url, retry=no_retries, timeout=config.timeout_s, session=session)  # type: ignore[arg-type]
    # PrometheusConnect mounts a plain adapter on its URL; every prefix gets the guarded one instead.
    for prefix in [*session.adapters, config.url]:
        session.mount(prefix, netguard.CheckedAdapter(netguard.CLUSTERS, max_retries=no_retries))
    return prometheus


class HistoryUnavailable(Exception):
    """Prometheus could not answer a history query."""


class PrometheusSignalSource:
    """`SignalSource` on one cluster's Prometheus (design.md §6)."""

    def __init__(self, config: PrometheusConfig, client: PrometheusConnect | None = None) -> None:
        self.config = config
        self.client = client or _guarded_client(config)

    def read(self, pools: Sequence[PoolSelector], at_s: float | None = None) -> SignalRead:
        """Every pool's signals, all queries evaluated at one instant (`at_s`, default now)."""
        labels, window = self.config.labels, self.config.rate_window
        at_s = time.time() if at_s is None else at_s
        errors: dict[str, str] = {}
        keys = {self._key(pool.labels): pool.name for pool in pools}

        def run(template: str) -> Callable[[], list[dict[str, Any]]]:
            return lambda: self._query(render(template, labels, window), at_s)

        queries = {f"freshness:{family}": q for family, q in FRESHNESS.items()} | QUERIES | {
            "waiting_per_replica": WAITING_PER_REPLICA}
        answers = self._run_all({name: run(template) for name, template in queries.items()}, errors)
        fresh = {family: self._by_pool(answers[f"freshness:{family}"], keys) for family in FRESHNESS}
        readings: dict[str, dict[str, Reading]] = {pool.name: {} for pool in pools}
        for signal in QUERIES:
            scraped_at = fresh[SOURCE_OF.get(signal, "vllm")]
            for pool_name, (value, evaluated_at) in self._by_pool(answers[signal], keys).items():
                readings[pool_name][signal] = _reading(value, evaluated_at, scraped_at.get(pool_name))
        waiting: dict[str, list[Reading]] = {pool.name: [] for pool in pools}
        for series in answers["waiting_per_replica"]:
            pool_name, point = keys.get(self._key(series.get("metric", {}))), _sample(series)
            if pool_name is not None and point is not None:
                waiting[pool_name].append(_reading(*point, fresh["vllm"].get(pool_name)))
        signals = {
            pool.name: replace(PoolSignals(pool=pool.name, waiting_per_ready_replica=tuple(waiting[pool.name])),
                               **readings[pool.name])  # type: ignore[arg-type]
            for pool in pools
        }
        return SignalRead(signals, errors)

    def endpoint_counts(self, pools: Sequence[PoolSelector], window: str,
                        at_s: float | None = None) -> dict[str, dict[str, tuple[int, int]]]:
        """Each pool's pods: (API requests, 5xx answers) over `window`, rounded (increase() extrapolates).

        A pod with requests and no 5xx series has 0 failures. Raises on a failed query: a breaker
        must not read "no failures" from a Prometheus that did not answer.
        """
        at_s = time.time() if at_s is None else at_s
        labels, replica = self.config.labels, self.config.labels.replica_label
        keys = {self._key(pool.labels): pool.name for pool in pools}
        counts: dict[str, dict[str, list[int]]] = {pool.name: {} for pool in pools}
        for index, template in enumerate((ENDPOINT_REQUESTS, ENDPOINT_FAILURES)):
            for series in self._query(render(template, labels, window), at_s):
                metric = series.get("metric", {})
                pool_name, point = keys.get(self._key(metric)), _sample(series)
                pod = str(metric.get(replica, ""))
                if pool_name is None or point is None or not pod or not math.isfinite(point[0]):
                    continue
                counts[pool_name].setdefault(pod, [0, 0])[index] = max(0, round(point[0]))
        return {name: {pod: (total, min(failed, total)) for pod, (total, failed) in pods.items()}
                for name, pods in counts.items()}

    def rate_history(self, pools: Sequence[PoolSelector], start_s: float, end_s: float,
                     step_s: float) -> dict[str, list[tuple[float, float]]]:
        """Every pool's request rate from `start_s` to `end_s` (one range query for all pools).

        Points Prometheus has no data for are simply absent (gaps, never zeros). Raises
        `HistoryUnavailable` when the query fails.
        """
        promql = render(QUERIES["request_rate_rps"], self.config.labels, self.config.rate_window)
        params = {"timeout": f"{self.config.timeout_s:g}s"}
        try:
            result = self.client.custom_query_range(
                promql, start_time=datetime.fromtimestamp(start_s, timezone.utc),
                end_time=datetime.fromtimestamp(end_s, timezone.utc), step=f"{step_s:g}", params=params)
        except AnswerRefused as error:
            raise HistoryUnavailable(str(error)) from None
        except (requests.RequestException, PrometheusApiClientException, ValueError, netguard.OutboundRefused) as error:
            raise HistoryUnavailable(f"{type(error).__name__}: {error}"[:300]) from None
        keys = {self._key(pool.labels): pool.name for pool in pools}
        history: dict[str, list[tuple[float, float]]] = {pool.name: [] for pool in pools}
        for series in result if isinstance(result, list) else []:
            pool_name = keys.get(self._key(series.get("metric", {})))
            if pool_name is None:
                continue
            for at, raw in series.get("values", []):
                value = float(raw)
                if plausible(value):
                    history[pool_name].append((float(at), value))
        return history

    # -------------------------------------------------------------------------------------
    def _run_all(self, calls: dict[str, Callable[[], list[dict[str, Any]]]],
                 errors: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
        """Every query at once, under one deadline; a failed or late one answers [] and is in `errors`."""
        answers: dict[str, list[dict[str, Any]]] = {name: [] for name in calls}
        pool = ThreadPoolExecutor(max_workers=self.config.parallel_queries, thread_name_prefix="promql")
        futures = {pool.submit(call): name for name, call in calls.items()}
        done, late = wait(futures, timeout=self.config.deadline_s)
        pool.shutdown(wait=False, cancel_futures=True)  # late queries end by their own timeout
        for future in done:
            name = futures[future]
            try:
                answers[name] = future.result()
            except AnswerRefused as error:  # already a sentence
                errors[name] = str(error)
            except Exception as error:  # noqa: BLE001 - whatever failed, that signal is unknown
                errors[name] = f"{type(error).__name__}: {error}"[:300]
        for future in late:
            errors[futures[future]] = f"no answer within the read's deadline of {self.config.deadline_s:g} s"
        return answers

    def _query(self, promql: str, at_s: float) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"timeout": f"{self.config.timeout_s:g}s", "time": f"{at_s:.3f}"}
        result = self.client.custom_query(promql, params=params, timeout=self.config.timeout_s)
        if not isinstance(result, list) or not all(isinstance(series, dict) for series in result):
            raise AnswerRefused(f"expected an instant vector, got {type(result).__name__}")
        for series in result:
            point = _sample(series)
            # Prometheus stamps an instant answer with the instant asked; another stamp is a cache's old answer
            # (a query frontend, a proxy), and its own scrape times would make it look fresh.
            if point is not None and abs(point[1] - at_s) > STALE_AFTER_S:
                raise AnswerRefused(f"an answer for {point[1] - at_s:+.0f} s from the instant asked "
                                    "(a cache in front of Prometheus?)")
        return result

    def _key(self, labels: Any) -> tuple[str, ...]:
        return tuple(str(labels.get(label, "")) for label in self.config.labels.pool_labels)

    def _by_pool(self, result: list[dict[str, Any]], keys: dict[tuple[str, ...], str]) -> dict[str, tuple[float, float]]:
        out: dict[str, tuple[float, float]] = {}
        for series in result:
            pool_name, point = keys.get(self._key(series.get("metric", {}))), _sample(series)
            if pool_name is not None and point is not None:
                out[pool_name] = point
        return out


def _sample(series: dict[str, Any]) -> tuple[float, float] | None:
    """(value, evaluation time); None for a malformed series (read as missing)."""
    try:
        evaluated_at, raw = series["value"]
        return float(raw), float(evaluated_at)  # float() reads "NaN", "+Inf"
    except (KeyError, TypeError, ValueError):
        return None


def _reading(value: float, evaluated_at: float, scraped_at: tuple[float, float] | None) -> Reading:
    """A value aged by its pool's oldest scrape; without a scrape time the age is unknown."""
    if scraped_at is None or not math.isfinite(scraped_at[0]):
        return Reading(value=value if math.isfinite(value) else None, age_s=None)
    age = max(0.0, evaluated_at - scraped_at[0])
    return Reading(value=value if math.isfinite(value) else None, age_s=age)


__all__ = ["QUERIES", "FRESHNESS", "WAITING_PER_REPLICA", "LabelMapping", "PrometheusConfig",
           "PrometheusSignalSource", "render", "STALE_AFTER_S", "DEPLOYMENT_OF_POD"]
