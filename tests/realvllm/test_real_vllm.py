"""A real vLLM on the CPU, really checked: its API, and that the emulator's /metrics matches it.

One real vLLM 0.32.0 server (tiny random-weight Llama, `--max-num-seqs 8` so queues form) and one
emulated replica run for the whole session. The API tests run against both; then the same load
goes through both and their expositions are compared for every family Headroom reads; last, a real
Prometheus scrapes both and Headroom's PromQL must answer for each.
"""
from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from sandbox import metrics_conformance as mc
from sandbox.realvllm import MAX_MODEL_LEN, SERVED_MODEL_NAME
from sandbox.replica import wait_until
from scaling.drivers.prometheus import PrometheusConfig, PrometheusSignalSource
from scaling.drivers.signals import PoolSelector
from scaling.engine.signals import UNKNOWN, work_share

pytestmark = pytest.mark.real_vllm

TIMEOUT = 120
SERVERS = ["real", "emulator"]
PROMPT = "def fibonacci(n):\n    return"

SAMPLE = Path(os.environ.get(
    "HEADROOM_VLLM_METRICS_SAMPLE",
    Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "vllm-cpu-metrics-sample.txt",
))

QUEUE_DEPTH = 'sum by (model_name) (vllm:num_requests_waiting)'
E2E_P95 = ('histogram_quantile(0.95, sum by (le, model_name) '
           '(rate(vllm:e2e_request_latency_seconds_bucket[1m])))')


@pytest.fixture(scope="session")
def models(emulated_replica) -> dict[str, str]:
    return {"real": SERVED_MODEL_NAME, "emulator": emulated_replica.model_name}


@pytest.fixture(scope="session", params=SERVERS)
def server(request: pytest.FixtureRequest, models: dict[str, str]) -> tuple[str, str, str]:
    """(kind, base URL, model) for the real server and for the emulated replica in turn."""
    fixture = "real_vllm_url" if request.param == "real" else "emulator_url"
    return request.param, request.getfixturevalue(fixture), models[request.param]


def _post(url: str, body: dict, **kwargs) -> requests.Response:
    try:
        response = requests.post(url, json=body, timeout=TIMEOUT, **kwargs)
    except requests.ConnectionError as exc:
        # Real vLLM (uvicorn, listen backlog 2048) takes a burst of 30 connections in its stride.
        pytest.fail(f"{url}: the connection failed under concurrent load: {exc}")
    assert response.status_code == 200, f"{url}: {response.status_code} {response.text[:500]}"
    return response


def _complete(base: str, model: str, max_tokens: int, *, stream: bool = False, chat: bool = False) -> dict:
    """One generation; returns what the client saw (tokens by usage, chunks, finish reason)."""
    body: dict = {"model": model, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.8}
    if chat:
        body["messages"] = [{"role": "user", "content": "Write a loop in Python."}]
    else:
        body["prompt"] = PROMPT
    path = "/v1/chat/completions" if chat else "/v1/completions"
    if not stream:
        data = _post(base + path, body).json()
        choice = data["choices"][0]
        if chat:
            assert choice["message"]["role"] == "assistant"
            assert isinstance(choice["message"]["content"], str)
        else:
            assert isinstance(choice["text"], str)
        return {"tokens": data["usage"]["completion_tokens"], "finish_reason": choice["finish_reason"],
                "model": data["model"], "chunks": 0}
    body.update(stream=True, stream_options={"include_usage": True})
    response = _post(base + path, body, stream=True)
    assert response.headers["content-type"].startswith("text/event-stream")
    chunks, usage, finish, done, streamed_model = 0, None, None, False, None
    for raw in response.iter_lines():
        line = raw.decode()
        if not line:
            continue
        assert line.startswith("data: "), line
        payload = line[len("data: "):]
        if payload == "[DONE]":
            done = True
            break
        event = json.loads(payload)
        streamed_model = event["model"]
        if event.get("usage") and not event["choices"]:
            usage = event["usage"]
            continue
        chunks += 1
        choice = event["choices"][0]
        finish = choice.get("finish_reason") or finish
    assert done, "the stream did not end with [DONE]"
    assert usage is not None, "no usage chunk although include_usage was asked"
    return {"tokens": usage["completion_tokens"], "finish_reason": finish, "model": streamed_model,
            "chunks": chunks}


