"""Compare two Prometheus text expositions family by family.

Used to prove that the sandbox's vLLM emulator exposes the metric families Headroom
reads exactly as a real vLLM does: same presence, type, label names (values ignored)
and histogram bucket boundaries.

The comparison works on the raw text, parsed here, rather than on
``prometheus_client.parser``'s view of it: that parser renames families (a counter
declared ``# TYPE vllm:prompt_tokens_total counter`` comes back as family
``vllm:prompt_tokens``), which would hide exactly the naming differences that matter
to Prometheus' metadata.  ``prometheus_client`` is still used to check that each
exposition parses at all.

Family names: a counter is identified by its name without ``_total`` (what
OpenMetrics calls the family, ``vllm:prompt_tokens``), and is looked up by either
spelling; gauges and histograms by their declared name.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

# The vLLM families Headroom reads (shared/design.md §6 "Signals", shared/reference/vllm-interface.md §1),
# with the type real vLLM 0.32.0 gives them (shared/reference/vllm-cpu-metrics-sample.txt).
HEADROOM_FAMILIES: dict[str, str] = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:engine_sleep_state": "gauge",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:prompt_tokens": "counter",  # scraped as vllm:prompt_tokens_total
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",  # label finished_reason
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
}

# Labels whose *values* form a fixed vocabulary that Headroom's queries select on.
ENUM_LABELS = ("sleep_state", "finished_reason")

_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created", "_gcount", "_gsum", "_info")
_EXPECTED_SUFFIXES = {
    "counter": {"_total"},
    "gauge": {""},
    "histogram": {"_bucket", "_sum", "_count"},
}
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass
class Family:
    """One metric family as the exposition declares and fills it."""

    name: str  # family name (counters without _total)
    type: str  # counter, gauge, histogram, summary, untyped, ...
    type_line_name: str | None  # the name on the `# TYPE` line, None when undeclared
    help: str | None = None
    label_names: set[str] = field(default_factory=set)  # union over samples, without le/quantile
    sample_suffixes: set[str] = field(default_factory=set)  # "" for the bare name
    buckets: tuple[float, ...] | None = None  # union of `le` bounds over all series
    bucket_sets: set[tuple[float, ...]] = field(default_factory=set)  # per-series bound lists
    label_values: dict[str, set[str]] = field(default_factory=dict)
    samples: int = 0


@dataclass(frozen=True)
class Difference:
    family: str
    aspect: str  # parse, presence, type, type_line_name, samples, labels, label_values, buckets
    reference: str
    candidate: str

    def __str__(self) -> str:
        return f"{self.family}: {self.aspect} differs: reference {self.reference}; candidate {self.candidate}"


class ExpositionError(ValueError):
    """The text is not a valid Prometheus text exposition."""


# --------------------------------------------------------------------------- parsing

def _unescape(value: str) -> str:
    return value.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def _parse_labels(text: str, pos: int, line: str) -> tuple[dict[str, str], int]:
    """Parse `{a="x",b="y"}` starting at text[pos] == '{'; return labels and the index after '}'."""
    labels: dict[str, str] = {}
    pos += 1
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t,":
            pos += 1
        if pos < n and text[pos] == "}":
            return labels, pos + 1
        match = _NAME_RE.match(text, pos)
        if not match:
            raise ExpositionError(f"bad label name in: {line}")
        name = match.group(0)
        pos = match.end()
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n or text[pos] != "=":
            raise ExpositionError(f"expected '=' after label {name!r} in: {line}")
        pos += 1
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n or text[pos] != '"':
            raise ExpositionError(f"expected quoted value for label {name!r} in: {line}")
        pos += 1
        start = pos
        while pos < n and text[pos] != '"':
            pos += 2 if text[pos] == "\\" else 1
        if pos >= n:
            raise ExpositionError(f"unterminated label value in: {line}")
        labels[name] = _unescape(text[start:pos])
        pos += 1


def _parse_sample(line: str) -> tuple[str, dict[str, str], float]:
    match = _NAME_RE.match(line)
    if not match:
        raise ExpositionError(f"bad sample line: {line}")
    name = match.group(0)
    pos = match.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        labels, pos = _parse_labels(line, pos, line)
    rest = line[pos:].split()
    if not rest:
        raise ExpositionError(f"sample without value: {line}")
    try:
        value = float(rest[0])
    except ValueError as exc:
        raise ExpositionError(f"bad sample value in: {line}") from exc
    return name, labels, value


def _family_name(type_line_name: str, mtype: str) -> str:
    if mtype == "counter" and type_line_name.endswith("_total"):
        return type_line_name[: -len("_total")]
    return type_line_name


def _parse_le(value: str) -> float:
    return math.inf if value in ("+Inf", "Inf", "inf") else float(value)


def parse_exposition(text: str) -> dict[str, Family]:
    """Parse Prometheus text format 0.0.4 (and the OpenMetrics subset vLLM could emit).

    Returns families keyed by family name (counters without ``_total``).
    """
    declared: dict[str, Family] = {}  # by the name on the TYPE line
    helps: dict[str, str] = {}
    families: dict[str, Family] = {}
    # bucket bounds per (family, frozen non-le labels)
    series_buckets: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                tname, mtype = parts[2], (parts[3].strip() if len(parts) > 3 else "untyped")
                new = Family(name=_family_name(tname, mtype), type=mtype, type_line_name=tname,
                             help=helps.get(tname))
                declared[tname] = new
                families.setdefault(new.name, new)
            elif len(parts) >= 3 and parts[1] == "HELP":
                helps[parts[2]] = parts[3] if len(parts) > 3 else ""
                if parts[2] in declared:
                    declared[parts[2]].help = helps[parts[2]]
            continue
        name, labels, _value = _parse_sample(line)
        fam: Family | None = None
        suffix = ""
        if name in declared:
            fam = declared[name]
            # a counter declared with its _total name: the sample carries the _total suffix
            if fam.type == "counter" and name.endswith("_total"):
                suffix = "_total"
        else:
            for sfx in _SUFFIXES:
                if name.endswith(sfx) and name[: -len(sfx)] in declared:
                    fam, suffix = declared[name[: -len(sfx)]], sfx
                    break
        if fam is None:
            fam = families.get(name)
            if fam is None:
                fam = Family(name=name, type="untyped", type_line_name=None)
                families[name] = fam
        fam.samples += 1
        fam.sample_suffixes.add(suffix)
        plain = {k: v for k, v in labels.items() if k not in ("le", "quantile")}
        fam.label_names.update(plain)
        for key, val in plain.items():
            fam.label_values.setdefault(key, set()).add(val)
        if suffix == "_bucket" and "le" in labels:
            series = (fam.name, tuple(sorted(plain.items())))
            series_buckets.setdefault(series, []).append(_parse_le(labels["le"]))

    for (fname, _labels), bounds in series_buckets.items():
        fam = families[fname]
        bset = tuple(sorted(set(bounds)))
        fam.bucket_sets.add(bset)
        fam.buckets = tuple(sorted(set(fam.buckets or ()) | set(bset)))
    return families


def iter_samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """Every sample of an exposition as (name, labels, value)."""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            yield _parse_sample(line)


def check_parses(text: str) -> str | None:
    """None when ``prometheus_client``'s parser accepts the text, else its error."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for _ in text_string_to_metric_families(text):
            pass
    except Exception as exc:  # noqa: BLE001 - any parser failure is the answer
        return f"{type(exc).__name__}: {exc}"
    return None


