"""The vLLM fleet emulator over real HTTP: cold start, OpenAI API, batching, sleep, faults."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from sandbox.clock import ManualClock
from sandbox.fleet import Fleet
from sandbox.replica import wait_until

MODEL = "tiny-llama"


def _sample(text: str, series: str) -> float:
    """The value of the first sample of `series` (a metric name) in an exposition."""
    for line in text.splitlines():
        if line.split("{", 1)[0].split(" ", 1)[0] == series:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not in /metrics")


def _metric(base_url: str, series: str) -> float:
    return _sample(requests.get(base_url + "/metrics", timeout=5).text, series)


def test_it_refuses_connections_until_the_cold_start_ends(fleet: Fleet, small_profile) -> None:
    replica = fleet.add_replica(MODEL, profile=small_profile, cold_start_s=0.6)
    with pytest.raises(requests.ConnectionError):
        requests.get(replica.base_url + "/health", timeout=1)
    assert replica.wait_ready(timeout=5)
    assert requests.get(replica.base_url + "/health", timeout=2).status_code == 200
    models = requests.get(replica.base_url + "/v1/models", timeout=2).json()
    assert models["data"][0]["id"] == MODEL


def test_it_honours_max_tokens_in_completions_and_chat(fleet: Fleet, small_profile) -> None:
    replica = fleet.add_replica(MODEL, profile=small_profile)
    replica.wait_ready(timeout=5)
    body = requests.post(replica.base_url + "/v1/completions", timeout=10,
                         json={"model": MODEL, "prompt": "one two three", "max_tokens": 5}).json()
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 8, "completion_tokens": 5}
    assert body["choices"][0]["finish_reason"] == "length"
    chat = requests.post(replica.base_url + "/v1/chat/completions", timeout=10,
                         json={"model": MODEL, "max_tokens": 4,
                               "messages": [{"role": "user", "content": "hello"}]}).json()
    assert chat["object"] == "chat.completion"
    assert chat["usage"]["completion_tokens"] == 4


def test_it_streams_server_sent_events_with_usage(fleet: Fleet, small_profile) -> None:
    replica = fleet.add_replica(MODEL, profile=small_profile)
    replica.wait_ready(timeout=5)
    response = requests.post(replica.base_url + "/v1/completions", stream=True, timeout=10, json={
        "model": MODEL, "prompt": "hi", "max_tokens": 6, "stream": True,
        "stream_options": {"include_usage": True}})
    events = [line[len(b"data: "):] for line in response.iter_lines() if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert len(text.split()) == 6
    assert chunks[-1]["usage"]["completion_tokens"] == 6


def test_it_rejects_an_unknown_model_like_vllm(fleet: Fleet, small_profile) -> None:
    replica = fleet.add_replica(MODEL, profile=small_profile)
    replica.wait_ready(timeout=5)
    response = requests.post(replica.base_url + "/v1/completions", timeout=5,
                             json={"model": "other", "prompt": "x", "max_tokens": 1})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "NotFoundError"


def test_it_queues_beyond_max_num_seqs_and_reports_it(small_profile) -> None:
    clock = ManualClock()  # model time stands still while the test reads the queue
    with Fleet(clock=clock) as fleet:
        replica = fleet.add_replica(MODEL, profile=small_profile)
        replica.wait_ready(timeout=5)

        def load() -> tuple[float, float]:
            metrics = requests.get(replica.base_url + "/metrics", timeout=5).text
            return _sample(metrics, "vllm:num_requests_running"), _sample(metrics, "vllm:num_requests_waiting")

        def complete(_: int) -> int:
            return requests.post(replica.base_url + "/v1/completions", timeout=20,
                                 json={"model": MODEL, "prompt": "a b", "max_tokens": 15}).status_code

        replica.sleep(1)  # all six arrive before the engine schedules any
        with ThreadPoolExecutor(6) as pool:
            results = pool.map(complete, range(6))
            assert wait_until(lambda: load() == (0, 6), 5)
            replica.wake_up()
            # Two run, four wait, and stay so until model time moves on.
            assert wait_until(lambda: load() == (2, 4), 5)
            assert load() == (2, 4)
            clock.advance(10.0)
            assert list(results) == [200] * 6
        metrics = requests.get(replica.base_url + "/metrics", timeout=5).text
    assert _sample(metrics, "vllm:num_requests_waiting") == 0
    assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-llama"} 6.0' in metrics
    assert _sample(metrics, "vllm:generation_tokens_total") == 90
    # Three waves of two, 15 x 20 ms each: the second pair waited one wave, the third two (2 x 0.3 + 2 x 0.6 s).
    assert _sample(metrics, "vllm:request_queue_time_seconds_sum") == pytest.approx(1.8, abs=0.05)
    assert 'vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny-llama"} 6.0' in metrics


def test_it_runs_faster_with_a_speed_factor_but_reports_model_time(small_profile) -> None:
    with Fleet(speed=50) as fleet:
        replica = fleet.add_replica(MODEL, profile=small_profile, cold_start_s=50)
        assert replica.wait_ready(timeout=10)  # 50 model seconds = 1 wall second
        started = time.monotonic()
        requests.post(replica.base_url + "/v1/completions", timeout=10,
                      json={"model": MODEL, "prompt": "a", "max_tokens": 100})
        wall_s = time.monotonic() - started
        model_s = _metric(replica.base_url, "vllm:e2e_request_latency_seconds_sum")
    assert model_s >= 2.0  # 100 x 20 ms, in model seconds
    # 0.04 wall seconds at speed 50; the bound leaves 25 times that for a busy machine, and fails at speed 1.
    assert wall_s < model_s / 2


def test_it_sleeps_and_wakes_through_the_dev_endpoints(fleet: Fleet, small_profile) -> None:
    replica = fleet.add_replica(MODEL, profile=small_profile)
    replica.wait_ready(timeout=5)
    url = replica.base_url
    assert requests.post(url + "/sleep?level=1", timeout=2).json() == {"status": "sleeping", "level": 1}
    assert requests.get(url + "/is_sleeping", timeout=2).json() == {"is_sleeping": True}
    metrics = requests.get(url + "/metrics", timeout=2).text
    assert f'vllm:engine_sleep_state{{engine="0",model_name="{MODEL}",sleep_state="weights_offloaded"}} 1.0' in metrics
    assert requests.get(url + "/health", timeout=2).status_code == 200  # health ignores sleep
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(requests.post, url + "/v1/completions", timeout=10,
                              json={"model": MODEL, "prompt": "a", "max_tokens": 2})
        assert wait_until(lambda: _metric(url, "vllm:num_requests_waiting") == 1, 2)
        requests.post(url + "/wake_up", timeout=2)
        assert pending.result().status_code == 200
    assert requests.get(url + "/is_sleeping", timeout=2).json() == {"is_sleeping": False}


def test_it_holds_running_requests_while_asleep(small_profile) -> None:
    clock = ManualClock()
    with Fleet(clock=clock) as fleet:
        replica = fleet.add_replica(MODEL, profile=small_profile)
        replica.wait_ready(timeout=5)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(requests.post, replica.base_url + "/v1/completions", timeout=10,
                                  json={"model": MODEL, "prompt": "a", "max_tokens": 20})  # 0.4 s awake
            assert wait_until(lambda: _metric(replica.base_url, "vllm:num_requests_running") == 1, 5)
            clock.advance(0.2)
            replica.sleep(1)
            clock.advance(0.5)  # asleep: the request makes no progress
            assert not pending.done() and _metric(replica.base_url, "vllm:num_requests_running") == 1
            replica.wake_up()
            clock.advance(1.0)
            assert pending.result(timeout=10).status_code == 200
        e2e_s = _metric(replica.base_url, "vllm:e2e_request_latency_seconds_sum")
    assert 0.9 <= e2e_s < 1.0  # 0.4 s of work plus 0.5 s asleep (and a prefill of one token)


def test_it_injects_errors_slowness_hangs_and_death(fleet: Fleet, small_profile) -> None:
    replica = fleet.add_replica(MODEL, profile=small_profile)
    replica.wait_ready(timeout=5)
    url = replica.base_url
    body: dict[str, Any] = {"model": MODEL, "prompt": "a", "max_tokens": 1}

    replica.faults.error_rate = 1.0
    assert requests.post(url + "/v1/completions", json=body, timeout=5).status_code == 500
    replica.faults.error_rate = 0.0

    replica.faults.extra_latency_s = 0.4
    started = time.monotonic()
    requests.post(url + "/v1/completions", json=body, timeout=5)
    assert time.monotonic() - started >= 0.4
    replica.faults.extra_latency_s = 0.0

    replica.set_hung(True)
    with pytest.raises(requests.Timeout):
        requests.get(url + "/health", timeout=0.3)
    replica.set_hung(False)
    assert requests.get(url + "/health", timeout=2).status_code == 200

    replica.kill()
    with pytest.raises(requests.ConnectionError):
        requests.get(url + "/health", timeout=1)
    replica.restart()
    assert replica.wait_ready(timeout=5)
    assert requests.get(url + "/health", timeout=2).status_code == 200


def test_it_observes_the_first_token_when_it_comes_and_leaves_an_abort_uncounted_like_vllm(small_profile) -> None:
    """vLLM observes the time to first token as the token comes out (a long answer's TTFT is on /metrics while it
    still decodes), and an aborted request is in none of the per-request metrics (vLLM issues 31503, 55634)."""
    from sandbox.engine import Engine
    from sandbox.vllm_metrics import FINISHED_REASONS, VllmMetrics

    clock = ManualClock()
    metrics = VllmMetrics(MODEL, 2048, small_profile.kv_cache_tokens)
    engine = Engine(small_profile, metrics, clock)
    histograms = metrics.histograms
    request = engine.submit(prompt_tokens=10, max_tokens=1000)  # 20 s of decoding at 20 ms a token
    clock.t = 1.0
    engine.advance_to(1.0)

    assert request.first_token is not None and request.finished is None
    assert histograms["vllm:time_to_first_token_seconds"].count == 1
    assert histograms["vllm:time_to_first_token_seconds"].total == pytest.approx(request.first_token)
    assert histograms["vllm:e2e_request_latency_seconds"].count == 0

    engine.abort(request)  # the client hung up

    assert request.finished_reason == "abort"
    assert {reason: metrics.success[reason] for reason in FINISHED_REASONS} == dict.fromkeys(FINISHED_REASONS, 0)
    assert histograms["vllm:e2e_request_latency_seconds"].count == 0
    assert histograms["vllm:request_queue_time_seconds"].count == 0
    assert metrics.prompt_tokens == 10  # the engine's token counters saw it
