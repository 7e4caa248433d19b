"""Trace loaders behind one interface: `load_trace(path, fmt="auto") -> Workload`.

Every malformed input raises `TraceFormatError` naming the file, line and column; the replay CLI
prints it as `error: ...` and exits 2, never with a traceback.
"""
from __future__ import annotations

import csv
import io
import json
import tarfile
import zlib
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from scaling.sim.workload import ClientWindows, RateTrace, Trace, Workload

FORMATS = ("auto", "azure", "mooncake", "servegen")
AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
SERVEGEN_HEADER = "window_start_s,window_len_s,total_rate_rps,active_clients,rate_weighted_mean_cv,collection_gap,suspect_low".split(",")
SERVEGEN_CLIENT_COLUMNS = ["window_start_s", "rate_req_per_s", "cv_of_interarrival", "fitted_distribution", "shape", "scale"]
# The largest number a field may hold: whole numbers up to it are exact as floats and fit the int64 columns.
MAX_NUMBER = float(2**53)
# An archive with more members than this is not a ServeGen client archive (those hold tens): refused
# before its headers fill the memory.
MAX_ARCHIVE_MEMBERS = 10_000


class TraceFormatError(ValueError):
    def __init__(self, path: str | Path, line: int | None, column: str | int | None, message: str) -> None:
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column {column}"
        super().__init__(f"{where}: {message}")


def load_trace(path: str | Path, fmt: str = "auto", max_unpacked_bytes: int | None = None) -> Workload:
    """`max_unpacked_bytes` bounds what an archive may unpack to, checked on its members' headers
    before any is read (a small upload that unpacks to gigabytes is refused at once)."""
    path = Path(path)
    if fmt not in FORMATS:
        raise TraceFormatError(path, None, None, f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    if not path.is_file():
        raise TraceFormatError(path, None, None, "no such file")
    if fmt == "auto":
        fmt = detect_format(path)
    try:
        if fmt == "azure":
            return load_azure(path)
        if fmt == "mooncake":
            return load_mooncake(path)
        if path.name.endswith((".tar.gz", ".tgz")):
            return load_servegen_clients(path, max_unpacked_bytes)
        return load_servegen_aggregate(path)
    except UnicodeDecodeError as exc:
        raise TraceFormatError(path, None, None, f"not UTF-8 text (byte {exc.object[exc.start:exc.start + 1]!r})") from None
    except (EOFError, zlib.error, tarfile.TarError, OSError) as exc:  # a cut or corrupt archive, read lazily
        raise TraceFormatError(path, None, None, f"cannot be read to its end: {str(exc) or type(exc).__name__}") from None


def detect_format(path: Path) -> str:
    if path.name.endswith((".tar.gz", ".tgz")):
        return "servegen"
    with path.open("rb") as handle:
        first = handle.readline(4096).decode("utf-8", "replace").strip()
    if first.startswith("{"):
        return "mooncake"
    if first.split(",")[:1] == ["TIMESTAMP"]:
        return "azure"
    if first.split(",")[:1] == ["window_start_s"]:
        return "servegen"
    raise TraceFormatError(path, 1, None, "cannot tell the format from the first line: expected an Azure header "
                                          "(TIMESTAMP,...), a ServeGen header (window_start_s,...) or a JSON object")


def _rows(path: Path, text: Iterable[str]) -> Iterable[tuple[int, list[str]]]:
    reader = csv.reader(text)
    try:
        for row in reader:
            yield reader.line_num, row
    except csv.Error as exc:
        raise TraceFormatError(path, reader.line_num, None, f"bad CSV: {exc}") from None


def _field(path: Path, line: int, row: list[str], index: int, name: str, parse: Callable[[str], float]) -> float:
    try:
        value = parse(row[index])
    except (ValueError, IndexError):
        shown = row[index] if index < len(row) else ""
        raise TraceFormatError(path, line, f"{index + 1} ({name})", f"expected a number, got {shown!r}") from None
    if not 0 <= value <= MAX_NUMBER:  # NaN fails too
        raise TraceFormatError(path, line, f"{index + 1} ({name})",
                               f"expected a non-negative finite number up to 2**53, got {row[index]!r}")
    return value


def _rising(path: Path, starts: list[float] | np.ndarray) -> None:
    for index in range(1, len(starts)):
        if starts[index] <= starts[index - 1]:
            raise TraceFormatError(path, None, "1 (window_start_s)", f"window starts must rise: window {index + 1} starts "
                                                                     f"at {starts[index]:g} after {starts[index - 1]:g}")


def _check_width(path: Path, line: int, row: list[str], width: int) -> None:
    if len(row) != width:
        raise TraceFormatError(path, line, len(row) + 1 if len(row) < width else width + 1, f"expected {width} fields, got {len(row)}")


def _azure_seconds(text: str) -> float:
    """'2023-11-16 18:17:03.9799600' -> seconds since the epoch (7 fractional digits, no zone)."""
    stamp, _, fraction = text.strip().partition(".")
    base = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + fraction) if fraction else 0.0)