def lookup(families: Mapping[str, Family], name: str) -> Family | None:
    """Find a family by family name or by its counter sample name (``..._total``)."""
    if name in families:
        return families[name]
    if name.endswith("_total"):
        fam = families.get(name[: -len("_total")])
        if fam is not None and fam.type == "counter":
            return fam
    return None


# ------------------------------------------------------------------------ comparing

def _fmt_bounds(bounds: Iterable[float]) -> str:
    return "[" + ", ".join("+Inf" if math.isinf(b) else f"{b:g}" for b in bounds) + "]"


def _fmt_set(values: Iterable[str]) -> str:
    return "{" + ", ".join(sorted(values)) + "}" if values else "{}"


def _label_names_diff(name: str, ref: Family, cand: Family) -> Difference | None:
    if ref.label_names == cand.label_names:
        return None
    missing, extra = ref.label_names - cand.label_names, cand.label_names - ref.label_names
    detail = "; ".join(part for part in (f"missing {_fmt_set(missing)}" if missing else "",
                                         f"extra {_fmt_set(extra)}" if extra else "") if part)
    return Difference(name, "labels", _fmt_set(ref.label_names), f"{_fmt_set(cand.label_names)} ({detail})")


def _buckets_diff(name: str, ref: Family, cand: Family) -> Difference | None:
    if ref.buckets == cand.buckets:
        if len(cand.bucket_sets) > 1:
            return Difference(name, "buckets", "one bound list for every series",
                              f"{len(cand.bucket_sets)} different bound lists across series")
        return None
    notes: list[str] = []
    if ref.buckets and cand.buckets:
        missing = sorted(set(ref.buckets) - set(cand.buckets))
        extra = sorted(set(cand.buckets) - set(ref.buckets))
        if missing:
            notes.append("missing " + _fmt_bounds(missing))
        if extra:
            notes.append("extra " + _fmt_bounds(extra))
    shown = _fmt_bounds(cand.buckets or ()) + (f" ({'; '.join(notes)})" if notes else "")
    return Difference(name, "buckets", _fmt_bounds(ref.buckets or ()), shown)


