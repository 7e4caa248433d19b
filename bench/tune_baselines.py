"""Tune the baselines as their users would: thresholds chosen on the training traces only.

    .venv/bin/python bench/tune_baselines.py [--traces ../shared/traces] [--json]

A team adopting KEDA on queue depth or the HPA on GPU utilisation does not keep the defaults
(5 waiting requests a replica, 80 %) after its first missed objective: it replays its own traffic
and picks the threshold that meets the objective most cheaply. This does exactly that on the
training traces (`TRAINING`: the Azure `code` trace as recorded, request mode, 10-minute warm-up,
the suite's defaults; the surges the suite adds to it are not training data), over a small grid per baseline: the cheapest setting (GPU-hours summed over the
training cases) whose attainment reaches the objective on every training case; where none does,
the setting with the highest mean attainment (ties: the cheaper). The chosen values are
`TUNED_KEDA_TARGET_QUEUE` and `TUNED_HPA_TARGET_UTILISATION` in `scaling/sim/policies/__init__.py`;
the `conv` cases of the suite are never looked at here.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from scaling.sim.config import SimConfig
from scaling.sim.loaders import load_trace
from scaling.sim.profiles import DEFAULT_PROFILE, get_profile
from scaling.sim.policies.hpa_util import HpaUtilPolicy
from scaling.sim.policies.keda_queue import KedaQueuePolicy
from scaling.sim.request_mode import run_request_mode
from scaling.sim.transforms import surge

KEDA_GRID = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0)  # waiting requests per replica
HPA_GRID = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)  # GPU busy share
# The traffic a team has when it sets the threshold: its ordinary day, not the surge that comes later.
TRAINING = (("code", "AzureLLMInferenceTrace_code.csv", None),)


def training_workloads(traces: Path):
    for label, file_name, surge_spec in TRAINING:
        workload = load_trace(traces / file_name)
        if surge_spec:
            factor, minutes = (float(part) for part in surge_spec.split(":"))
            workload = surge(workload, factor, minutes, None, seed=0)
        yield label, workload


def choose(scores: dict[float, list[tuple[float, float]]], objective: float) -> tuple[float, str]:
    """scores: setting -> [(attainment, GPU-hours) per training case]. Returns (setting, how)."""
    meeting = {s: sum(g for _, g in rows) for s, rows in scores.items() if all(a >= objective for a, _ in rows)}
    if meeting:
        return min(meeting, key=lambda s: (meeting[s], s)), "cheapest meeting the objective on every training case"
    best = max(scores, key=lambda s: (sum(a for a, _ in scores[s]) / len(scores[s]), -sum(g for _, g in scores[s])))
    return best, "none meets the objective: the highest mean attainment"


def tune(traces: Path, config: SimConfig) -> dict[str, object]:
    workloads = list(training_workloads(traces))
    grids = {
        "keda-queue": (KEDA_GRID, lambda v: KedaQueuePolicy(config.min_replicas, config.max_replicas, target_queue_per_replica=v)),
        "hpa-util": (HPA_GRID, lambda v: HpaUtilPolicy(config.min_replicas, config.max_replicas, target_utilisation=v)),
    }
    report: dict[str, object] = {}
    for name, (grid, build) in grids.items():
        scores: dict[float, list[tuple[float, float]]] = {}
        for value in grid:
            scores[value] = []
            for _, workload in workloads:
                result = run_request_mode(workload, config, build(value))
                scores[value].append((result.slo_attainment, result.gpu_hours))
        chosen, how = choose(scores, config.slo_objective)
        report[name] = {"chosen": chosen, "how": how,
                        "grid": {str(v): [{"case": label, "slo_attainment": a, "gpu_hours": round(g, 2)}
                                          for (label, _), (a, g) in zip(workloads, rows)] for v, rows in scores.items()}}
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = tune(Path(args.traces), SimConfig.for_profile(get_profile(DEFAULT_PROFILE), warmup_s=600.0))
    if args.json:
        print(json.dumps(report))
        return
    for name, entry in report.items():
        print(f"{name}: chosen {entry['chosen']} ({entry['how']})")  # type: ignore[index]
        for value, rows in entry["grid"].items():  # type: ignore[index]
            cells = "; ".join(f"{r['case']} {r['slo_attainment']:.4f} at {r['gpu_hours']:.2f} GPU-h" for r in rows)
            print(f"  {value}: {cells}")


if __name__ == "__main__":
    main()
