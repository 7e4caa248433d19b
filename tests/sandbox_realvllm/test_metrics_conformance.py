"""The exposition comparison, checked against the real vLLM 0.32.0 scrape (no vLLM needed)."""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from sandbox import metrics_conformance as mc
from sandbox import vllm_metrics

SAMPLE = Path(os.environ.get(
    "HEADROOM_VLLM_METRICS_SAMPLE",
    Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "vllm-cpu-metrics-sample.txt",
))

E2E_BOUNDS = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680)


@pytest.fixture(scope="module")
def sections() -> list[str]:
    assert SAMPLE.is_file(), f"real vLLM scrape {SAMPLE} is missing; set HEADROOM_VLLM_METRICS_SAMPLE"
    parts = mc.split_sections(SAMPLE.read_text())
    assert len(parts) == 3  # idle, after load, mid-burst
    return parts


@pytest.fixture(scope="module")
def after_load(sections: list[str]) -> str:
    return sections[1]


def _replace_family(text: str, old: str, new: str) -> str:
    return text.replace(old, new)


def test_it_finds_every_headroom_family_with_its_real_type(sections: list[str]) -> None:
    for section in sections:
        assert mc.check_expected_types(section) == []
        assert mc.check_parses(section) is None


def test_it_names_counters_without_total_but_keeps_the_type_line_name(after_load: str) -> None:
    families = mc.parse_exposition(after_load)
    prompt = families["vllm:prompt_tokens"]
    assert prompt.type == "counter"
    assert prompt.type_line_name == "vllm:prompt_tokens_total"
    assert prompt.sample_suffixes == {"_total"}
    assert mc.lookup(families, "vllm:prompt_tokens_total") is prompt
    # prometheus_client writes _created as a gauge family of its own
    assert families["vllm:prompt_tokens_created"].type == "gauge"


def test_it_reads_labels_and_buckets(after_load: str) -> None:
    families = mc.parse_exposition(after_load)
    e2e = families["vllm:e2e_request_latency_seconds"]
    assert e2e.type == "histogram"
    assert e2e.label_names == {"engine", "model_name"}
    assert e2e.buckets == (*map(float, E2E_BOUNDS), math.inf)
    assert e2e.sample_suffixes == {"_bucket", "_sum", "_count"}
    success = families["vllm:request_success"]
    assert success.label_names == {"engine", "model_name", "finished_reason"}
    assert success.label_values["finished_reason"] == {"stop", "length", "abort", "error", "repetition"}
    assert families["vllm:engine_sleep_state"].label_values["sleep_state"] == {
        "awake", "weights_offloaded", "discard_all"}


def test_it_finds_no_difference_between_scrapes_of_one_server(sections: list[str]) -> None:
    idle, after_load, burst = sections
    assert mc.compare_expositions(idle, after_load, enum_labels=mc.ENUM_LABELS) == []
    assert mc.compare_expositions(after_load, burst, enum_labels=mc.ENUM_LABELS) == []


def test_it_reports_a_missing_family(after_load: str) -> None:
    lines = [line for line in after_load.splitlines() if "vllm:kv_cache_usage_perc" not in line]
    diffs = mc.compare_expositions(after_load, "\n".join(lines) + "\n")
    assert diffs == [mc.Difference("vllm:kv_cache_usage_perc", "presence", "present", "absent")]


def test_it_reports_a_changed_type(after_load: str) -> None:
    candidate = after_load.replace("# TYPE vllm:num_requests_waiting gauge",
                                   "# TYPE vllm:num_requests_waiting untyped")
    diffs = mc.compare_expositions(after_load, candidate)
    assert [(d.family, d.aspect, d.reference, d.candidate) for d in diffs] == [
        ("vllm:num_requests_waiting", "type", "gauge", "untyped")]


def test_it_reports_a_counter_declared_without_total(after_load: str) -> None:
    # The OpenMetrics spelling: the samples still end in _total but the TYPE line does not.
    candidate = after_load.replace("# TYPE vllm:generation_tokens_total counter",
                                   "# TYPE vllm:generation_tokens counter")
    diffs = mc.compare_expositions(after_load, candidate)
    assert [(d.family, d.aspect) for d in diffs] == [("vllm:generation_tokens", "type_line_name")]