def compare_family(ref: Family | None, cand: Family | None, name: str,
                   enum_labels: Iterable[str] = ()) -> list[Difference]:
    """How ``cand`` differs from ``ref`` (the family called ``name`` in both expositions)."""
    if ref is None or cand is None:
        return [Difference(name, "presence", "present" if ref else "absent", "present" if cand else "absent")]
    diffs: list[Difference] = []
    if ref.type != cand.type:
        diffs.append(Difference(name, "type", ref.type, cand.type))
    if ref.type_line_name != cand.type_line_name:
        diffs.append(Difference(name, "type_line_name", f"# TYPE {ref.type_line_name}",
                                f"# TYPE {cand.type_line_name}"))
    if ref.sample_suffixes != cand.sample_suffixes:
        diffs.append(Difference(name, "samples", _fmt_set(name + s for s in ref.sample_suffixes),
                                _fmt_set(name + s for s in cand.sample_suffixes)))
    labels = _label_names_diff(name, ref, cand)
    if labels:
        diffs.append(labels)
    for label in enum_labels:
        ref_values, cand_values = ref.label_values.get(label), cand.label_values.get(label)
        if ref_values is not None and cand_values is not None and ref_values != cand_values:
            diffs.append(Difference(name, "label_values", f"{label}={_fmt_set(ref_values)}",
                                    f"{label}={_fmt_set(cand_values)}"))
    if "histogram" in (ref.type, cand.type):
        buckets = _buckets_diff(name, ref, cand)
        if buckets:
            diffs.append(buckets)
    return diffs


def compare_expositions(reference: str, candidate: str,
                        families: Iterable[str] = HEADROOM_FAMILIES,
                        enum_labels: Iterable[str] = ()) -> list[Difference]:
    """Differences between ``candidate`` and ``reference`` for ``families`` (empty = conformant)."""
    diffs: list[Difference] = []
    for label, text in (("reference", reference), ("candidate", candidate)):
        error = check_parses(text)
        if error:
            diffs.append(Difference("*", "parse", "ok" if label == "candidate" else error,
                                    error if label == "candidate" else "ok"))
    try:
        ref_fams = parse_exposition(reference)
        cand_fams = parse_exposition(candidate)
    except ExpositionError as exc:
        return diffs or [Difference("*", "parse", "ok", str(exc))]
    enum_labels = tuple(enum_labels)
    for name in families:
        diffs.extend(compare_family(lookup(ref_fams, name), lookup(cand_fams, name), name, enum_labels))
    return diffs


def check_expected_types(text: str, expected: Mapping[str, str] = HEADROOM_FAMILIES) -> list[str]:
    """Problems with ``text`` against the expected family types (for a single exposition)."""
    fams = parse_exposition(text)
    problems = []
    for name, mtype in expected.items():
        fam = lookup(fams, name)
        if fam is None:
            problems.append(f"{name}: absent")
            continue
        if fam.type != mtype:
            problems.append(f"{name}: type {fam.type}, expected {mtype}")
        expected_suffixes = _EXPECTED_SUFFIXES.get(mtype)
        if fam.samples and expected_suffixes and fam.sample_suffixes != expected_suffixes:
            problems.append(f"{name}: samples {_fmt_set(name + s for s in fam.sample_suffixes)}, "
                            f"expected {_fmt_set(name + s for s in expected_suffixes)}")
    return problems


def split_sections(text: str, marker: str = "# =====") -> list[str]:
    """Split a multi-scrape file (such as the reference sample) into its scrapes."""
    sections: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith(marker):
            sections.append("\n".join(current) + "\n")
            current = []
        else:
            current.append(line)
    sections.append("\n".join(current) + "\n")
    return [s for s in sections if s.strip()]


def format_differences(diffs: Iterable[Difference]) -> str:
    diffs = list(diffs)
    if not diffs:
        return "no differences"
    return "\n".join(f"- {d}" for d in diffs)
