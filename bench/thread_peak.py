"""Threads and load of a command while it runs (docs/sandbox.md, "Client threads"): every INTERVAL seconds,
the thread count of the command's process tree (from /proc/PID/status) and the 1-minute load average.

    PYTHONPATH=. .venv/bin/python bench/thread_peak.py --out /tmp/threads.json -- \
        make -s demo-headless DEMO_ARGS="--speed 2"

(With no command it runs that one, and writes var/thread_peak.json.) The command's stdout and stderr
pass through; the samples and their peaks go to --out as JSON, and the peaks to stderr. Linux only (it
reads /proc).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


DEFAULT_COMMAND = ["make", "-s", "demo-headless", "DEMO_ARGS=--speed 2"]


def _status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # the process ended between the listing and the read
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _tree(root: int) -> dict[int, tuple[str, int]]:
    """Every live process under `root` (itself included): its name and thread count."""
    parents: dict[int, int] = {}
    facts: dict[int, tuple[str, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            status = _status(int(entry))
            if status:
                parents[int(entry)] = int(status.get("PPid", "0").strip())
                facts[int(entry)] = (status.get("Name", "?").strip(), int(status.get("Threads", "0").strip()))
    inside = {root}
    changed = True
    while changed:  # a handful of levels (make, manage.py, prometheus)
        grown = inside | {pid for pid, parent in parents.items() if parent in inside}
        changed, inside = grown != inside, grown
    return {pid: facts[pid] for pid in inside if pid in facts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between samples")
    parser.add_argument("--out", default="var/thread_peak.json", help="where to write the samples (JSON)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = (args.command[1:] if args.command[:1] == ["--"] else args.command) or DEFAULT_COMMAND
    if args.interval <= 0:
        parser.error("--interval must be positive")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(command)
    started = time.monotonic()
    samples = []
    while child.poll() is None:
        tree = _tree(child.pid)
        biggest = max(tree.items(), key=lambda item: item[1][1], default=(0, ("?", 0)))
        samples.append({"t_s": round(time.monotonic() - started, 1), "load1": os.getloadavg()[0],
                        "threads_total": sum(threads for _, threads in tree.values()),
                        "threads_biggest": biggest[1][1], "biggest": biggest[1][0]})
        time.sleep(args.interval)
    peaks = {"returncode": child.returncode, "wall_s": round(time.monotonic() - started),
             "samples": len(samples),
             "peak_threads_biggest": max((s["threads_biggest"] for s in samples), default=0),
             "peak_threads_total": max((s["threads_total"] for s in samples), default=0),
             "peak_load1": max((s["load1"] for s in samples), default=0.0)}
    Path(args.out).write_text(json.dumps({**peaks, "series": samples}, indent=1))
    print(f"thread_peak: {json.dumps(peaks)}", file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
