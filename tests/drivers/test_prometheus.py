"""The Prometheus SignalSource against a real Prometheus scraping the sandbox's vLLM emulator."""
from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from sandbox.fleet import Fleet
from sandbox.prometheus import PrometheusLauncher, free_port
from sandbox.replica import wait_until
from scaling.drivers.prometheus import (
    FRESHNESS,
    QUERIES,
    LabelMapping,
    PrometheusConfig,
    PrometheusSignalSource,
)
from scaling.drivers.signals import PoolSelector
from scaling.engine.signals import work_share
from scaling.sim.profiles import PoolProfile, get_profile

# No skip when the binary is missing: the launcher fails with the command that installs it.
pytestmark = pytest.mark.prometheus
CHAT, CODE, IDLE = "chat-model", "code-model", "idle-model"
QUERIES_PER_READ = len(QUERIES) + len(FRESHNESS) + 1  # + the per-replica queue


def profile_for(model: str) -> PoolProfile:
    return dataclasses.replace(get_profile("llama-3.1-8b-h100"), model=model, max_num_seqs=2,
                               itl_ms_base=20.0, itl_ms_per_seq=0.0)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[PrometheusLauncher, Fleet]]:
    """Three pools: chat (2 replicas, served), code (1 replica, served), idle (1 replica, no traffic)."""
    with PrometheusLauncher(scrape_interval_s=0.5) as prometheus, Fleet() as fleet:
        prometheus.follow(fleet)
        replicas = (fleet.add_replicas(2, CHAT, profile=profile_for(CHAT), pool="prod/chat")
                    + fleet.add_replicas(1, CODE, profile=profile_for(CODE), pool="prod/code")
                    + fleet.add_replicas(1, IDLE, profile=profile_for(IDLE), pool="prod/idle"))
        for replica in replicas:
            assert replica.wait_ready(timeout=5)
        prometheus.wait_for_up(timeout=20)
        served = [replica for replica in replicas if replica.model_name != IDLE]
        for tokens in (3, 6):
            for replica in served:
                requests.post(replica.base_url + "/v1/completions", timeout=10,
                              json={"model": replica.model_name, "prompt": "a b c", "max_tokens": tokens})
            # The API's request counter is born with its first answer, and a series' first sample is never part
            # of a rate: Prometheus must see it before the second request, or the rates read no arrivals.
            assert wait_until(lambda: prometheus.query(
                f'count(http_requests_total{{handler="/v1/completions"}}) == {len(served)}'), 10)
        assert wait_until(lambda: prometheus.query(f'sum(vllm:request_success_total{{model_name="{CODE}"}}) == 2'), 10)
        # A scrape can catch a finished request still counted as running (the engine lets go of it after
        # the response): wait until Prometheus has seen every replica idle, as the tests expect.
        assert wait_until(lambda: prometheus.query("count(vllm:num_requests_running == 0) == 4"), 10)
        # Rates need two samples that tell the traffic apart: wait until the source reads them, not a fixed time.
        source = PrometheusSignalSource(PrometheusConfig(prometheus.url, rate_window="30s"))

        def rates_known() -> bool:
            read = source.read(pools()[:2])
            return all(read[pool].request_rate_rps.is_known and read[pool].request_rate_rps.value > 0
                       and read[pool].generation_tokens_rate.is_known for pool in ("chat", "code"))

        assert wait_until(rates_known, 20, interval=0.25), "Prometheus never had two samples after the traffic"
        yield prometheus, fleet


def pools() -> list[PoolSelector]:
    return [PoolSelector.of_deployment(name, "prod", name) for name in ("chat", "code", "idle", "gone")]


class CountingSource(PrometheusSignalSource):
    def __init__(self, config: PrometheusConfig) -> None:
        super().__init__(config)
        self.queries: list[str] = []

    def _query(self, promql: str, at_s: float):  # type: ignore[no-untyped-def]
        self.queries.append(promql)
        return super()._query(promql, at_s)


