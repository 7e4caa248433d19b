"""Property tests of the trace loaders (`scaling/sim/loaders.py`, `sandbox/traffic.load_trace_file`) on
malformed input: random bytes, missing columns, negative, NaN, infinite and huge numbers, unsorted times.

Every input gives either a valid workload (finite, non-negative, sorted times from 0; windows of one positive
length, rising) or a `TraceFormatError` naming the file; never another exception type.
"""
from __future__ import annotations

import io
import itertools
import json
import math
import re
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.traffic import load_trace_file
from scaling.sim.loaders import AZURE_HEADER, FORMATS, SERVEGEN_HEADER, TraceFormatError, load_trace
from scaling.sim.workload import RateTrace, Trace

FAST = settings(max_examples=120, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def assert_valid(workload) -> None:
    if isinstance(workload, Trace):
        times = workload.arrival_s
        assert len(times) > 0 and np.isfinite(times).all() and times[0] == 0.0
        assert (np.diff(times) >= 0).all()
        assert len(workload.prompt_tokens) == len(workload.output_tokens) == len(times)
        assert (workload.prompt_tokens >= 0).all() and (workload.output_tokens >= 0).all()
        return
    assert isinstance(workload, RateTrace)
    starts = workload.window_start_s
    assert len(starts) > 0 and np.isfinite(starts).all() and starts[0] == 0.0
    assert (np.diff(starts) > 0).all()  # windows rise
    assert math.isfinite(workload.window_len_s) and workload.window_len_s > 0
    assert np.isfinite(workload.rate_rps).all() and (workload.rate_rps >= 0).all()
    assert len(workload.rate_rps) == len(starts)


def load(directory: str, name: str, content: bytes, fmt: str = "auto"):
    """The loader's answer on a file: a valid workload, or None after a TraceFormatError naming the file."""
    path = Path(directory) / name
    path.write_bytes(content)
    try:
        workload = load_trace(path, fmt)
    except TraceFormatError as error:
        assert str(path) in str(error)
        return None
    assert_valid(workload)
    return workload


def first_requests(path: Path, workload) -> None:
    """The traffic generator reads the same file: a few requests out, or the same clear error."""
    if workload is None:
        with pytest.raises(TraceFormatError):
            list(itertools.islice(load_trace_file(str(path)), 3))
    elif workload.expected_requests < 50_000:  # sampling a huge rate file is the replay's cost, not a parse
        for request in itertools.islice(load_trace_file(str(path)), 5):
            assert request.t_s >= 0 and request.prompt_tokens >= 0 and request.output_tokens >= 0


NAMES = st.sampled_from(["trace.csv", "trace.jsonl", "trace.tar.gz", "trace"])


@FAST
@given(name=NAMES, content=st.binary(max_size=300), fmt=st.sampled_from(FORMATS))
def test_random_bytes_give_a_clear_error_or_a_valid_trace(name, content, fmt):
    with tempfile.TemporaryDirectory() as directory:
        load(directory, name, content, fmt)


# Cells a broken export could hold: good values, garbage, negative, NaN, infinite, huge, empty.
bad_numbers = st.sampled_from(["-1", "nan", "NaN", "inf", "-inf", "1e400", "9" * 30, "", " ", "abc", "1_0", "0x10",
                               "\x00", "é", "3.5"])
timestamps = st.one_of(
    st.builds(lambda s, f: f"2023-11-16 {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{f:07d}",
              st.integers(0, 86_399), st.integers(0, 9_999_999)),
    st.sampled_from(["0001-01-01 00:00:00", "9999-12-31 23:59:59.9999999", "2023-02-30 00:00:00",
                     "2023-11-16 18:17:03.", "2023-11-16T18:17:03"]), bad_numbers)
tokens = st.one_of(st.integers(0, 20_000).map(str), bad_numbers)


def csv_bytes(header: list[str], rows: list[list[str]]) -> bytes:
    lines = [",".join(header)] + [",".join(row) for row in rows]
    return ("\n".join(lines) + "\n").encode("utf-8")


@FAST
@given(header=st.one_of(st.just(AZURE_HEADER), st.lists(st.sampled_from(AZURE_HEADER), max_size=4)),
       rows=st.lists(st.lists(st.one_of(timestamps, tokens), min_size=0, max_size=4), max_size=6),
       good=st.lists(st.tuples(timestamps, tokens, tokens), max_size=6))
def test_azure_files_with_broken_cells_or_columns(header, rows, good):
    with tempfile.TemporaryDirectory() as directory:
        content = csv_bytes(header, [list(row) for row in good] + rows)
        workload = load(directory, "azure.csv", content)
        first_requests(Path(directory) / "azure.csv", workload)


json_values = st.one_of(st.integers(0, 10**6), st.floats(0, 1e9), st.just(10**30), st.just(-1), st.just(True),
                        st.just("12"), st.none(), st.just([]))
raw_literals = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-0.0", "1" * 40])


@st.composite
def mooncake_lines(draw) -> str:
    record = {key: draw(json_values) for key in ("timestamp", "input_length", "output_length") if draw(st.booleans())
              or True}
    if draw(st.booleans()):
        record.pop(draw(st.sampled_from(sorted(record))))
    text = json.dumps(record)
    if draw(st.booleans()):  # a literal Python's json reads but no number column can hold
        key = draw(st.sampled_from(["timestamp", "input_length", "output_length"]))
        text = json.dumps({**record, key: "@"}).replace('"@"', draw(raw_literals))
    return draw(st.sampled_from([text, text, text[:-1], "[1, 2]", "", "{\"timestamp\": 1"]))


@FAST
@given(lines=st.lists(mooncake_lines(), min_size=1, max_size=6))
def test_mooncake_files_with_broken_records(lines):
    with tempfile.TemporaryDirectory() as directory:
        workload = load(directory, "mooncake.jsonl", ("\n".join(lines) + "\n").encode("utf-8"), "mooncake")
        first_requests(Path(directory) / "mooncake.jsonl", workload)


servegen_cells = st.one_of(st.floats(0, 5000).map(repr), st.integers(0, 1).map(str), bad_numbers)


@FAST
@given(rows=st.lists(st.lists(servegen_cells, min_size=7, max_size=7), min_size=1, max_size=6),
       ragged=st.lists(st.lists(servegen_cells, max_size=9), max_size=2))
def test_servegen_rate_files_with_broken_cells(rows, ragged):
    with tempfile.TemporaryDirectory() as directory:
        workload = load(directory, "servegen.csv", csv_bytes(SERVEGEN_HEADER, rows + ragged))
        first_requests(Path(directory) / "servegen.csv", workload)


@FAST
@given(starts=st.lists(st.integers(0, 20).map(lambda i: i * 600), min_size=1, max_size=6),
       length=st.sampled_from(["600", "0", "-600", "nan", "inf", "1e300"]), rate=st.sampled_from(["1.5", "0", "1e300"]))
def test_servegen_windows_out_of_order_or_of_no_length(starts, length, rate):
    rows = [[str(start), length, rate, "3", "1.2", "0", "0"] for start in starts]
    with tempfile.TemporaryDirectory() as directory:
        workload = load(directory, "servegen.csv", csv_bytes(SERVEGEN_HEADER, rows))
        rising = all(b > a for a, b in zip(starts, starts[1:]))
        assert (workload is not None) == (rising and length == "600" and rate != "1e300")
        first_requests(Path(directory) / "servegen.csv", workload)


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


client_rows = st.lists(st.tuples(st.integers(0, 5).map(lambda i: str(i * 600)), servegen_cells,
                                 st.sampled_from(["1.1", "x"]), st.sampled_from(["Gamma", "Weibull", "", "Normal"]),
                                 servegen_cells, servegen_cells), max_size=4)


@FAST
@given(clients=st.lists(st.one_of(client_rows.map(lambda rows: "".join(",".join(r) + "\n" for r in rows).encode()),
                                  st.binary(max_size=60)), max_size=3))
def test_servegen_client_archives_with_broken_members(clients):
    content = _tar({f"client_{i}.csv": data for i, data in enumerate(clients)})
    with tempfile.TemporaryDirectory() as directory:
        workload = load(directory, "clients.tar.gz", content)
        first_requests(Path(directory) / "clients.tar.gz", workload)


@FAST
@given(seconds=st.lists(st.integers(0, 86_399), min_size=1, max_size=12), data=st.data())
def test_unsorted_request_times_give_the_sorted_trace(seconds, data):
    rows = [(f"2023-11-16 {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}", str(i), str(2 * i))
            for i, s in enumerate(seconds)]
    shuffled = data.draw(st.permutations(rows))
    with tempfile.TemporaryDirectory() as directory:
        ordered = load(directory, "a.csv", csv_bytes(AZURE_HEADER, [list(r) for r in sorted(rows)]))
        mixed = load(directory, "b.csv", csv_bytes(AZURE_HEADER, [list(r) for r in shuffled]))
    assert np.array_equal(ordered.arrival_s, mixed.arrival_s)
    # Requests of the same second keep their order in the file (a stable sort), so compare per second.
    assert sorted(zip(mixed.arrival_s, mixed.prompt_tokens)) == sorted(zip(ordered.arrival_s, ordered.prompt_tokens))


# ---------------------------------------------------------------------------- what the properties found
# Each raised another exception type (or gave a trace with NaN times) before the fix in loaders.py / workload.py.

@pytest.mark.parametrize(("name", "content", "fmt", "message"), [
    ("a.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\n\x80\n", "azure", "not UTF-8 text"),
    ("a.csv", csv_bytes(AZURE_HEADER, [["2023-11-16 18:17:03", "9" * 30, "5"]]), "azure",
     "line 2, column 2 (ContextTokens): expected a non-negative finite number up to 2**53"),
    ("m.jsonl", b'{"timestamp": 1, "input_length": 1000000000000000000000000000000, "output_length": 1}\n', "mooncake",
     "line 1, column input_length"),
    ("m.jsonl", b'{"timestamp": NaN, "input_length": 1, "output_length": 1}\n', "mooncake", "column timestamp"),
    ("m.jsonl", b'{"timestamp": 1, "input_length": 1, "output_length": Infinity}\n', "mooncake", "column output_length"),
    ("s.csv", csv_bytes(SERVEGEN_HEADER, [["0", "inf", "1", "1", "1", "0", "0"]]), "servegen", "column 2 (window_len_s)"),
    ("s.csv", csv_bytes(SERVEGEN_HEADER, [["0", "0", "1", "1", "1", "0", "0"]]), "servegen",
     "windows must have a positive length"),
    ("s.csv", csv_bytes(SERVEGEN_HEADER, [["600", "600", "1", "1", "1", "0", "0"], ["0", "600", "1", "1", "1", "0", "0"]]),
     "servegen", "window starts must rise: window 2 starts at 0 after 600"),
    ("c.tar.gz", _tar({"client_0.csv": b"\n"}), "servegen", "no windows"),
])
def test_malformed_files_found_by_the_properties_name_the_problem(tmp_path, name, content, fmt, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=re.escape(message)):
        load_trace(path, fmt)


def test_a_degenerate_client_fit_gives_evenly_spaced_requests(tmp_path):
    # A Weibull shape of ~0 draws infinite gaps: the window's requests had NaN times.
    path = tmp_path / "c.tar.gz"
    path.write_bytes(_tar({"client_0.csv": b"0,0.05,1.1,Weibull,1e-300,1\n"}))
    times = [r.t_s for r in load_trace_file(str(path))]
    assert len(times) == 30 and all(math.isfinite(t) for t in times)
    assert np.allclose(np.diff(times), 600 / 31)