def _metrics(base: str) -> str:
    response = requests.get(base + "/metrics", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def _value(text: str, sample: str, **labels: str) -> float:
    """Sum of the samples named `sample` whose labels include `labels`."""
    values = [value for name, got, value in mc.iter_samples(text)
              if name == sample and all(got.get(k) == v for k, v in labels.items())]
    assert values, f"no sample {sample}{labels}"
    return sum(values)


# --------------------------------------------------------------------------------- API

def test_it_answers_health_version_and_models(server: tuple[str, str, str]) -> None:
    _, base, model = server
    assert requests.get(base + "/health", timeout=10).status_code == 200
    assert requests.get(base + "/version", timeout=10).json()["version"].startswith("0.32")
    models = requests.get(base + "/v1/models", timeout=10).json()
    assert models["object"] == "list"
    card = models["data"][0]
    assert card["id"] == model
    assert card["max_model_len"] == MAX_MODEL_LEN


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_it_generates_exactly_max_tokens(server: tuple[str, str, str], chat: bool, stream: bool) -> None:
    _, base, model = server
    seen = _complete(base, model, 12, stream=stream, chat=chat)
    assert seen["tokens"] == 12
    assert seen["finish_reason"] == "length"
    assert seen["model"] == model
    if stream:
        assert seen["chunks"] >= 2


def test_it_rejects_an_unknown_model(server: tuple[str, str, str]) -> None:
    _, base, _ = server
    response = requests.post(base + "/v1/completions", json={"model": "no-such-model", "prompt": "x",
                                                             "max_tokens": 4}, timeout=TIMEOUT)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == 404


# ------------------------------------------------------------------------------- load

def _burst(base: str, model: str, count: int = 30, seed: int = 7) -> dict:
    """`count` concurrent generations (every third streamed, every fifth chat) while /metrics is
    polled; returns the client's view and the deepest queue seen."""
    rng = random.Random(seed)
    plan = [(rng.choice((16, 32, 48, 64, 96)), i % 3 == 0, i % 5 == 0) for i in range(count)]
    before = _metrics(base)
    deepest = {"waiting": 0.0, "running": 0.0}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            text = _metrics(base)
            deepest["waiting"] = max(deepest["waiting"], _value(text, "vllm:num_requests_waiting"))
            deepest["running"] = max(deepest["running"], _value(text, "vllm:num_requests_running"))
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=count) as pool:
            seen = list(pool.map(lambda p: _complete(base, model, p[0], stream=p[1], chat=p[2]), plan))
    finally:
        stop.set()
        poller.join(10)
    wall = time.monotonic() - started
    return {"plan": plan, "seen": seen, "before": before, "after": _metrics(base), "wall_s": wall, **deepest}


@pytest.fixture(scope="session")
def bursts(real_vllm_url: str, emulator_url: str, models: dict[str, str],
           real_vllm_timings: dict) -> dict[str, dict]:
    result = {"real": _burst(real_vllm_url, models["real"]),
              "emulator": _burst(emulator_url, models["emulator"])}
    for kind, burst in result.items():
        real_vllm_timings[f"burst_{kind}"] = {
            "requests": len(burst["plan"]), "tokens": sum(p[0] for p in burst["plan"]),
            "wall_s": round(burst["wall_s"], 2), "max_running": burst["running"],
            "max_waiting": burst["waiting"]}
    return result


@pytest.mark.parametrize("kind", SERVERS)
def test_a_burst_of_30_is_served_and_counted(bursts: dict[str, dict], kind: str) -> None:
    burst = bursts[kind]
    asked = [p[0] for p in burst["plan"]]
    assert [s["tokens"] for s in burst["seen"]] == asked
    assert all(s["finish_reason"] == "length" for s in burst["seen"])
    before, after = burst["before"], burst["after"]

    def delta(sample: str, **labels: str) -> float:
        return _value(after, sample, **labels) - _value(before, sample, **labels)

    assert delta("vllm:generation_tokens_total") == sum(asked)
    assert delta("vllm:request_success_total", finished_reason="length") == len(asked)
    assert delta("vllm:e2e_request_latency_seconds_count") == len(asked)
    assert delta("vllm:time_to_first_token_seconds_count") == len(asked)
    assert delta("vllm:request_queue_time_seconds_count") == len(asked)
    assert delta("vllm:prompt_tokens_total") > 0
    assert delta("vllm:inter_token_latency_seconds_count") > 0
    assert _value(after, "vllm:num_requests_running") == 0
    assert _value(after, "vllm:num_requests_waiting") == 0


def test_the_real_server_queues_beyond_max_num_seqs(bursts: dict[str, dict]) -> None:
    real = bursts["real"]
    assert real["running"] <= 8
    # The polled gauge can miss a queue that lasts about a second on a loaded box, so the server's own
    # record counts too: 22 of 30 requests waiting for a slot add up to several times the burst's wall
    # time in queue, where requests admitted at once spend milliseconds each.
    queued_s = (_value(real["after"], "vllm:request_queue_time_seconds_sum")
                - _value(real["before"], "vllm:request_queue_time_seconds_sum"))
    assert real["waiting"] > 0 or queued_s >= real["wall_s"], (
        f"no queue seen during a burst of 30 with --max-num-seqs 8: waiting gauge {real['waiting']}, "
        f"{queued_s:.2f} s in queue over {real['wall_s']:.2f} s")


