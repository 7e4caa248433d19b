"""vLLM's Prometheus metrics, kept and rendered by hand.

`render_exposition()` is the one place that writes the emulator's `/metrics` text. It writes the
Prometheus text format 0.0.4 itself, the way vLLM's own prometheus_client output looks (counters
as `_total` plus `_created`, histograms as `_bucket{le}`/`_count`/`_sum` plus `_created`), because
prometheus_client >= 0.23 may escape `vllm:x` into `vllm_x` when Prometheus 2.x negotiates
UTF-8 names, and Headroom's queries use the colon names.

Names, HELP texts, label sets and buckets follow ../shared/reference/vllm-interface.md and the real
vLLM 0.32 scrape next to it.
"""
from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
                           4096.0, 8192.0, 16384.0)
PARAMS_N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
PREEMPTION_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)

HTTP_DURATION_BUCKETS = (0.1, 0.5, 1.0)
HTTP_HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
                      5.0, 7.5, 10.0, 30.0, 60.0)

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")


def token_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series capped at max_model_len (build_1_2_5_buckets)."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(buckets)
            buckets.append(float(value))
        exponent += 1


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; last is +Inf
    total: float = 0.0
    count: int = 0
    created: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += times
        self.total += value * times
        self.count += times


@dataclass
class HttpMetrics:
    """The HTTP middleware's series; statuses are grouped by class ("2xx") as vLLM's are."""

    requests: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (handler, method, status)
    durations: dict[tuple[str, str], Histogram] = field(default_factory=dict)  # (handler, method)
    highr: Histogram = field(default_factory=lambda: Histogram(HTTP_HIGHR_BUCKETS))
    request_sizes: dict[str, list[float]] = field(default_factory=dict)  # handler -> [count, sum]
    response_sizes: dict[str, list[float]] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    def record(self, handler: str, method: str, status: int, duration_s: float, request_bytes: int,
               response_bytes: int) -> None:
        key = (handler, method, f"{status // 100}xx")
        self.requests[key] = self.requests.get(key, 0) + 1
        self.durations.setdefault((handler, method), Histogram(HTTP_DURATION_BUCKETS)).observe(duration_s)
        self.highr.observe(duration_s)
        for sizes, size in ((self.request_sizes, request_bytes), (self.response_sizes, response_bytes)):
            entry = sizes.setdefault(handler, [0, 0])
            entry[0] += 1
            entry[1] += size


@dataclass(frozen=True)
class HistogramSpec:
    name: str
    help: str
    buckets: tuple[float, ...]