def test_it_reads_every_signal_of_many_pools_with_one_query_per_signal(cluster) -> None:
    prometheus, _ = cluster
    source = CountingSource(PrometheusConfig(prometheus.url, rate_window="30s"))

    read = source.read(pools())

    assert read.errors == {}
    assert len(source.queries) == QUERIES_PER_READ  # the same for 4 pools as for 1
    assert all("by (namespace, deployment" in query for query in source.queries)
    chat = read["chat"]
    assert chat.ready_replicas.known == 2.0
    assert chat.queue_depth.known == 0.0 and chat.running_requests.known == 0.0
    assert len(chat.waiting_per_ready_replica) == 2 and all(r.is_known for r in chat.waiting_per_ready_replica)
    assert chat.request_rate_rps.is_known and chat.request_rate_rps.value > 0
    assert chat.generation_tokens_rate.is_known and chat.generation_tokens_rate.value > chat.request_rate_rps.value
    assert chat.error_rate.known == 0.0  # requests served, none failed: a real zero
    # 3 and 6 tokens at 20 ms: e2e about 0.06-0.12 s, first token within a bucket or two.
    assert chat.e2e_p95_s.is_known and 0.0 < chat.e2e_p95_s.value <= 0.3
    assert chat.ttft_p99_s.is_known and 0.0 < chat.ttft_p99_s.value <= 0.1
    assert chat.kv_cache_usage.known == 0.0
    assert all(0.0 <= r.age_s <= 5.0 for r in chat.readings().values() if r.is_known)
    assert read["code"].ready_replicas.known == 1.0


def test_the_prompt_tokens_of_the_tick_are_read_apart_from_the_windows(cluster) -> None:
    """The work share's prefill part reads the last scrape interval: the burst is over, the window still has it."""
    prometheus, _ = cluster
    source = PrometheusSignalSource(PrometheusConfig(prometheus.url, rate_window="30s"))

    def tick_is_quiet() -> bool:
        return source.read(pools()[:1])["chat"].prompt_tokens_tick_rate.known == 0.0

    assert wait_until(tick_is_quiet, 10, interval=0.25)
    chat = source.read(pools()[:1])["chat"]
    assert chat.prompt_tokens_rate.is_known and chat.prompt_tokens_rate.value > 0  # 4 prompts in the last 30 s


def test_it_reads_empty_answers_as_unknown_never_zero(cluster) -> None:
    prometheus, _ = cluster
    read = PrometheusSignalSource(PrometheusConfig(prometheus.url, rate_window="30s")).read(pools())

    gone = read["gone"]
    assert set(gone.unknown_signals()) == set(gone.readings())
    assert gone.waiting_per_ready_replica == ()
    # No DCGM exporter in the sandbox: GPU use is unknown, not 0 %.
    assert not read["chat"].gpu_utilization.is_known
    # Kubernetes' numbers come from the Kubernetes driver.
    assert not read["chat"].desired_replicas.is_known and not read["chat"].arriving_replicas.is_known


def test_it_reads_nan_as_unknown(cluster) -> None:
    prometheus, _ = cluster
    idle = PrometheusSignalSource(PrometheusConfig(prometheus.url, rate_window="30s")).read(pools())["idle"]

    # No request finished in the window: the quantiles and the error ratio are NaN in PromQL.
    for reading in (idle.e2e_p95_s, idle.ttft_p95_s, idle.queue_time_p99_s, idle.error_rate):
        assert not reading.is_known and reading.value is None
    # ... while the gauges and the rate are real zeros.
    assert idle.queue_depth.known == 0.0 and idle.request_rate_rps.known == 0.0


def test_it_reads_samples_older_than_90_s_as_stale(cluster) -> None:
    prometheus, _ = cluster
    source = PrometheusSignalSource(PrometheusConfig(prometheus.url, rate_window="30s"))

    # Evaluated 2 minutes ahead, the gauges' last samples are 2 minutes old (within Prometheus'
    # 5-minute lookback, so it still answers them).
    chat = source.read(pools(), at_s=time.time() + 120)["chat"]

    assert chat.queue_depth.value == 0.0 and chat.queue_depth.age_s > 90
    assert chat.queue_depth.is_stale and not chat.queue_depth.is_known
    assert chat.unknown_signals() == list(chat.readings())


