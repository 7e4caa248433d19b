"""The forecast table (issue 12 item 12): method x series, WAPE, p90 coverage and CPU time.

    .venv/bin/python bench/forecast_table.py [--traces ../shared/traces] [--json]

Training series (where constants were chosen): ServeGen m-small's first week and its days 0-6
each alone, the Azure `code` trace. Held-out series (judged only): the second week (learned from
the first, scored from day 7), days 7-13 each alone, the Azure `conv` trace. A one-day series has
no earlier day to learn a season from. "WAPE vs persistence" is WAPE / persistence's WAPE - 1
(below 0 is better); for the one-day rows it is the worst day's, with the lowest coverage of any day.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaling.engine.forecast import DAY_S, backtest, cut_days  # noqa: E402
from scaling.engine.rate_series import read_series  # noqa: E402

METHODS = ("persistence", "mean", "seasonal-daily", "seasonal", "trend", "adaptive")


def _cases(traces: Path) -> list[tuple[str, str, list[tuple[object, float, float]]]]:
    servegen = read_series(traces / "servegen" / "servegen_language_m-small_aggregate_rate.csv")
    code = read_series(traces / "AzureLLMInferenceTrace_code.csv", step_s=60)
    conv = read_series(traces / "AzureLLMInferenceTrace_conv.csv", step_s=60)
    days = lambda first, last: [(cut_days(servegen, d, d + 1), 1800.0, 0.0) for d in range(first, last)]  # noqa: E731
    return [
        ("servegen 14 days", "all", [(servegen, 1800.0, 0.0)]),
        ("servegen week 1", "training", [(cut_days(servegen, 0, 7), 1800.0, 0.0)]),
        ("servegen week 2 (learns from week 1)", "held-out", [(servegen, 1800.0, 7 * DAY_S)]),
        ("servegen days 0-6, each alone", "training", days(0, 7)),
        ("servegen days 7-13, each alone", "held-out", days(7, 14)),
        ("azure code, 5 min", "training", [(code, 300.0, 0.0)]),
        ("azure code, 30 min", "training", [(code, 1800.0, 0.0)]),
        ("azure conv, 5 min", "held-out", [(conv, 300.0, 0.0)]),
        ("azure conv, 30 min", "held-out", [(conv, 1800.0, 0.0)]),
    ]


def rows(traces: Path) -> list[dict[str, object]]:
    out = []
    for name, role, parts in _cases(traces):
        for method in METHODS:
            results = [backtest(series, horizon, method, score_from) for series, horizon, score_from in parts]
            out.append({
                "series": name, "role": role, "method": method,
                "points": sum(r.points for r in results),
                "wape": round(sum(r.wape for r in results) / len(results), 4),
                "persistence_wape": round(sum(r.persistence_wape for r in results) / len(results), 4),
                "wape_vs_persistence": max(r.wape_vs_persistence for r in results),
                "p90_coverage": min(r.p90_coverage for r in results),
                "seconds": round(sum(r.seconds for r in results), 3),
            })
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parents[1] / ".." / "shared" / "traces")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    table = rows(args.traces)
    if args.json:
        print(json.dumps(table))
        return 0
    print("| series | data | method | points | WAPE | persistence WAPE | WAPE vs persistence | p90 coverage | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['series']} | {r['role']} | `{r['method']}` | {r['points']} | {r['wape']:.4f} "
              f"| {r['persistence_wape']:.4f} | {r['wape_vs_persistence']:+.2%} | {r['p90_coverage']:.3f} "
              f"| {r['seconds']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
