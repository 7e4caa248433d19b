"""bench/causal_frontier.py's reading of its replays: the single-configuration table and saved runs."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.causal_frontier import saved_rows, single_configurations

ROOT = Path(__file__).resolve().parents[2]


def _row(case: str, target: float, clairvoyant_gpu_h: float, **tried: tuple[float, float]) -> dict:
    return {"case": case, "target": target, "clairvoyant": {"slo_attainment": 0.99, "gpu_hours": clairvoyant_gpu_h},
            "headroom": {"slo_attainment": target, "gpu_hours": 1.0},
            "frontier": {"configuration": "x", "slo_attainment": target, "gpu_hours": 1.0},
            "tried": {name: {"slo_attainment": att, "gpu_hours": gpu_h} for name, (att, gpu_h) in tried.items()}}


ROWS = [
    # A smooth case where everything meets the objective, and a surge where only the generous one keeps up.
    _row("smooth", 0.99, 2.0, lean=(0.9950, 2.0), generous=(0.9990, 4.0), static_7=(0.995, 1.0)),
    _row("surge", 0.93, 4.0, lean=(0.9100, 4.0), generous=(0.9400, 16.0), static_9=(0.94, 3.0)),
]


def test_each_configuration_is_scored_on_every_case_and_static_pools_sized_per_case_are_left_out() -> None:
    rows = [dict(row, tried={name.replace("_", " "): value for name, value in row["tried"].items()}) for row in ROWS]
    table = single_configurations(rows, objective=0.99)
    assert [entry["configuration"] for entry in table] == ["lean", "generous"]  # cheapest first, no static
    lean, generous = table
    assert lean["geomean_over_clairvoyant"] == pytest.approx(1.0)
    assert generous["geomean_over_clairvoyant"] == pytest.approx(math.sqrt(2.0 * 4.0), abs=1e-3)
    # Shortfall below the objective, counting nothing past it: the smooth case's 0.995 adds nothing.
    assert lean["mean_shortfall"] == pytest.approx((0.99 - 0.91) / 2, abs=1e-4)
    assert lean["below_headroom"] == ["surge"] and generous["below_headroom"] == []


def test_a_configuration_missing_from_a_case_is_not_a_single_configuration() -> None:
    rows = [ROWS[0], dict(ROWS[1], tried={"generous": ROWS[1]["tried"]["generous"]})]
    assert [entry["configuration"] for entry in single_configurations(rows, objective=0.99)] == ["generous"]


def test_a_saved_run_is_read_back_and_one_from_before_the_cap_is_refused(tmp_path: Path) -> None:
    saved = tmp_path / "run.jsonl"
    saved.write_text("\n".join(json.dumps(row) for row in ROWS) + '\n{"cases": 2}\n')
    assert [row["case"] for row in saved_rows(str(saved))] == ["smooth", "surge"]
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({key: value for key, value in ROWS[0].items() if key != "target"}) + "\n")
    with pytest.raises(SystemExit, match="did not cap the attainment"):
        saved_rows(str(old))
    with pytest.raises(SystemExit, match="cannot read"):
        saved_rows(str(tmp_path / "missing.jsonl"))


def test_the_saved_run_of_session_22_prints_its_tables_without_replaying() -> None:
    done = subprocess.run([sys.executable, "bench/causal_frontier.py", "--from-json",
                           "bench/results/issue12_causal_frontier_capped_session22.jsonl", "--cases", "conv x8"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| conv x8 | 0.9990 / 10.66 / 1.82 | static 10 (0.9942) | 8.07 / 1.38 | 5.87 |" in done.stdout
    assert "| one configuration on every case |" in done.stdout
