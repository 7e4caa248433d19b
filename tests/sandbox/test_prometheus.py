"""A real Prometheus (Debian's binary) scraping the vLLM emulator through file service discovery."""
from __future__ import annotations

import re
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

        series = prometheus.query('vllm:num_requests_running{pod=~"chat-.*"}')
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
        assert wait_until(lambda: {s["metric"]["pod"] for s in prometheus.query('up{pod=~"scale-.*"}')}
                          == {second.name}, 5)


def _samples(history: str, series: str) -> dict[str, list[tuple[float, float]]]:
    """(timestamp, value) of every sample of `series` in the backfill, by the series' labels."""
    found: dict[str, list[tuple[float, float]]] = {}
    for match in re.finditer(rf"^{re.escape(series)}{{([^}}]*)}} (\S+) (\S+)$", history, re.MULTILINE):
        found.setdefault(match[1], []).append((float(match[3]), float(match[2])))
    return found


def _le(labels: str) -> str:
    return re.search(r'le="([^"]+)"', labels)[1]  # type: ignore[index]


def _increase(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """Last minus first value inside (start, end]: what a range vector over it sees, before extrapolation."""
    inside = [value for at, value in samples if start < at <= end]
    return inside[-1] - inside[0]


def _histogram_quantile(q: float, increases: dict[str, float]) -> float:
    """Prometheus' histogram_quantile: linear inside the bucket that holds the rank."""
    buckets = sorted((float(le), count) for le, count in increases.items())
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, cumulative in buckets:
        if cumulative >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / (cumulative - below)
        lower, below = upper, cumulative
    raise AssertionError("no bucket holds the rank")


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

        # Samples every 15 s up to now - 15 s; halfway between two, no sample sits on a window's edge.
        evaluated_at = now - 67.5
        window = (evaluated_at - 300, evaluated_at)
        # Prometheus extrapolates the 285 s between the window's first and last samples to its 300 s.
        successes = _samples(history, "vllm:request_success_total")  # one series per finished_reason
        expected_requests = sum(_increase(series, *window) for series in successes.values()) * 300 / 285
        assert expected_requests > 450  # steady: 2 req/s, about 600 in five minutes
        requests_5m = at('sum(increase(vllm:request_success_total{pod="chat-history-00000"}[5m]))', 67.5)
        assert requests_5m == pytest.approx(expected_requests, rel=1e-6)

        buckets = _samples(history, "vllm:e2e_request_latency_seconds_bucket")
        expected_p95 = _histogram_quantile(0.95, {_le(labels): _increase(series, *window)
                                                  for labels, series in buckets.items()})
        p95 = at('histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))', 67.5)
        assert p95 == pytest.approx(expected_p95, rel=1e-6)
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


def test_the_storys_history_reads_as_yesterdays_rates_per_wall_second(small_profile: PoolProfile) -> None:
    """The story's yesterday (no engine replay) through the loop's own rate query, at the sandbox's window for
    4x: the base load times the speed, and the 15x peak a day before today's, 10 wall minutes after the start."""
    from scaling.drivers.prometheus import PrometheusConfig, PrometheusSignalSource
    from scaling.drivers.signals import PoolSelector
    from sandbox.history import rate_openmetrics
    from sandbox.registration import sandbox_rate_window
    from sandbox.scenarios import BASE_RPS_PER_POOL, DAILY_FACTOR, DAY_S, story_history_rate, story_peak_wall_s

    speed, start = 4.0, time.time()
    pool = PoolSpec(name="chat", profile=small_profile, model=MODEL)
    history = rate_openmetrics([(pool, 100)], lambda t: story_history_rate(t, BASE_RPS_PER_POOL, speed), hours=26.0,
                               end_unix=start, step_s=5.0)
    launcher = PrometheusLauncher()
    try:
        launcher.backfill(history)
        launcher.start()
        source = PrometheusSignalSource(PrometheusConfig(launcher.url, rate_window=sandbox_rate_window(speed)))
        peak_at = start + story_peak_wall_s(speed) - DAY_S
        rates = dict(source.rate_history([PoolSelector.of_deployment("chat", "sandbox", "chat")], peak_at - 1200,
                                         peak_at + 3000, 60.0)["chat"])
        at = lambda t: min(rates.items(), key=lambda item: abs(item[0] - t))[1]  # noqa: E731 - the nearest step
        assert at(peak_at - 600) == pytest.approx(BASE_RPS_PER_POOL * speed, rel=0.05)
        assert at(peak_at + 600) == pytest.approx(BASE_RPS_PER_POOL * speed * DAILY_FACTOR, rel=0.05)
        assert at(peak_at + 2400) == pytest.approx(BASE_RPS_PER_POOL * speed, rel=0.05)
    finally:
        launcher.stop()