@pytest.mark.parametrize("kind", SERVERS)
def test_a_request_its_client_gave_up_on_is_only_in_the_apis_answers(
        kind: str, real_vllm_url: str, emulator_url: str, models: dict[str, str]) -> None:
    """What the arrival rate stands on (docs/engine.md, "request rate"): vLLM leaves an aborted request out of
    `request_success_total` and the latency histograms (vLLM issues 31503, 55634), and the API's request counter
    has it. The emulator must do the same, or the sandbox would hide the undercount."""
    base = real_vllm_url if kind == "real" else emulator_url
    before = _metrics(base)
    abandoned = 3
    for _ in range(abandoned):
        body = {"model": models[kind], "prompt": PROMPT, "max_tokens": 1000, "ignore_eos": True, "stream": True}
        with requests.post(base + "/v1/completions", json=body, stream=True, timeout=60) as response:
            assert response.status_code == 200
            next(response.iter_lines())  # the first chunk, then the client hangs up
    assert wait_until(lambda: _value(_metrics(base), "vllm:num_requests_running") == 0
                      and _value(_metrics(base), "vllm:num_requests_waiting") == 0, 30, interval=0.25)
    after = _metrics(base)

    def delta(sample: str, **labels: str) -> float:
        def value(text: str) -> float:  # the API's series are born with its first answer
            return sum(v for name, got, v in mc.iter_samples(text)
                       if name == sample and all(got.get(k) == w for k, w in labels.items()))
        return value(after) - value(before)

    assert delta("vllm:request_success_total") == 0
    assert delta("vllm:e2e_request_latency_seconds_count") == 0
    assert delta("http_requests_total", handler="/v1/completions") == abandoned
    assert delta("vllm:prompt_tokens_total") > 0


# ----------------------------------------------------------------------- conformance

def test_the_emulator_exposes_the_families_headroom_reads_like_real_vllm(
        bursts: dict[str, dict], report_dir: Path) -> None:
    real, emulated = bursts["real"]["after"], bursts["emulator"]["after"]
    (report_dir / "real-metrics.txt").write_text(real)
    (report_dir / "emulator-metrics.txt").write_text(emulated)
    all_vllm = sorted(name for name in mc.parse_exposition(real)
                      if name.startswith("vllm:") and not name.endswith("_created"))
    wider = mc.compare_expositions(real, emulated, families=all_vllm, enum_labels=mc.ENUM_LABELS)
    (report_dir / "conformance-all-vllm-families.txt").write_text(mc.format_differences(wider) + "\n")
    diffs = mc.compare_expositions(real, emulated, enum_labels=mc.ENUM_LABELS)
    assert diffs == [], "emulator /metrics differs from real vLLM:\n" + mc.format_differences(diffs)


def test_the_reference_sample_still_describes_real_vllm(bursts: dict[str, dict]) -> None:
    """The fast tier compares against the stored scrape; it must stay true to the real server."""
    stored = mc.split_sections(SAMPLE.read_text())[1]
    diffs = mc.compare_expositions(stored, bursts["real"]["after"], enum_labels=mc.ENUM_LABELS)
    assert diffs == [], mc.format_differences(diffs)


# ------------------------------------------------------------------- sleep (dev mode)

def _sleep_state(base: str) -> dict[str, float]:
    text = _metrics(base)
    return {labels["sleep_state"]: value for name, labels, value in mc.iter_samples(text)
            if name == "vllm:engine_sleep_state"}


@pytest.mark.parametrize("level, state", [(1, "weights_offloaded"), (2, "discard_all")])
def test_sleep_and_wake_up_switch_the_state_and_its_metric(
        server: tuple[str, str, str], level: int, state: str) -> None:
    """On the CPU real sleep frees no memory, but protocol, state and metric are vLLM's own."""
    _, base, _ = server
    asleep = requests.post(f"{base}/sleep?level={level}", timeout=30)
    assert asleep.status_code == 200
    assert asleep.json() == {"status": "sleeping", "level": level}
    try:
        assert requests.get(base + "/is_sleeping", timeout=10).json() == {"is_sleeping": True}
        assert requests.get(base + "/health", timeout=10).status_code == 200  # health ignores sleep
        assert _sleep_state(base) == {"awake": 0.0, "weights_offloaded": float(level == 1),
                                      "discard_all": float(level == 2)}
    finally:
        awake = requests.post(base + "/wake_up", timeout=30)
    assert awake.status_code == 200
    assert awake.json()["status"] == "awake"
    assert requests.get(base + "/is_sleeping", timeout=10).json() == {"is_sleeping": False}
    assert _sleep_state(base) == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}


# ------------------------------------------------------------------------ Prometheus

