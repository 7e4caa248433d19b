"""`statsforecast`'s MSTL and AutoETS on ServeGen m-small, 30 minutes ahead, walk-forward
(issue 12 item 12: a well-kept library against the hand-written `adaptive`).

Not a project dependency (not kept: docs/benchmarks.md, "Forecast"), so it runs in a virtualenv of
its own, outside `make bench`:

    python3 -m venv /tmp/sf && /tmp/sf/bin/pip install statsforecast==2.1.1
    /tmp/sf/bin/python bench/extra/forecast_statsforecast.py mstl 3     # or ets; 3: every third origin

At each scored origin (from day 1, every `stride`-th) the model is refitted on the last 7 days of
10-minute bins (gaps carried forward: the library takes no NaN) and forecasts 3 bins ahead; its p90
is the upper end of the 80 % interval. Scored like the backtest: targets and origins that are gaps
are skipped; WAPE against persistence on the same points.
"""
import csv
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")
TRACE = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "servegen" / "servegen_language_m-small_aggregate_rate.csv"
H, DAY = 3, 144


def main(which: str, stride: int) -> None:
    from statsforecast.models import MSTL, AutoETS

    rows = list(csv.DictReader(TRACE.open()))
    values = np.array([float(r["total_rate_rps"]) for r in rows])
    values[[r["collection_gap"] == "1" or r["suspect_low"] == "1" for r in rows]] = np.nan
    filled = values.copy()
    for i in range(1, len(filled)):
        if not np.isfinite(filled[i]):
            filled[i] = filled[i - 1]
    make = {"mstl": lambda: MSTL(season_length=[DAY], trend_forecaster=AutoETS(model="ZZN")),
            "ets": lambda: AutoETS(model="ZZN")}[which]
    error = persistence = total = covered = points = 0.0
    started = time.process_time()
    for t in range(DAY - H, len(values) - H, stride):
        actual, origin = values[t + H], values[t]
        if not (np.isfinite(actual) and np.isfinite(origin)):
            continue
        made = make().fit(filled[max(0, t + 1 - 7 * DAY): t + 1]).predict(H, level=[80])
        error += abs(float(made["mean"][-1]) - actual)
        persistence += abs(origin - actual)
        total += actual
        covered += float(made["hi-80"][-1]) >= actual
        points += 1
    print(json.dumps({"model": which, "points": int(points), "wape": round(error / total, 4),
                      "persistence_wape": round(persistence / total, 4),
                      "wape_vs_persistence": round(error / persistence - 1, 4),
                      "p90_coverage": round(covered / points, 4), "cpu_s": round(time.process_time() - started, 1)}))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "mstl", int(sys.argv[2]) if len(sys.argv) > 2 else 3)
