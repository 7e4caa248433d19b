"""bench/unseen_traffic.py: a trace the suite never saw, scored case by case as the suite scores one."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/unseen_traffic.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def _mooncake_file(path: Path) -> Path:
    # Mooncake's format (timestamps in ms): 25 minutes at about 3 req/s of 2,000-8,000-token prompts
    # (a replica's prefill or two), with a burst in the middle.
    rng = np.random.default_rng(3)
    gaps = np.concatenate([rng.exponential(0.33, 1800), rng.exponential(0.1, 600), rng.exponential(0.33, 1800)])
    times = np.cumsum(gaps)
    with path.open("w") as handle:
        for at in times[times < 1500.0]:
            handle.write(json.dumps({"timestamp": int(at * 1000), "input_length": int(rng.integers(2000, 8000)),
                                     "output_length": int(rng.integers(20, 200)), "hash_ids": [1, 2]}) + "\n")
    return path


def test_it_scores_the_trace_and_a_surge_of_it_against_the_bound_and_the_static_pools(tmp_path):
    trace = _mooncake_file(tmp_path / "conversation.jsonl")
    done = _run("--trace", str(trace), "--label", "tiny", "--surge", "4:2", "--warmup-s", "300",
                "--no-baselines", "--no-bound-check", "--json")
    assert done.returncode == 0, done.stderr
    *rows, summary = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["case"] for row in rows] == ["tiny", "tiny surge 4:2"]
    for row in rows:
        assert 0.0 < row["headroom"]["slo_attainment"] <= 1.0 and row["headroom"]["gpu_hours"] > 0.0
        # The smallest static pool reaching headroom's attainment does reach it, with at least one replica.
        static = row["static_at_headroom_attainment"]
        assert static["replicas"] >= 1 and static["slo_attainment"] >= row["headroom"]["slo_attainment"]
    assert summary["cases"] == 2 and summary["training_cases"] is None  # nothing here was fitted on
    # The surge adds requests, so the surge's case costs the clairvoyant more.
    assert rows[1]["clairvoyant"]["gpu_hours"] > rows[0]["clairvoyant"]["gpu_hours"]


def test_bad_input_is_a_message_not_a_traceback(tmp_path):
    missing = _run("--trace", str(tmp_path / "nowhere.jsonl"))
    assert missing.returncode != 0 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
    short = _mooncake_file(tmp_path / "short.jsonl")
    too_short = _run("--trace", str(short), "--warmup-s", "3600")
    assert too_short.returncode != 0 and "no more than the warm-up" in too_short.stderr
    surge = _run("--trace", str(short), "--surge", "10")
    assert surge.returncode == 2 and "expected FACTOR:MINUTES" in surge.stderr
    guardrail = _run("--trace", str(short), "--reactive-max-percent", "-5")
    assert guardrail.returncode == 2 and "--reactive-max-percent" in guardrail.stderr and "Traceback" not in guardrail.stderr
    # `make bench-full` runs every script without arguments: nothing to judge is not a failure.
    nothing = _run()
    assert nothing.returncode == 0 and "no --trace given" in nothing.stdout
