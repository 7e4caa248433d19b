"""Fixtures of the real-vLLM tier: one real vLLM server and one emulated replica per session."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import realvllm

EMULATED_MODEL = "emulated-llama"  # another name than the real one, so PromQL tells them apart


_TIMINGS: dict = {}


@pytest.fixture(scope="session")
def real_vllm_timings() -> dict:
    """Measured install/build/start/stop seconds and load results, printed at the end."""
    return _TIMINGS


def pytest_terminal_summary(terminalreporter) -> None:
    if _TIMINGS:
        terminalreporter.write_sep("-", "real vLLM tier")
        terminalreporter.write_line(json.dumps(_TIMINGS, sort_keys=True))


@pytest.fixture(scope="session")
def real_vllm_url(real_vllm_timings: dict) -> Iterator[str]:
    """A real vLLM 0.32.0 OpenAI server on the CPU (installed and built on first use)."""
    started = time.monotonic()
    # dev mode adds the /sleep routes; on CPU they switch the state but free no memory.
    with realvllm.running_vllm(dev_mode=True, max_num_seqs=8, info=real_vllm_timings) as url:
        yield url
    real_vllm_timings["session_s"] = round(time.monotonic() - started, 1)
    realvllm.LOG_DIR.mkdir(parents=True, exist_ok=True)
    (realvllm.LOG_DIR / "last-tier-timings.json").write_text(json.dumps(real_vllm_timings, indent=2))


@pytest.fixture(scope="session")
def emulated_replica():
    """One replica of the sandbox's fleet emulator, shaped like the real server."""
    from sandbox.fleet import Fleet

    with Fleet(speed=1.0) as fleet:
        replica = fleet.add_replica(EMULATED_MODEL, cold_start_s=0.0, max_model_len=realvllm.MAX_MODEL_LEN)
        assert replica.wait_ready(timeout=10), "the emulated replica did not become ready"
        yield replica


@pytest.fixture(scope="session")
def emulator_url(emulated_replica) -> str:
    return emulated_replica.base_url


@pytest.fixture(scope="session")
def report_dir() -> Path:
    realvllm.LOG_DIR.mkdir(parents=True, exist_ok=True)
    return realvllm.LOG_DIR