def test_it_reads_an_unreachable_prometheus_as_unknown_without_retrying() -> None:
    source = PrometheusSignalSource(PrometheusConfig(f"http://127.0.0.1:{free_port()}", timeout_s=1.0))
    started = time.monotonic()

    read = source.read(pools())

    assert time.monotonic() - started < 5.0
    assert set(read.errors) == set(QUERIES) | {f"freshness:{f}" for f in FRESHNESS} | {"waiting_per_replica"}
    assert all("ConnectionError" in error for error in read.errors.values())
    assert read["chat"].unknown_signals() == list(read["chat"].readings())


def test_it_gives_up_on_a_hung_prometheus_at_its_timeout() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # accepts connections, never answers
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        source = PrometheusSignalSource(PrometheusConfig(f"http://127.0.0.1:{port}", timeout_s=0.2))
        started = time.monotonic()
        read = source.read(pools()[:1])
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        thread.join(timeout=2)
        for connection in accepted:
            connection.close()
        listener.close()

    assert len(read.errors) == QUERIES_PER_READ and all("Timeout" in e for e in read.errors.values())
    assert elapsed < QUERIES_PER_READ * 0.2 + 3.0  # one attempt per query, no retries
    assert len(accepted) <= QUERIES_PER_READ
    assert read["chat"].unknown_signals() == list(read["chat"].readings())


def test_it_reports_a_promql_error_and_reads_unknown(cluster) -> None:
    prometheus, _ = cluster
    broken = LabelMapping(selector='job=~"("')  # an invalid regular expression: HTTP 400
    read = PrometheusSignalSource(PrometheusConfig(prometheus.url, labels=broken)).read(pools())

    assert "queue_depth" in read.errors and "400" in read.errors["queue_depth"]
    assert not read["chat"].queue_depth.is_known


def test_two_deployments_of_one_model_read_their_own_signals(cluster) -> None:
    """A canary (or the new version a shift moves to) serves the same model in the same namespace: each
    pool reads its own replicas and load, never the sum of both."""
    prometheus, fleet = cluster
    (canary,) = fleet.add_replicas(1, CHAT, profile=profile_for(CHAT), pool="prod/chat-canary")
    assert canary.wait_ready(timeout=5)
    prometheus.wait_for_up(timeout=20)
    source = PrometheusSignalSource(PrometheusConfig(prometheus.url, rate_window="30s"))
    selectors = [PoolSelector.of_deployment("chat", "prod", "chat"),
                 PoolSelector.of_deployment("canary", "prod", "chat-canary")]
    assert wait_until(lambda: source.read(selectors)["canary"].ready_replicas.is_known, 10, interval=0.25)

    read = source.read(selectors)

    assert read["chat"].ready_replicas.known == 2.0 and read["canary"].ready_replicas.known == 1.0
    assert len(read["chat"].waiting_per_ready_replica) == 2
    assert read["chat"].request_rate_rps.value > 0 and not read["canary"].request_rate_rps.value  # chat's traffic
    assert not prometheus.query('count(vllm:num_requests_running{deployment!=""})')  # read from the pod's name


def test_it_identifies_pools_by_the_configured_labels(cluster) -> None:
    prometheus, _ = cluster
    mapping = LabelMapping(pool_labels=("namespace", "model_name"), derived=())
    source = PrometheusSignalSource(PrometheusConfig(prometheus.url, labels=mapping, rate_window="30s"))

    read = source.read([PoolSelector("prod-code", {"namespace": "prod", "model_name": CODE}),
                        PoolSelector("staging-code", {"namespace": "staging", "model_name": CODE})])

    assert read.errors == {}
    assert read["prod-code"].ready_replicas.known == 1.0
    assert read["prod-code"].error_rate.known == 0.0  # the HTTP join keeps namespace from the vLLM side
    assert not read["staging-code"].ready_replicas.is_known