# Histograms in vLLM's registration order. Token buckets are filled in per replica.
def histogram_specs(max_model_len: int) -> list[HistogramSpec]:
    tokens = token_buckets(max_model_len)
    return [
        HistogramSpec("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens),
        HistogramSpec("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens),
        HistogramSpec("vllm:iteration_tokens_total",
                      "Histogram of number of tokens per engine_step.", ITERATION_TOKEN_BUCKETS),
        HistogramSpec("vllm:request_max_num_generation_tokens",
                      "Histogram of maximum number of requested generation tokens.", tokens),
        HistogramSpec("vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS),
        HistogramSpec("vllm:request_params_max_tokens",
                      "Histogram of the max_tokens request parameter.", tokens),
        HistogramSpec("vllm:time_to_first_token_seconds",
                      "Histogram of time to first token in seconds.", TTFT_BUCKETS),
        HistogramSpec("vllm:inter_token_latency_seconds",
                      "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
        HistogramSpec("vllm:request_time_per_output_token_seconds",
                      "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS),
        HistogramSpec("vllm:e2e_request_latency_seconds",
                      "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS),
        HistogramSpec("vllm:request_queue_time_seconds",
                      "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS),
        HistogramSpec("vllm:request_inference_time_seconds",
                      "Histogram of time spent in RUNNING phase for request.", REQUEST_LATENCY_BUCKETS),
        HistogramSpec("vllm:request_prefill_time_seconds",
                      "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS),
        HistogramSpec("vllm:request_decode_time_seconds",
                      "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS),
        HistogramSpec("vllm:request_num_preemptions",
                      "Histogram of the number of times a request was preempted.", PREEMPTION_BUCKETS),
        HistogramSpec("vllm:request_prefill_kv_computed_tokens",
                      "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tokens),
    ]


@dataclass(frozen=True)
class FinishedRequest:
    """What the engine reports when a request leaves it; all times in model seconds."""

    prompt_tokens: int
    generation_tokens: int
    max_tokens: int
    finished_reason: str
    queue_s: float
    prefill_s: float
    decode_s: float
    e2e_s: float

    @property
    def inference_s(self) -> float:
        return self.prefill_s + self.decode_s


class VllmMetrics:
    """One replica's vLLM metric values. Thread-safe; the engine writes, /metrics reads."""

    def __init__(self, model_name: str, max_model_len: int, kv_cache_tokens: int) -> None:
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.kv_cache_tokens = kv_cache_tokens
        self._lock = threading.Lock()
        self._created = time.time()
        self.specs = histogram_specs(max_model_len)
        self.histograms = {spec.name: Histogram(spec.buckets) for spec in self.specs}
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0
        self.sleep_level = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_cache_queries = 0
        self.success = {reason: 0 for reason in FINISHED_REASONS}
        self.admission_rejections = {"max_num_queued_reqs": 0, "max_num_queued_tokens": 0}
        self.http = HttpMetrics()

    def set_load(self, running: int, waiting: int, kv_tokens: int) -> None:
        with self._lock:
            self.running = running
            self.waiting = waiting
            self.kv_cache_usage = min(1.0, kv_tokens / self.kv_cache_tokens) if self.kv_cache_tokens else 0.0

    def set_sleep_level(self, level: int) -> None:
        with self._lock:
            self.sleep_level = level

    def record_step(self, step_tokens: int, new_prompt_tokens: int, generated: int,
                    inter_token_s: float, decoding_requests: int, steps: int = 1) -> None:
        """`steps` engine steps alike: tokens scheduled per step, prompt tokens prefilled, tokens
        generated in all, and the inter-token latency each decoding request saw per step."""
        with self._lock:
            self.histograms["vllm:iteration_tokens_total"].observe(step_tokens, steps)
            self.prompt_tokens += new_prompt_tokens
            self.prefix_cache_queries += new_prompt_tokens
            self.generation_tokens += generated
            if decoding_requests:
                self.histograms["vllm:inter_token_latency_seconds"].observe(inter_token_s, decoding_requests * steps)

    def record_finished(self, done: FinishedRequest) -> None:
        with self._lock:
            self.success[done.finished_reason] += 1
            observe = {
                "vllm:request_prompt_tokens": done.prompt_tokens,
                "vllm:request_generation_tokens": done.generation_tokens,
                "vllm:request_max_num_generation_tokens": done.max_tokens,
                "vllm:request_params_n": 1,
                "vllm:request_params_max_tokens": done.max_tokens,
                "vllm:e2e_request_latency_seconds": done.e2e_s,
                "vllm:request_queue_time_seconds": done.queue_s,
                "vllm:request_inference_time_seconds": done.inference_s,
                "vllm:request_prefill_time_seconds": done.prefill_s,
                "vllm:request_decode_time_seconds": done.decode_s,
                "vllm:request_num_preemptions": 0,
                "vllm:request_prefill_kv_computed_tokens": done.prompt_tokens,
            }
            if done.generation_tokens > 1:
                observe["vllm:request_time_per_output_token_seconds"] = (
                    done.decode_s / (done.generation_tokens - 1))
            for name, value in observe.items():
                self.histograms[name].observe(value)

    def record_first_token(self, ttft_s: float) -> None:
        with self._lock:
            self.histograms["vllm:time_to_first_token_seconds"].observe(ttft_s)

    def record_rejection(self, reason: str) -> None:
        with self._lock:
            self.admission_rejections[reason] += 1

    def record_http(self, handler: str, method: str, status: int, duration_s: float,
                    request_bytes: int, response_bytes: int) -> None:
        with self._lock:
            self.http.record(handler, method, status, duration_s, request_bytes, response_bytes)

    def render(self) -> str:
        with self._lock:
            return render_exposition(self)


def _format_value(value: float) -> str:
    """Format like prometheus_client (Go style): 0.0, 12.5, 1.7960119862430046e+09, +Inf."""
    value = float(value)
    if value == float("inf"):
        return "+Inf"
    text = repr(value)
    integer_digits = text.find(".")
    if value > 0 and integer_digits > 6 and "e" not in text:
        digits = (text[:integer_digits] + text[integer_digits + 1:]).rstrip("0")
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{mantissa}e+{integer_digits - 1:02d}"
    return text


def _labels(pairs: dict[str, str]) -> str:
    # prometheus_client sorts nothing; vLLM's output is alphabetical because of how labelnames are
    # built. Alphabetical order is also what Prometheus stores, so the text is easy to diff.
    inner = ",".join(f'{key}="{pairs[key]}"' for key in sorted(pairs))
    return "{" + inner + "}"


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        self.lines.append(f"{name}{_labels(labels)} {_format_value(value)}")

    def gauge(self, name: str, help_text: str, series: list[tuple[dict[str, str], float]]) -> None:
        self.family(name, "gauge", help_text)
        for labels, value in series:
            self.sample(name, labels, value)

    def counter(self, name: str, help_text: str, series: list[tuple[dict[str, str], float]],
                created: float) -> None:
        self.family(f"{name}_total", "counter", help_text)
        for labels, value in series:
            self.sample(f"{name}_total", labels, value)
        self.family(f"{name}_created", "gauge", help_text)
        for labels, _ in series:
            self.sample(f"{name}_created", labels, created)

    def buckets(self, spec: HistogramSpec, labels: dict[str, str], hist: Histogram) -> None:
        cumulative = 0
        for bound, count in zip((*spec.buckets, float("inf")), hist.counts):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            self.sample(f"{spec.name}_bucket", {**labels, "le": le}, cumulative)
        self.sample(f"{spec.name}_count", labels, hist.count)
        self.sample(f"{spec.name}_sum", labels, hist.total)

    def histogram(self, spec: HistogramSpec, labels: dict[str, str], hist: Histogram) -> None:
        self.family(spec.name, "histogram", spec.help)
        self.buckets(spec, labels, hist)
        self.family(f"{spec.name}_created", "gauge", spec.help)
        self.sample(f"{spec.name}_created", labels, hist.created)


def render_exposition(metrics: VllmMetrics) -> str:
    """The replica's whole /metrics body, in vLLM's family order (caller holds the lock)."""
    base = {"engine": "0", "model_name": metrics.model_name}
    created = metrics._created
    out = _Writer()
    for suffix, what in (("flops", "floating point operations"), ("read_bytes", "bytes read from memory"),
                         ("write_bytes", "bytes written to memory")):
        out.counter(f"vllm:estimated_{suffix}_per_gpu",
                    f"Estimated number of {what} per GPU (for Model Flops Utilization calculations).",
                    [(base, 0.0)], created)
    out.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
              [(base, metrics.running)])
    out.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
              [(base, metrics.waiting)])
    out.gauge("vllm:num_requests_waiting_by_reason",
              "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
              "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
              "status). Sum of all reasons equals vllm:num_requests_waiting.",
              [({**base, "reason": "capacity"}, metrics.waiting), ({**base, "reason": "deferred"}, 0)])
    out.gauge("vllm:engine_sleep_state",
              "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
              "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
              [({**base, "sleep_state": state}, 1.0 if level == metrics.sleep_level else 0.0)
               for level, state in enumerate(SLEEP_STATES)])
    out.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
              [(base, metrics.kv_cache_usage)])
    out.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                [(base, metrics.prefix_cache_queries)], created)
    out.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                [(base, 0.0)], created)
    for cache, what, unit in (("external_prefix_cache", "External prefix cache", "KV connector cross-instance "
                               "cache sharing, in terms of number of"),
                              ("mm_cache", "Multi-modal cache", "")):
        for kind, noun in (("queries", "queried"), ("hits", "cached")):
            items = "tokens" if cache == "external_prefix_cache" else "items"
            detail = f" from {unit} {noun} {items}." if unit else f", in terms of number of {noun} {items}."
            out.counter(f"vllm:{cache}_{kind}", f"{what} {kind}{detail}", [(base, 0.0)], created)
    out.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                [(base, 0.0)], created)
    out.counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                [(base, metrics.prompt_tokens)], created)
    out.counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                [({**base, "source": "local_compute"}, metrics.prompt_tokens),
                 ({**base, "source": "local_cache_hit"}, 0.0),
                 ({**base, "source": "external_kv_transfer"}, 0.0)], created)
    out.counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
                [(base, 0.0)], created)
    out.counter("vllm:prompt_tokens_cached_by_source",
                "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
                "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. "
                "Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
                [({**base, "source": source}, 0.0) for source in ("device", "host", "p2p", "disk",
                                                                  "external_unspecified")], created)
    out.counter("vllm:generation_tokens", "Number of generation tokens processed.",
                [(base, metrics.generation_tokens)], created)
    out.counter("vllm:request_success", "Count of successfully processed requests.",
                [({**base, "finished_reason": reason}, count) for reason, count in metrics.success.items()],
                created)
    out.counter("vllm:admission_rejections",
                "Number of admission attempts rejected by a queue limit, by reason.",
                [({"model_name": metrics.model_name, "reason": reason}, count)
                 for reason, count in metrics.admission_rejections.items()], created)
    for spec in metrics.specs:
        out.histogram(spec, base, metrics.histograms[spec.name])
    out.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
              [({"block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "True", "engine": "0",
                 "gpu_memory_utilization": "0.9", "kv_cache_size_tokens": str(metrics.kv_cache_tokens)},
                1.0)])
    _render_http(out, metrics, created)
    return "\n".join(out.lines) + "\n"


