"""Runs Debian's `prometheus` binary for the sandbox, scraping the emulated vLLM replicas.

No systemd: the launcher starts the binary itself on a free loopback port with a private data
directory, and keeps a file-based service discovery file current as replicas come and go (the
binary notices the atomic rename within a second). Stop it with `stop()` or use it as a context
manager. Needs the Debian package `prometheus` (2.42 in bookworm): `apt-get install -y prometheus`.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from sandbox.fleet import Fleet
from sandbox.replica import EmulatedReplica

STARTUP_TIMEOUT_S = 60.0


class PrometheusError(RuntimeError):
    """Prometheus is missing, would not start, or answered with an error."""


@dataclass(frozen=True)
class ScrapeTarget:
    address: str  # host:port
    labels: dict[str, str]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def target_for(replica: EmulatedReplica) -> ScrapeTarget:
    """Labels as a PodMonitor with the usual relabelling gives them: namespace and pod (no Deployment:
    Headroom reads it from the pod's name, as it must on a real cluster)."""
    namespace = replica.pool.rpartition("/")[0]
    return ScrapeTarget(f"{replica.host}:{replica.port}", {"namespace": namespace or "default", "pod": replica.name})


class PrometheusLauncher:
    def __init__(self, scrape_interval_s: float = 5.0, binary: str | None = None,
                 data_dir: str | Path | None = None) -> None:
        self.scrape_interval_s = scrape_interval_s
        self.binary = binary or shutil.which("prometheus") or "/usr/bin/prometheus"
        self._own_dir = data_dir is None
        self.dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="headroom-prometheus-"))
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._targets: list[ScrapeTarget] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def targets_file(self) -> Path:
        return self.dir / "targets" / "vllm.json"

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> PrometheusLauncher:
        if not os.access(self.binary, os.X_OK):
            raise PrometheusError(f"the prometheus binary was not found at {self.binary}; "
                                  "install Debian's package: apt-get install -y prometheus")
        self.targets_file.parent.mkdir(parents=True, exist_ok=True)
        self.set_targets(self._targets)
        config = self.dir / "prometheus.yml"
        config.write_text(self._config())
        for attempt in range(3):  # another process may take the free port before Prometheus binds it
            self.port = free_port()
            with (self.dir / "prometheus.log").open("wb") as log:
                self._process = subprocess.Popen(
                    [self.binary, f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=15d",
                     "--log.level=warn"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                self._wait_ready()
                return self
            except PrometheusError:
                if attempt == 2 or "address already in use" not in self._log_tail():
                    self.stop()
                    raise
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrometheusLauncher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _config(self) -> str:
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        return (
            "global:\n"
            f"  scrape_interval: {interval}\n"
            f"  scrape_timeout: {interval}\n"
            f"  evaluation_interval: {interval}\n"
            "scrape_configs:\n"
            "  - job_name: vllm\n"
            "    file_sd_configs:\n"
            f"      - files: ['{self.targets_file}']\n"
            "        refresh_interval: 1s\n"
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise PrometheusError(f"prometheus exited at start-up: {self._log_tail()}")
            try:
                if requests.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise PrometheusError(f"prometheus was not ready within {STARTUP_TIMEOUT_S:.0f} s")

    def _log_tail(self) -> str:
        try:
            return (self.dir / "prometheus.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def backfill(self, openmetrics: str) -> None:
        """Turn OpenMetrics samples (with timestamps) into TSDB blocks; call before `start()`."""
        if self._process is not None:
            raise PrometheusError("backfill before start: Prometheus only loads these blocks at start-up")
        promtool = shutil.which("promtool") or "/usr/bin/promtool"
        if not os.access(promtool, os.X_OK):
            raise PrometheusError("promtool was not found; it comes with Debian's prometheus package")
        source = self.dir / "history.om"
        source.write_text(openmetrics)
        done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source),
                               str(self.dir / "data")], capture_output=True, text=True, timeout=300)
        source.unlink()
        if done.returncode != 0:
            raise PrometheusError(f"promtool could not backfill: {(done.stderr or done.stdout)[-1000:]}")

    # --- service discovery -----------------------------------------------------------------
    def set_targets(self, targets: list[ScrapeTarget]) -> None:
        """Replace the scrape targets (atomic rename, so Prometheus never reads half a file)."""
        self._targets = list(targets)
        if not self.targets_file.parent.exists():
            return
        groups = [{"targets": [t.address], "labels": t.labels} for t in targets]
        temporary = self.targets_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(groups, indent=1))
        temporary.replace(self.targets_file)

    def follow(self, fleet: Fleet) -> None:
        """Keep the targets equal to the fleet's replicas from now on."""
        def refresh() -> None:
            self.set_targets([target_for(replica) for replica in fleet.replicas()])

        fleet.subscribe(refresh)
        refresh()

    # --- queries ---------------------------------------------------------------------------
    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector; PrometheusError on an error answer."""
        response = requests.get(self.url + "/api/v1/query", params={"query": promql}, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise PrometheusError(f"query {promql!r} failed: {body.get('error', response.text)}")
        return body["data"]["result"]

    def wait_for_up(self, addresses: list[str] | None = None, timeout: float = 30.0) -> None:
        """Wait until every given target (default: all current targets) is scraped with up == 1."""
        wanted = set(addresses if addresses is not None else [t.address for t in self._targets])
        deadline = time.monotonic() + timeout
        up: set[str] = set()
        while time.monotonic() < deadline:
            up = {series["metric"].get("instance", "") for series in self.query('up{job="vllm"} == 1')}
            if wanted <= up:
                return
            time.sleep(0.25)
        raise PrometheusError(f"targets not up within {timeout:.0f} s: {sorted(wanted - up)}")