def test_its_request_rate_counts_arrivals_before_they_complete(cluster) -> None:
    # A pool of one slow replica (1 slot, 1 s a token) gets 4 requests at once: nothing completes
    # for several seconds, so completions alone would read 0 req/s while the queue builds.
    prometheus, fleet = cluster
    slow = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="slow-model", max_num_seqs=1,
                               itl_ms_base=1000.0, itl_ms_per_seq=0.0)
    (replica,) = fleet.add_replicas(1, "slow-model", profile=slow, pool="prod/slow")
    assert replica.wait_ready(timeout=5)
    prometheus.wait_for_up(timeout=20)

    def send() -> None:
        try:
            requests.post(replica.base_url + "/v1/completions", timeout=60,
                          json={"model": "slow-model", "prompt": "a b c", "max_tokens": 30})
        except requests.RequestException:
            pass  # the module's fleet may stop first; the test reads the metrics before that

    for _ in range(4):
        threading.Thread(target=send, daemon=True).start()
    assert wait_until(lambda: prometheus.query('sum(vllm:num_requests_waiting{model_name="slow-model"}) >= 3'), 10)

    source = PrometheusSignalSource(PrometheusConfig(prometheus.url, rate_window="30s"))
    slow = [PoolSelector.of_deployment("slow", "prod", "slow")]
    # Scrapes go on with the queue standing until the arrivals show as a rate (the first completes after 30 s).
    assert wait_until(lambda: (source.read(slow)["slow"].request_rate_rps.value or 0.0) > 0.0, 15, interval=0.25)
    slow_pool = source.read(slow)["slow"]
    completions = prometheus.query('sum(rate(vllm:request_success_total{model_name="slow-model"}[30s]))')

    assert not completions or float(completions[0]["value"][1]) == 0.0
    assert slow_pool.request_rate_rps.is_known and slow_pool.request_rate_rps.value > 0.0


