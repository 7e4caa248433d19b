"""`manage.py demo`: Headroom on its embedded default with a live fleet (what `make demo` runs).

Starts the sandbox (emulated vLLM pools behind a Kubernetes API emulator, scenario traffic, and
Debian's Prometheus when installed), registers it as the `sandbox` cluster of the ML Platform team,
runs the control loop in a background thread every 15 s (tasks run in-process: no Redis), and
serves the web UI. Ctrl-C stops everything it started.
"""
from __future__ import annotations

import shutil
import signal
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from sandbox.prometheus import PrometheusError
from sandbox.registration import CLUSTER_NAME, RegistrationError, register
from sandbox.runtime import Sandbox, SandboxConfig
from sandbox.scenarios import SCENARIOS

TICK_EVERY_S = 15.0
DEMO_TEAM = "ml-platform"


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = "Run the live demo: sandbox fleet, control loop and web UI on http://127.0.0.1:PORT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="web UI port (default 8000)")
        parser.add_argument("--pools", type=int, default=2, help="emulated vLLM pools (default 2)")
        parser.add_argument("--scenario", default="surge", choices=SCENARIOS,
                            help="traffic (default surge: 10x for 5 of every 15 minutes)")
        parser.add_argument("--speed", type=float, default=1.0, help="model seconds per wall second (default 1)")
        parser.add_argument("--history", type=float, default=0.0,
                            help="hours of the scenario's past to backfill into Prometheus first (daily needs 26)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["history"] < 0:
            raise CommandError("--history must be 0 or more hours")
        if not settings.KUBERNETES_ENABLED:
            raise CommandError("the demo acts on its sandbox cluster: run it with KUBERNETES_ENABLED=true (make demo does)")
        with_prometheus = shutil.which("prometheus") is not None and settings.PROMETHEUS_ENABLED
        if not with_prometheus:
            self.stderr.write("Prometheus is not installed (or PROMETHEUS_ENABLED is off): the loop will see "
                              "replica counts only and hold. `apt-get install prometheus` for the full demo.")
        config = SandboxConfig(pools=options["pools"], scenario=options["scenario"], speed=options["speed"],
                               prometheus=with_prometheus, scrape_interval_s=5.0, history_hours=options["history"],
                               traces_dir=Path(settings.TRACES_DIR))
        try:
            sandbox = Sandbox(config).start()
        except (ValueError, OSError, PrometheusError) as error:
            raise CommandError(f"the sandbox did not start: {error}") from None
        stop = threading.Event()
        # runserver only stops cleanly on Ctrl-C: make SIGTERM the same, so Prometheus and the fleet stop too.
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            try:
                self.stdout.write(register(sandbox, team_slug=DEMO_TEAM))
            except RegistrationError as error:
                raise CommandError(str(error)) from None
            loop_thread = threading.Thread(target=self._run_loop, args=(stop,), name="control-loop", daemon=True)
            loop_thread.start()
            self.stdout.write(f"Control loop: every {TICK_EVERY_S:.0f} s on cluster {CLUSTER_NAME!r} "
                              f"({options['scenario']} traffic). Prometheus: {sandbox.prometheus.url if sandbox.prometheus else 'off'}")
            self.stdout.write(f"Headroom is at http://127.0.0.1:{options['port']}/  "
                              "(log in as alice or bob, password headroom-demo; Ctrl-C stops everything)")
            call_command("runserver", f"127.0.0.1:{options['port']}", use_reloader=False)
        finally:
            stop.set()
            sandbox.stop()
            self.stderr.write("demo stopped")

    def _run_loop(self, stop: threading.Event) -> None:
        from controlplane.models import Pool
        from scaling import loop, tasks

        while not stop.wait(TICK_EVERY_S):
            try:
                close_old_connections()
                tasks.advance_executions()
                pools = list(Pool.objects.filter(cluster__name=CLUSTER_NAME).select_related("cluster", "team")
                             .prefetch_related("slos", "schedules"))
                for pool in loop.tick(pools).pools:
                    for action in pool.did:
                        self.stdout.write(f"[loop] {pool.pool}: {action}")
            except Exception as error:  # the demo keeps going; the next tick tries again
                self.stderr.write(f"[loop] tick failed: {type(error).__name__}: {error}")