def _address(base: str) -> str:
    return base.removeprefix("http://")


def _by_model(result: list[dict]) -> dict[str, float]:
    return {series["metric"].get("model_name", ""): float(series["value"][1]) for series in result}


def test_headroom_promql_answers_for_real_and_emulated_alike(
        real_vllm_url: str, emulator_url: str, models: dict[str, str], real_vllm_timings: dict) -> None:
    """A real Prometheus (the sandbox's launcher) scrapes both; Headroom's queries see both."""
    from sandbox.prometheus import PrometheusLauncher, ScrapeTarget

    real, emulated = _address(real_vllm_url), _address(emulator_url)
    with PrometheusLauncher(scrape_interval_s=1.0) as prometheus:
        prometheus.set_targets([
            ScrapeTarget(real, {"namespace": "realvllm", "pod": "real-7d9f8c6b5-x2k4p"}),
            ScrapeTarget(emulated, {"namespace": "realvllm", "pod": "emulator-7d9f8c6b5-q8z2m"}),
        ])
        prometheus.wait_for_up([real, emulated], timeout=60)
        # Traffic while scraped, so that rate() over the histogram buckets has increases to see: each wave
        # is scraped (Prometheus has its completions) before the next one starts.
        def scraped() -> dict[str, float]:
            return _by_model(prometheus.query("sum by (model_name) (vllm:request_success_total)"))

        before = scraped()  # earlier tests of the session served requests too
        for wave in range(1, 4):
            with ThreadPoolExecutor(max_workers=16) as pool:
                list(pool.map(lambda args: _complete(*args), [(real_vllm_url, models["real"], 16)] * 8
                              + [(emulator_url, models["emulator"], 16)] * 8))
            assert wait_until(lambda: all(scraped().get(m, 0) >= before.get(m, 0) + 8 * wave  # noqa: B023
                                          for m in models.values()), 30), (before, scraped())
        wanted = set(models.values())
        deadline = time.monotonic() + 30
        while True:
            waiting = _by_model(prometheus.query(QUEUE_DEPTH))
            p95 = _by_model(prometheus.query(E2E_P95))
            if (wanted <= waiting.keys() and wanted <= p95.keys()
                    and all(math.isfinite(p95[m]) for m in wanted)) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert wanted <= waiting.keys(), f"{QUEUE_DEPTH} answered {waiting}"
        assert all(waiting[m] >= 0 for m in wanted)
        assert wanted <= p95.keys(), f"{E2E_P95} answered {p95}"
        assert all(math.isfinite(p95[m]) and p95[m] > 0 for m in wanted), p95
        real_vllm_timings["promql"] = {"queue_depth": waiting, "e2e_p95_s": p95}

        # The work share through the driver, from a real vLLM's series: known (the traffic is over, so 0:
        # nothing running, no prompt in the last scrape interval), never unknown for want of a series.
        source = PrometheusSignalSource(PrometheusConfig(prometheus.url, rate_window="30s"))
        read = source.read([PoolSelector.of_deployment(kind, "realvllm", kind) for kind in ("real", "emulator")])
        for kind in ("real", "emulator"):
            signals = read[kind]
            assert signals.prompt_tokens_tick_rate.is_known and signals.prompt_tokens_rate.value > 0, (kind, signals)
            share = work_share(signals, batch_slots=8, prefill_tokens_per_s=1000.0)  # the server's --max-num-seqs
            assert share.is_known and 0.0 <= share.value <= 1.0, (kind, share, signals)

        # ...and under load it rises: bursts of 16 on the real server (8 run at once) until a read sees them.
        busy = threading.Event()

        def load() -> None:
            while not busy.is_set():
                with ThreadPoolExecutor(max_workers=16) as pool:
                    list(pool.map(lambda _: _complete(real_vllm_url, models["real"], 64), range(16)))

        def share_under_load() -> float:
            return work_share(source.read([PoolSelector.of_deployment("real", "realvllm", "real")])["real"],
                              batch_slots=8, prefill_tokens_per_s=None).known

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        try:
            assert wait_until(lambda: share_under_load() not in (0.0, UNKNOWN), 30, interval=0.25)
        finally:
            busy.set()
            loader.join(60)

        # What Prometheus itself understood of each family (its metadata) must agree too.
        metadata = requests.get(prometheus.url + "/api/v1/targets/metadata",
                                params={"match_target": '{job="vllm"}'}, timeout=10).json()["data"]
    types: dict[str, dict[str, str]] = {}
    for entry in metadata:
        types.setdefault(entry["metric"], {})[entry["target"]["instance"]] = entry["type"]
    for family, kind in mc.HEADROOM_FAMILIES.items():
        name = family + "_total" if kind == "counter" else family
        assert types.get(name) == {real: kind, emulated: kind}, f"{name}: metadata {types.get(name)}"