def test_it_reports_a_counter_sample_without_total(after_load: str) -> None:
    candidate = after_load.replace("vllm:num_preemptions_total", "vllm:num_preemptions")
    diffs = mc.compare_expositions(after_load, candidate)
    assert ("vllm:num_preemptions", "type_line_name") in [(d.family, d.aspect) for d in diffs]


def test_it_reports_label_names_but_not_label_values(after_load: str) -> None:
    other_model = after_load.replace('model_name="tiny-llama"', 'model_name="llama-70b"')
    assert mc.compare_expositions(after_load, other_model) == []
    renamed = after_load.replace('vllm:num_requests_running{engine="0",',
                                 'vllm:num_requests_running{engine_index="0",')
    diffs = mc.compare_expositions(after_load, renamed)
    assert len(diffs) == 1
    assert (diffs[0].family, diffs[0].aspect) == ("vllm:num_requests_running", "labels")
    assert "missing {engine}" in diffs[0].candidate and "extra {engine_index}" in diffs[0].candidate


def test_it_compares_enumerated_label_values_on_request(after_load: str) -> None:
    lines = [line for line in after_load.splitlines() if 'sleep_state="discard_all"' not in line]
    candidate = "\n".join(lines) + "\n"
    assert mc.compare_expositions(after_load, candidate) == []
    diffs = mc.compare_expositions(after_load, candidate, enum_labels=["sleep_state"])
    assert [(d.family, d.aspect) for d in diffs] == [("vllm:engine_sleep_state", "label_values")]


def test_it_reports_different_bucket_boundaries(after_load: str) -> None:
    lines = [line for line in after_load.splitlines()
             if not line.startswith("vllm:time_to_first_token_seconds_bucket{") or 'le="2560.0"' not in line]
    candidate = "\n".join(lines).replace('vllm:time_to_first_token_seconds_bucket{engine="0",le="640.0"',
                                         'vllm:time_to_first_token_seconds_bucket{engine="0",le="600.0"')
    diffs = mc.compare_expositions(after_load, candidate + "\n")
    assert len(diffs) == 1
    diff = diffs[0]
    assert (diff.family, diff.aspect) == ("vllm:time_to_first_token_seconds", "buckets")
    assert "missing [640, 2560]" in diff.candidate and "extra [600]" in diff.candidate


def test_it_reports_an_exposition_that_does_not_parse(after_load: str) -> None:
    diffs = mc.compare_expositions(after_load, after_load + "vllm:broken{engine=\"0\" 1\n")
    assert diffs and diffs[0].family == "*" and diffs[0].aspect == "parse"


def test_it_parses_escaped_label_values() -> None:
    text = ('# TYPE vllm:x gauge\n'
            'vllm:x{a="say \\"hi\\", ok",b="back\\\\slash"} 1.0\n')
    family = mc.parse_exposition(text)["vllm:x"]
    assert family.label_values == {"a": {'say "hi", ok'}, "b": {"back\\slash"}}


def test_the_emulator_renders_the_families_headroom_reads_like_real_vllm(after_load: str) -> None:
    """The sandbox's exposition writer against the real scrape, without starting anything."""
    metrics = vllm_metrics.VllmMetrics("tiny-llama", 2048, 10_000)
    metrics.set_load(running=3, waiting=2, kv_tokens=500)
    metrics.record_step(40, 10, 5, 0.02, 5)
    metrics.record_finished(vllm_metrics.FinishedRequest(
        prompt_tokens=10, generation_tokens=16, max_tokens=16, finished_reason="length",
        queue_s=0.1, prefill_s=0.05, decode_s=0.3, e2e_s=0.45))
    diffs = mc.compare_expositions(after_load, metrics.render(), enum_labels=mc.ENUM_LABELS)
    assert diffs == [], mc.format_differences(diffs)