def test_its_request_rate_counts_the_requests_clients_gave_up_on(cluster) -> None:
    """Under overload clients time out: vLLM counts those requests nowhere but in the API's answers (its
    `request_success_total` leaves aborts out, and so does the emulator), and they were arrivals all the same."""
    prometheus, fleet = cluster
    model = "abandoned-model"
    slow = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model=model, max_num_seqs=1,
                               itl_ms_base=1000.0, itl_ms_per_seq=0.0)
    (replica,) = fleet.add_replicas(1, model, profile=slow, pool="prod/abandoned")
    assert replica.wait_ready(timeout=5)
    prometheus.wait_for_up(timeout=20)
    pod = f'pod="{replica.name}"'

    def give_up() -> None:
        try:
            requests.post(replica.base_url + "/v1/completions", timeout=0.5,
                          json={"model": model, "prompt": "a b c", "max_tokens": 30})
        except requests.RequestException:
            pass  # the client's timeout: the replica aborts the request when it sees the connection gone

    # Two waves: a counter's first sample is never part of a rate, so the first only gives the API its series.
    for wave in (1, 2):
        senders = [threading.Thread(target=give_up) for _ in range(4)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        assert wait_until(lambda: prometheus.query(f'sum(http_requests_total{{{pod}}}) == {4 * wave}'), 10)
        assert wait_until(lambda: prometheus.query(
            f'sum(vllm:num_requests_waiting{{{pod}}}) + sum(vllm:num_requests_running{{{pod}}}) == 0'), 10)

    source = PrometheusSignalSource(PrometheusConfig(prometheus.url, rate_window="30s"))
    selector = [PoolSelector.of_deployment("abandoned", "prod", "abandoned")]
    assert wait_until(lambda: (source.read(selector)["abandoned"].request_rate_rps.value or 0.0) > 0.05, 10,
                      interval=0.25), source.read(selector)["abandoned"].request_rate_rps
    assert prometheus.query(f'sum(vllm:request_success_total{{{pod}}}) == 0')  # none finished, none counted


def test_a_data_parallel_pod_is_one_replica_of_several_engines() -> None:
    """vLLM with `--data-parallel-size 2` exports one series per engine (`engine="0"`, `"1"`) from one pod: the
    pool has as many replicas as pods, and its engines are what the work share counts slots of."""
    end = round(time.time()) - 60
    pods = ("dp-7d9f8c6b5-x2k4p", "dp-7d9f8c6b5-q8z2m")
    lines = ["# TYPE vllm:num_requests_running gauge"]
    for pod in pods:
        for engine in ("0", "1"):
            labels = f'engine="{engine}",model_name="{CHAT}",namespace="prod",pod="{pod}"'
            lines += [f"vllm:num_requests_running{{{labels}}} 12 {at}" for at in range(end - 600, end + 1, 15)]
    launcher = PrometheusLauncher()
    try:
        launcher.backfill("\n".join(lines) + "\n# EOF\n")
        launcher.start()
        source = PrometheusSignalSource(PrometheusConfig(launcher.url, rate_window="30s"))
        dp = source.read([PoolSelector.of_deployment("dp", "prod", "dp")], at_s=end + 1)["dp"]
    finally:
        launcher.stop()

    assert dp.ready_replicas.known == 2.0 and dp.engines_per_replica.known == 2.0
    assert dp.running_requests.known == 48.0
    assert work_share(dp, batch_slots=16, prefill_tokens_per_s=None).known == pytest.approx(48 / (2 * 2 * 16))


def test_a_pod_scraped_by_two_jobs_is_counted_once() -> None:
    """A PodMonitor and a ServiceMonitor over the same pods (a common slip with the Prometheus operator) make two
    copies of every series, apart only in the scrape's labels: the pool reads its load once, not twice."""
    end = round(time.time()) - 60
    pods = ("chat-7d9f8c6b5-x2k4p", "chat-7d9f8c6b5-q8z2m")
    scrapes = ('job="prod/vllm-pods",endpoint="http"',
               'job="vllm",service="vllm",endpoint="metrics",instance="10.0.0.{n}:8000"')
    families: dict[str, list[str]] = {"vllm:num_requests_running": [], "vllm:num_requests_waiting": [],
                                      "vllm:request_success": [], "http_requests": []}
    for n, pod in enumerate(pods):
        for scrape in scrapes:
            labels = f'{scrape.format(n=n)},model_name="{CHAT}",namespace="prod",pod="{pod}"'
            for at in range(end - 600, end + 1, 15):
                served = at - (end - 600)  # one request a second per pod
                families["vllm:num_requests_running"].append(f"vllm:num_requests_running{{{labels}}} 4 {at}")
                families["vllm:num_requests_waiting"].append(f"vllm:num_requests_waiting{{{labels}}} 3 {at}")
                families["vllm:request_success"].append(
                    f'vllm:request_success_total{{{labels},finished_reason="stop"}} {served} {at}')
                families["http_requests"].append(
                    f'http_requests_total{{{labels},handler="/v1/completions",status="2xx"}} {served} {at}')
    kinds = {"http_requests": "counter", "vllm:request_success": "counter"}
    lines = []
    for family, samples in families.items():
        lines += [f"# TYPE {family} {kinds.get(family, 'gauge')}", *samples]
    launcher = PrometheusLauncher()
    try:
        launcher.backfill("\n".join(lines) + "\n# EOF\n")
        launcher.start()
        source = PrometheusSignalSource(PrometheusConfig(launcher.url, rate_window="1m"))
        selector = PoolSelector.of_deployment("chat", "prod", "chat")
        chat = source.read([selector], at_s=end)["chat"]
        counts = source.endpoint_counts([selector], "1m", at_s=end)["chat"]
    finally:
        launcher.stop()

    assert chat.ready_replicas.known == 2.0 and chat.engines_per_replica.known == 1.0
    assert chat.running_requests.known == 8.0 and chat.queue_depth.known == 6.0
    assert [r.known for r in chat.waiting_per_ready_replica] == [3.0, 3.0]
    assert chat.request_rate_rps.known == pytest.approx(2.0, rel=0.05)
    assert counts == {pods[0]: (60, 0), pods[1]: (60, 0)}