def _render_http(out: _Writer, metrics: VllmMetrics, created: float) -> None:
    """The HTTP middleware's families (prometheus-fastapi-instrumentator in real vLLM)."""
    http = metrics.http
    out.counter("http_requests", "Total number of requests by method, status and handler.",
                [({"handler": handler, "method": method, "status": status}, count)
                 for (handler, method, status), count in http.requests.items()], http.created)
    for name, sizes, what in (("http_request_size_bytes", http.request_sizes, "Content length of incoming "
                               "requests by handler. Only value of header is respected. Otherwise ignored. "
                               "No percentile calculated. "),
                              ("http_response_size_bytes", http.response_sizes, "Content length of outgoing "
                               "responses by handler. Only value of header is respected. Otherwise ignored. "
                               "No percentile calculated. ")):
        out.family(name, "summary", what)
        for handler, (count, total) in sizes.items():
            out.sample(f"{name}_count", {"handler": handler}, count)
            out.sample(f"{name}_sum", {"handler": handler}, total)
        out.family(f"{name}_created", "gauge", what)
        for handler in sizes:
            out.sample(f"{name}_created", {"handler": handler}, http.created)
    highr = HistogramSpec("http_request_duration_highr_seconds", "Latency with many buckets but no API "
                          "specific labels. Made for more accurate percentile calculations. ", HTTP_HIGHR_BUCKETS)
    out.histogram(highr, {}, http.highr)
    spec = HistogramSpec("http_request_duration_seconds", "Latency with only few buckets by handler. Made to "
                         "be only used if aggregation by handler is important. ", HTTP_DURATION_BUCKETS)
    out.family(spec.name, "histogram", spec.help)
    for (handler, method), hist in http.durations.items():
        out.buckets(spec, {"handler": handler, "method": method}, hist)
    out.family(f"{spec.name}_created", "gauge", spec.help)
    for handler, method in http.durations:
        out.sample(f"{spec.name}_created", {"handler": handler, "method": method}, http.created)
