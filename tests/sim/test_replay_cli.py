from __future__ import annotations

import json

import pytest

from scaling.sim.replay import main

JSON_KEYS = {
    "policy", "mode", "requests", "served", "rejected", "timed_out", "retries", "slo_attainment", "ttft_ms", "e2e_ms",
    "gpu_hours", "cost_usd", "max_replicas", "mean_ready_replicas", "cold_starts", "wall_s",
}


def test_it_prints_one_json_object(traces_dir, capsys):
    code = main(["--trace", str(traces_dir / "AzureLLMInferenceTrace_code.csv"), "--policy", "keda-queue", "--json",
                 "--warmup-s", "0"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(result) == JSON_KEYS
    assert set(result["ttft_ms"]) == set(result["e2e_ms"]) == {"p50", "p95", "p99"}
    assert result["policy"] == "keda-queue" and result["requests"] == 8819


def test_it_says_in_which_minutes_the_slo_was_missed(traces_dir, capsys):
    # One replica for the code trace's bursts: misses in several minutes, and they add up to the
    # requests the attainment leaves out.
    args = ["--trace", str(traces_dir / "AzureLLMInferenceTrace_code.csv"), "--policy", "static", "--replicas", "1",
            "--misses-by-minute", "--json"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    misses = result["slo_misses_by_minute"]
    assert len(misses) > 3 and all(0 <= int(minute) < 61 and count > 0 for minute, count in misses.items())
    assert sum(misses.values()) == pytest.approx(result["requests"] * (1 - result["slo_attainment"]), abs=1)


def test_it_prints_a_table_and_applies_transforms(traces_dir, capsys):
    args = ["--trace", str(traces_dir / "AzureLLMInferenceTrace_conv.csv"), "--policy", "static", "--replicas", "3",
            "--rate-scale", "0.5", "--surge", "4:5", "--mode", "fluid", "--profile", "llama-3.2-1b-l4"]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "slo_attainment" in table and "fluid" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "/no/such/file.csv", "--policy", "static"], "no such file"),
        (["--trace", "{conv}", "--policy", "static", "--profile", "gpt-9"], "invalid choice: 'gpt-9'"),
        (["--trace", "{conv}", "--policy", "static", "--surge", "3"], "--surge expects K:MINUTES"),
        (["--trace", "{conv}", "--policy", "static", "--rate-scale", "-1"], "rate scale must be positive"),
        (["--policy", "static"], "the following arguments are required: --trace"),
        (["--trace", "{conv}", "--policy", "static", "--mode", "fluid", "--misses-by-minute"], "needs --mode request"),
    ],
)
def test_it_reports_bad_input_as_error_and_exit_2(traces_dir, capsys, args, message):
    args = [a.replace("{conv}", str(traces_dir / "AzureLLMInferenceTrace_conv.csv")) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err
