"""Where a replay's CPU time goes: the whole replay, the decide step's forecasts, the planner, and
fluid mode's per-tick TTFT percentiles (issue 12 item 11).

    .venv/bin/python bench/replay_time.py [replay arguments]

Without arguments it runs the two-week ServeGen replay under `headroom` in fluid mode (the command
of docs/benchmarks.md, "Fast replays"). CPU time (`time.process_time()`), since wall time on a
shared machine says more about the other sessions than about the replay.
"""
from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaling.engine import decide  # noqa: E402
from scaling.sim import fluid_mode  # noqa: E402
from scaling.sim.replay import main as replay  # noqa: E402

DEFAULT = ["--trace", str(Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "servegen"
                          / "servegen_language_m-small_aggregate_rate.csv"),
           "--rate-scale", "0.05", "--mode", "fluid", "--policy", "headroom", "--json"]


def _timed(module: object, name: str, spent: collections.Counter) -> None:
    inner = getattr(module, name)

    def timed(*args: object, **kwargs: object) -> object:
        started = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] += time.process_time() - started

    setattr(module, name, timed)


def main(argv: list[str]) -> int:
    spent: collections.Counter = collections.Counter()
    _timed(decide, "forecasts", spent)
    _timed(decide.planner, "plan", spent)
    _timed(fluid_mode, "paired_quantiles", spent)
    started = time.process_time()
    code = replay(argv or DEFAULT)
    total = time.process_time() - started
    print(json.dumps({"cpu_s": round(total, 2), "forecasts_cpu_s": round(spent["forecasts"], 2),
                      "planner_cpu_s": round(spent["plan"], 2),
                      "ttft_percentiles_cpu_s": round(spent["paired_quantiles"], 2)}), file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
