"""A real Prometheus (Debian's binary) scraping the vLLM emulator through file service discovery."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from scaling.sim.profiles import PoolProfile
from sandbox.fleet import Fleet
from sandbox.history import history_openmetrics
from sandbox.kube.cluster import PoolSpec
from sandbox.prometheus import PrometheusError, PrometheusLauncher
from sandbox.scenarios import scenario_trace
from sandbox.replica import wait_until

# No skip when the binary is missing: the launcher fails with the command that installs it.
pytestmark = pytest.mark.prometheus
MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusLauncher]:
    with PrometheusLauncher(scrape_interval_s=0.5) as launcher:
        yield launcher


def _value(prometheus: PrometheusLauncher, promql: str) -> float | None:
    result = prometheus.query(promql)
    return float(result[0]["value"][1]) if result else None


def test_it_scrapes_vllm_colon_names_and_computes_histogram_quantiles(
        prometheus: PrometheusLauncher, small_profile: PoolProfile) -> None:
    with Fleet() as fleet:
        prometheus.follow(fleet)
        replicas = fleet.add_replicas(2, MODEL, profile=small_profile, pool="sandbox/chat")
        for replica in replicas:
            assert replica.wait_ready(timeout=5)
        prometheus.wait_for_up(timeout=20)

        for replica in replicas:
            for tokens in (5, 10, 20):
                requests.post(replica.base_url + "/v1/completions", timeout=10,
                              json={"model": MODEL, "prompt": "a b c", "max_tokens": tokens})
        waiting = prometheus.query("sum by (model_name) (vllm:num_requests_waiting)")
        assert waiting and waiting[0]["metric"] == {"model_name": MODEL}

        # 5, 10 and 20 tokens at 20 ms each: e2e of about 0.1, 0.2 and 0.4 s on each replica.
        quantile = ('histogram_quantile(0.5, sum by (le, model_name) '
                    '(vllm:e2e_request_latency_seconds_bucket{namespace="sandbox"}))')
        assert wait_until(lambda: _value(prometheus, 'sum(vllm:request_success_total)') == 6, 10)
        median = _value(prometheus, quantile)
        assert median is not None and 0.0 < median <= 0.3
        ttft_p95 = _value(prometheus, 'histogram_quantile(0.95, sum by (le) '
                                      '(rate(vllm:time_to_first_token_seconds_bucket[10s])))')
        assert ttft_p95 is not None and 0.0 < ttft_p95 <= 0.1

        series = prometheus.query('vllm:num_requests_running{deployment="chat"}')
        assert {s["metric"]["pod"] for s in series} == {r.name for r in replicas}
        assert not prometheus.query('{__name__=~"vllm_.*"}')  # no colon was rewritten


def test_it_follows_replicas_as_they_come_and_go(prometheus: PrometheusLauncher, small_profile: PoolProfile) -> None:
    with Fleet() as fleet:
        prometheus.follow(fleet)
        first = fleet.add_replica(MODEL, profile=small_profile, pool="sandbox/scale")
        first.wait_ready(timeout=5)
        prometheus.wait_for_up(timeout=20)
        # Prometheus applies discovery changes every 5 s at most, so change both at once.
        second = fleet.add_replica(MODEL, profile=small_profile, pool="sandbox/scale")
        fleet.remove_replica(first)
        second.wait_ready(timeout=5)
        prometheus.wait_for_up([f"127.0.0.1:{second.port}"], timeout=20)
        assert wait_until(lambda: {s["metric"]["pod"] for s in prometheus.query('up{deployment="scale"}')}
                          == {second.name}, 5)


def test_it_backfills_history_that_promql_reads_like_live_data(small_profile: PoolProfile) -> None:
    now = time.time()
    pool = PoolSpec(name="chat", profile=small_profile, model=MODEL)
    steady = scenario_trace("steady", 1, seed=3)
    assert steady is not None
    history = history_openmetrics([(pool, 1)], steady, hours=0.25, end_unix=now)
    launcher = PrometheusLauncher()
    try:
        launcher.backfill(history)
        launcher.start()

        def at(promql: str, seconds_ago: float) -> float:
            params = {"query": promql, "time": str(now - seconds_ago)}
            answer = requests.get(launcher.url + "/api/v1/query", params=params, timeout=10).json()
            return float(answer["data"]["result"][0]["value"][1])

        # steady: 2 req/s for the pool, so about 600 requests in five minutes
        assert 450 < at('sum(increase(vllm:request_success_total{deployment="chat"}[5m]))', 60) < 750
        p95 = at('histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))', 60)
        assert 0.5 < p95 < 60
        assert at("sum by (model_name) (vllm:num_requests_waiting)", 300) >= 0
    finally:
        launcher.stop()


def test_it_says_how_to_install_a_missing_binary(tmp_path) -> None:
    launcher = PrometheusLauncher(binary=str(tmp_path / "prometheus"))
    try:
        with pytest.raises(PrometheusError, match="apt-get install -y prometheus"):
            launcher.start()
    finally:
        launcher.stop()
