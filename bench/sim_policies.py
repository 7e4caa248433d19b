"""Every baseline policy on the shared traces (issue 3's closing table).

    .venv/bin/python bench/sim_policies.py [--traces ../shared/traces] [--json]

Azure traces replay in request mode at their recorded rate; ServeGen m-small (14 days of
per-window rates) replays in fluid mode at SERVEGEN_RATE_SCALE. Defaults everywhere else:
llama-3.1-8b-h100, cold start p50 60 s / p95 90 s, TTFT SLO 1,000 ms for 99 % of requests.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from scaling.sim.config import SimConfig
from scaling.sim.loaders import load_trace
from scaling.sim.runner import simulate
from scaling.sim.transforms import rate_scale

POLICY_NAMES = ("static", "hpa-util", "keda-queue", "clairvoyant")
SERVEGEN_RATE_SCALE = 0.05
CASES = (
    ("azure-code", "AzureLLMInferenceTrace_code.csv", 1.0, "request"),
    ("azure-conv", "AzureLLMInferenceTrace_conv.csv", 1.0, "request"),
    ("azure-conv x8", "AzureLLMInferenceTrace_conv.csv", 8.0, "request"),
    ("servegen m-small", "servegen/servegen_language_m-small_aggregate_rate.csv", SERVEGEN_RATE_SCALE, "fluid"),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print("| trace | rate scale | mode | policy | SLO attainment | TTFT p50/p95/p99 ms | GPU-hours | cost $ | max replicas | mean ready | cold starts |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, file_name, scale, mode in CASES:
        workload = load_trace(Path(args.traces) / file_name)
        if scale != 1.0:
            workload = rate_scale(workload, scale, seed=0)
        for policy in POLICY_NAMES:
            result = simulate(workload, SimConfig(), policy, mode)
            if args.json:
                print(json.dumps({"trace": label, "rate_scale": scale, **result.as_json()}))
                continue
            ttft = result.ttft_ms
            print(f"| {label} | {scale:g} | {mode} | {policy} | {result.slo_attainment:.4f} | {ttft.p50:,.0f} / {ttft.p95:,.0f} / {ttft.p99:,.0f} "
                  f"| {result.gpu_hours:,.2f} | {result.cost_usd:,.2f} | {result.max_replicas} | {result.mean_ready_replicas:.2f} "
                  f"| {result.cold_starts:,} |", flush=True)


if __name__ == "__main__":
    main()
