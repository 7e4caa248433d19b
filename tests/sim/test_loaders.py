from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from scaling.sim.loaders import TraceFormatError, detect_format, load_trace
from scaling.sim.workload import RateTrace, Trace

AZURE_OK = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n"
MOONCAKE_OK = '{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1, 2]}\n{"timestamp": 1500, "input_length": 7, "output_length": 9, "hash_ids": []}\n'
SERVEGEN_HEADER = "window_start_s,window_len_s,total_rate_rps,active_clients,rate_weighted_mean_cv,collection_gap,suspect_low\n"
SERVEGEN_OK = SERVEGEN_HEADER + "0,600,2.0,3,1.5,0,0\n600,600,0,0,0,1,0\n1200,600,4.0,3,1.2,0,0\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def client_archive(tmp_path: Path, clients: dict[str, str]) -> Path:
    path = tmp_path / "clients.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in clients.items():
            data = text.encode()
            info = tarfile.TarInfo(f"m-small/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_it_parses_the_shared_azure_traces(traces_dir):
    code = load_trace(traces_dir / "AzureLLMInferenceTrace_code.csv")
    conv = load_trace(traces_dir / "AzureLLMInferenceTrace_conv.csv")
    assert isinstance(code, Trace) and (len(code), len(conv)) == (8819, 19366)
    assert code.arrival_s[0] == 0.0 and 57 * 60 < code.span_s < 58 * 60
    assert code.prompt_tokens.mean() == pytest.approx(2048, rel=0.01)


def test_it_parses_azure_fractional_seconds(tmp_path):
    trace = load_trace(write(tmp_path, "a.csv", AZURE_OK))
    assert trace.arrival_s[1] == pytest.approx(0.052, abs=1e-6)
    assert list(trace.prompt_tokens) == [4808, 3180]


def test_it_parses_mooncake_jsonl(tmp_path):
    trace = load_trace(write(tmp_path, "m.jsonl", MOONCAKE_OK))
    assert list(trace.arrival_s) == [0.0, 1.5] and list(trace.output_tokens) == [5, 9]


def test_it_parses_servegen_aggregate_and_fills_collection_gaps(tmp_path):
    rates = load_trace(write(tmp_path, "agg.csv", SERVEGEN_OK))
    assert isinstance(rates, RateTrace)
    assert list(rates.rate_rps) == [2.0, 3.0, 4.0]  # the gap window is interpolated
    assert rates.span_s == 1800


def test_it_parses_the_shared_servegen_files(traces_dir):
    aggregate = load_trace(traces_dir / "servegen/servegen_language_m-small_aggregate_rate.csv")
    clients = load_trace(traces_dir / "servegen/servegen_language_m-small_clients.tar.gz")
    assert aggregate.span_s == clients.span_s == 14 * 86400
    assert len(clients.clients) == 43
    assert clients.expected_requests == pytest.approx(aggregate.expected_requests, rel=0.05)


def test_it_samples_servegen_clients_with_a_fixed_seed(tmp_path):
    path = client_archive(tmp_path, {
        "chunk-0-trace.csv": "0,1.0,2.0,Gamma,0.25,4.0\n600,0.5,1.1,Weibull,0.9,2.0\n",
        "chunk-1-trace.csv": "0,0,0,,0,0\n600,0.2,1.0,,0,0\n",
    })
    workload = load_trace(path)
    first, again = workload.to_requests(seed=7), workload.to_requests(seed=7)
    assert np.array_equal(first.arrival_s, again.arrival_s)
    assert len(first) == pytest.approx(600 + 300 + 120, abs=3)
    assert np.all(np.diff(first.arrival_s) >= 0) and first.span_s < 1200


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad-header.csv", "TIME,Context,Generated\n1,2,3\n", "line 1: cannot tell the format"),
        ("bad-number.csv", AZURE_OK + "2023-11-16 18:17:05.0,12x,3\n", "line 4, column 2 (ContextTokens): expected a number, got '12x'"),
        ("bad-time.csv", AZURE_OK + "yesterday,1,3\n", "line 4, column 1 (TIMESTAMP)"),
        ("short-row.csv", AZURE_OK + "2023-11-16 18:17:05.0,12\n", "line 4, column 3: expected 3 fields, got 2"),
        ("negative.csv", AZURE_OK + "2023-11-16 18:17:05.0,-4,3\n", "line 4, column 2 (ContextTokens): expected a non-negative"),
        ("bad.jsonl", MOONCAKE_OK + '{"timestamp": 5, "input_length": 3,\n', "line 3, column 36: bad JSON"),
        ("missing.jsonl", MOONCAKE_OK + '{"timestamp": 5, "input_length": 3}\n', "line 3, column output_length"),
        ("hashes.jsonl", '{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": 4}\n', "line 1, column hash_ids"),
        ("gap.csv", SERVEGEN_OK + "1800,600,abc,3,1.2,0,0\n", "line 5, column 3 (total_rate_rps)"),
        ("empty.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests in the file"),
    ],
)
def test_it_rejects_broken_files_with_line_and_column(tmp_path, name, text, message):
    path = write(tmp_path, name, text)
    with pytest.raises(TraceFormatError) as error:
        load_trace(path)
    assert str(error.value).startswith(str(path))
    assert message in str(error.value)


def test_it_rejects_a_broken_client_inside_the_archive(tmp_path):
    path = client_archive(tmp_path, {"chunk-0-trace.csv": "0,1.0,2.0,Gamma,0.25,4.0\n600,0.5,1.1,Lognormal,0.9,2.0\n"})
    with pytest.raises(TraceFormatError, match=r"chunk-0-trace.csv, line 2, column 4 \(fitted_distribution\)"):
        load_trace(path)


def test_it_rejects_a_file_that_is_not_an_archive(tmp_path):
    with pytest.raises(TraceFormatError, match="not a readable tar.gz"):
        load_trace(write(tmp_path, "x.tar.gz", "plain text"))


def test_it_rejects_a_wrong_header_for_the_named_format(tmp_path):
    with pytest.raises(TraceFormatError, match="line 1: expected header TIMESTAMP,ContextTokens,GeneratedTokens"):
        load_trace(write(tmp_path, "h.csv", "TIME,Context,Generated\n1,2,3\n"), "azure")


def test_it_detects_formats(tmp_path):
    assert detect_format(write(tmp_path, "a.csv", AZURE_OK)) == "azure"
    assert detect_format(write(tmp_path, "m.jsonl", MOONCAKE_OK)) == "mooncake"
    assert detect_format(write(tmp_path, "s.csv", SERVEGEN_OK)) == "servegen"


def test_it_fills_collection_gaps_of_client_archives(tmp_path):
    path = client_archive(tmp_path, {
        "chunk-0-trace.csv": "0,1.0,2.0,Gamma,0.25,4.0\n600,0,0,,0,0\n1200,3.0,1.1,Weibull,0.9,2.0\n",
        "chunk-1-trace.csv": "0,2.0,1.0,,0,0\n600,0,0,,0,0\n1200,0,0,,0,0\n",
    })
    workload = load_trace(path)
    assert list(workload.rate_rps) == [3.0, 3.0, 3.0]  # every client read 0 at 600 s: interpolated
    assert workload.clients[0].distribution == ["Gamma", "Gamma", "Weibull"]
