"""Small synthetic workloads and scripted policies for simulator tests."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scaling.sim.policies.base import Observation
from scaling.sim.policies.static import StaticPolicy
from scaling.sim.workload import Trace

ROOT = Path(__file__).resolve().parents[2]


def poisson_trace(rate_rps: float, duration_s: float, prompt: int = 500, output: int = 100, seed: int = 1) -> Trace:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate_rps, int(rate_rps * duration_s * 1.2)))
    arrivals = arrivals[arrivals < duration_s]
    count = len(arrivals)
    return Trace("poisson", arrivals, np.full(count, prompt), np.full(count, output))


@dataclass(frozen=True)
class ScriptedPolicy:
    """Replicas by time: the last step whose start is <= now."""

    steps: tuple[tuple[float, int], ...]
    name: str = "scripted"
    tick_s: float = 1.0

    def new_state(self) -> None:
        return None

    def decide(self, now: float, observation: Observation, state: None) -> int:
        return [replicas for start, replicas in self.steps if start <= now][-1]


@dataclass(frozen=True)
class LatencyReadingStatic(StaticPolicy):
    """`static` that asks the simulator for TTFT percentiles (as the headroom policy does)."""

    observes_latency: bool = True


def assert_refused(script: str, cases: tuple[tuple[list[str], str], ...]) -> None:
    """Each (arguments, message): the bench script exits non-zero with the message and no traceback."""
    for args, message in cases:
        run = subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert run.returncode != 0 and message in run.stderr and "Traceback" not in run.stderr, (args, run.stderr)