def load_azure(path: Path) -> Trace:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = _rows(path, handle)
        header = next(iter(rows), (1, []))[1]
        if [h.strip() for h in header] != AZURE_HEADER:
            raise TraceFormatError(path, 1, None, f"expected header {','.join(AZURE_HEADER)}, got {','.join(header)!r}")
        times, prompts, outputs = [], [], []
        for line, row in rows:
            if not row:
                continue
            _check_width(path, line, row, 3)
            times.append(_field(path, line, row, 0, "TIMESTAMP", _azure_seconds))
            prompts.append(_field(path, line, row, 1, "ContextTokens", int))
            outputs.append(_field(path, line, row, 2, "GeneratedTokens", int))
    return _request_trace(path, times, prompts, outputs)


def load_mooncake(path: Path) -> Trace:
    times, prompts, outputs = [], [], []
    with path.open(encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                raise TraceFormatError(path, line, exc.colno, f"bad JSON: {exc.msg}") from None
            except RecursionError:
                raise TraceFormatError(path, line, None, "bad JSON: nested too deeply") from None
            if not isinstance(record, dict):
                raise TraceFormatError(path, line, 1, "expected a JSON object")
            for key in ("timestamp", "input_length", "output_length"):
                value = record.get(key)
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_NUMBER:
                    raise TraceFormatError(path, line, key, f"expected a non-negative finite number up to 2**53, got {value!r}")
            if "hash_ids" in record and not isinstance(record["hash_ids"], list):
                raise TraceFormatError(path, line, "hash_ids", "expected a list")
            times.append(record["timestamp"] / 1000.0)
            prompts.append(int(record["input_length"]))
            outputs.append(int(record["output_length"]))
    return _request_trace(path, times, prompts, outputs)


def _request_trace(path: Path, times: list[float], prompts: list[float], outputs: list[float]) -> Trace:
    if not times:
        raise TraceFormatError(path, None, None, "no requests in the file")
    arrivals = np.asarray(times, dtype=np.float64)
    order = np.argsort(arrivals, kind="stable")  # tolerate small out-of-order stretches
    arrivals = arrivals[order] - arrivals[order][0]
    return Trace(
        path.name, arrivals, np.asarray(prompts, dtype=np.int64)[order], np.asarray(outputs, dtype=np.int64)[order]
    )


def load_servegen_aggregate(path: Path) -> RateTrace:
    """Aggregate rate file. Collection gaps (every client reads 0: missing data, not idle traffic)
    and the suspect-low windows beside them are filled by interpolating their neighbours."""
    starts, lengths, rates, cvs, missing = [], [], [], [], []
    with path.open(newline="", encoding="utf-8") as handle:
        rows = _rows(path, handle)
        header = next(iter(rows), (1, []))[1]
        if header != SERVEGEN_HEADER:
            raise TraceFormatError(path, 1, None, f"expected header {','.join(SERVEGEN_HEADER)}")
        for line, row in rows:
            if not row:
                continue
            _check_width(path, line, row, len(SERVEGEN_HEADER))
            values = [_field(path, line, row, i, name, float) for i, name in enumerate(SERVEGEN_HEADER)]
            starts.append(values[0]), lengths.append(values[1]), rates.append(values[2]), cvs.append(values[4])
            missing.append(values[5] == 1 or values[6] == 1)
    if not starts:
        raise TraceFormatError(path, None, None, "no windows in the file")
    if len(set(lengths)) != 1:
        raise TraceFormatError(path, None, "2 (window_len_s)", "windows must all have the same length")
    if lengths[0] <= 0:
        raise TraceFormatError(path, None, "2 (window_len_s)", "windows must have a positive length")
    _rising(path, starts)
    rate = np.asarray(rates)
    gap = np.asarray(missing)
    if gap.any() and not gap.all():
        index = np.arange(len(rate))
        rate = rate.copy()
        rate[gap] = np.interp(index[gap], index[~gap], rate[~gap])
    start = np.asarray(starts)
    return RateTrace(path.name, start - start[0], lengths[0], rate, cv=np.asarray(cvs))


def load_servegen_clients(path: Path, max_unpacked_bytes: int | None = None) -> RateTrace:
    try:
        archive = tarfile.open(path, "r:gz")
    except (tarfile.TarError, OSError) as exc:
        raise TraceFormatError(path, None, None, f"not a readable tar.gz: {exc}") from None
    clients: list[ClientWindows] = []
    window_starts: np.ndarray | None = None
    with archive:
        members = _client_members(path, archive, max_unpacked_bytes)
        for member in members:
            extracted = archive.extractfile(member)
            assert extracted is not None
            name = f"{path}:{member.name}"
            starts, client = _parse_client(Path(name), io.TextIOWrapper(extracted, encoding="utf-8", newline=""))
            if window_starts is None:
                window_starts = starts
            elif len(starts) != len(window_starts) or not np.array_equal(starts, window_starts):
                raise TraceFormatError(name, None, "1 (window_start_s)", "windows differ from the first client's")
            clients.append(client)
    if window_starts is None or not clients:
        raise TraceFormatError(path, None, None, "no client CSV files in the archive")
    if not len(window_starts):
        raise TraceFormatError(path, None, None, "no windows in the client CSV files")
    _rising(path, window_starts)
    window_len = float(window_starts[1] - window_starts[0]) if len(window_starts) > 1 else 600.0
    clients = _fill_collection_gaps(clients)
    total = np.sum([c.rate_rps for c in clients], axis=0)
    return RateTrace(path.name, window_starts - window_starts[0], window_len, total, clients=clients)


def _client_members(path: Path, archive: tarfile.TarFile, max_unpacked_bytes: int | None) -> list[tarfile.TarInfo]:
    """The archive's client CSV files by name, its headers read one at a time: the count and the sizes
    they declare are checked before the next member is unpacked."""
    members: list[tarfile.TarInfo] = []
    unpacked = 0
    while (member := archive.next()) is not None:
        if len(archive.members) > MAX_ARCHIVE_MEMBERS:
            raise TraceFormatError(path, None, None, f"the archive holds more than {MAX_ARCHIVE_MEMBERS:,} members")
        unpacked += member.size
        if max_unpacked_bytes is not None and unpacked > max_unpacked_bytes:
            raise TraceFormatError(path, None, None, f"the archive unpacks to more than {max_unpacked_bytes / 1e6:.0f} MB")
        if member.isfile() and member.name.endswith(".csv"):
            members.append(member)
    return sorted(members, key=lambda m: m.name)


def _fill_collection_gaps(clients: list[ClientWindows]) -> list[ClientWindows]:
    """Windows where every client reads 0 are collection gaps (missing data, not idle traffic):
    each client's rate is interpolated from its neighbours and its fit taken from the window before."""
    gap = np.sum([c.rate_rps for c in clients], axis=0) == 0
    if not gap.any() or gap.all():
        return clients
    index = np.arange(len(gap))
    source = np.maximum.accumulate(np.where(~gap, index, -1))
    source = np.where(source < 0, index[~gap][0], source)  # a leading gap borrows from the first window
    filled = []
    for client in clients:
        rate = client.rate_rps.copy()
        rate[gap] = np.interp(index[gap], index[~gap], client.rate_rps[~gap])
        filled.append(ClientWindows(rate, [client.distribution[i] for i in source], client.shape[source], client.scale[source]))
    return filled


def _parse_client(path: Path, text: Iterable[str]) -> tuple[np.ndarray, ClientWindows]:
    starts, rates, kinds, shapes, scales = [], [], [], [], []
    for line, row in _rows(path, text):
        if not row:
            continue
        _check_width(path, line, row, len(SERVEGEN_CLIENT_COLUMNS))
        kind = row[3].strip()
        if kind not in ("", "Gamma", "Weibull"):
            raise TraceFormatError(path, line, "4 (fitted_distribution)", f"expected Gamma, Weibull or empty, got {kind!r}")
        starts.append(_field(path, line, row, 0, "window_start_s", float))
        rates.append(_field(path, line, row, 1, "rate_req_per_s", float))
        shapes.append(_field(path, line, row, 4, "shape", float))
        scales.append(_field(path, line, row, 5, "scale", float))
        kinds.append(kind)
    return np.asarray(starts), ClientWindows(np.asarray(rates), kinds, np.asarray(shapes), np.asarray(scales))
