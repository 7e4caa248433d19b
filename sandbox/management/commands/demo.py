"""`manage.py demo`: Headroom on its embedded default with a live fleet (what `make demo` runs).

Starts the sandbox (emulated vLLM pools behind a Kubernetes API emulator, scenario traffic, and
Debian's Prometheus when installed), registers it as the `sandbox` cluster of the ML Platform team,
runs the control loop in a background thread every 15 s (tasks run in-process: no Redis), and
serves the web UI. Ctrl-C stops everything it started. Every start removes the previous run's
sandbox cluster first (its proposals, incidents, alerts and history), so a new demo starts clean.

The default scenario is the story (sandbox/story.py, at 2x): one pool and its warm fallback, yesterday's
history with a peak the loop forecasts (a pre-scale waits in the inbox), an unforeseen 10x surge (the
safety net, the fallback, an incident), calm, and a warm-pool report; `[story mm:ss]` lines say what happens.

`--headless` runs a finite scenario with no web server and prints one JSON object (`sandbox/headless.py`).
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
import shutil
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from sandbox.prometheus import PrometheusError
from sandbox import beat, headless, story
from sandbox.registration import CLUSTER_NAME, RegistrationError, register, retire_previous
from sandbox.runtime import Sandbox, SandboxConfig
from sandbox.scenarios import SCENARIOS

TICK_EVERY_S = 15.0
DEMO_TEAM = "ml-platform"
MAX_SPEED = 20.0  # faster than this, two cores cannot emulate the fleet and the loop lags the scenario
MAX_HISTORY_H = 24 * 7  # as `manage.py sandbox`: a week of backfill
MAX_AUTO_APPROVE_AFTER_S = 3600.0  # an hour of scenario time: longer than any headless scenario runs


def port_refusal(port: int) -> str | None:
    """Why the web UI cannot listen on 127.0.0.1:`port`, or None. Asked before anything starts: runserver finds out
    only after the sandbox is up and registered, and its os._exit(1) leaves Prometheus running."""
    if not 1 <= port <= 65535:
        return f"--port must be between 1 and 65535, not {port}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as runserver binds
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            return f"--port {port}: 127.0.0.1:{port} is not free ({error.strerror or error}); choose another port"
    return None


def _check_bounded(option: str, value: float | None, high: float, unit: str) -> None:
    """0 to `high`, and a number: `nan` passes every `<` check and `1e400` reads as infinity."""
    if value is not None and not (math.isfinite(value) and 0 <= value <= high):
        raise CommandError(f"{option} must be 0 or more {unit}, at most {high:g} (not {value:g})")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = "Run the live demo: sandbox fleet, control loop and web UI on http://127.0.0.1:PORT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="web UI port (default 8000)")
        parser.add_argument("--pools", type=int, help="emulated vLLM pools (default 2; --headless runs 1)")
        parser.add_argument("--scenario", choices=SCENARIOS,
                            help="traffic (default story: the scripted day, sandbox/story.py; --headless: surge-10x)")
        parser.add_argument("--speed", type=float,
                            help=f"model seconds per wall second (default 1; story: {story.DEFAULT_SPEED:g}; "
                                 "--headless: 4)")
        parser.add_argument("--history", type=float,
                            help="hours of the scenario's past to backfill into Prometheus first (daily needs 26; "
                                 f"story: {story.HISTORY_HOURS:g} by default; --headless: {headless.HISTORY_HOURS:g}, "
                                 "yesterday's peak at the surge's hour, and 0 for none: the surge unforeseen)")
        parser.add_argument("--headless", action="store_true",
                            help="no web server: run a finite scenario, compare it with keda-queue, report JSON")
        parser.add_argument("--auto-approve-after-s", type=float,
                            help="--headless: a simulated on-call approves what waits for a person after this "
                                 "many scenario seconds (default 60)")
        parser.add_argument("--json", action="store_true", help="--headless: print the report as one JSON object")
        parser.add_argument("--no-fallback", action="store_true",
                            help="--headless: run Headroom without its warm fallback pool (to compare)")
        parser.add_argument("--no-spillover", action="store_true",
                            help="--headless: the gateway moves traffic to the fallback by the route's weights "
                                 "alone, with no per-request spill-over (to compare)")

    def handle(self, *args: Any, **options: Any) -> None:
        _check_bounded("--history", options["history"], MAX_HISTORY_H, "hours")
        _check_bounded("--auto-approve-after-s", options["auto_approve_after_s"], MAX_AUTO_APPROVE_AFTER_S, "seconds")
        if options["speed"] is not None and not 0 < options["speed"] <= MAX_SPEED:
            raise CommandError(f"--speed must be above 0 and at most {MAX_SPEED:g}")
        if not options["headless"]:
            for flag in ("auto_approve_after_s", "json", "no_fallback", "no_spillover"):
                if options[flag] not in (None, False):
                    raise CommandError(f"--{flag.replace('_', '-')} needs --headless")
        if not settings.KUBERNETES_ENABLED:
            raise CommandError("the demo acts on its sandbox cluster: run it with KUBERNETES_ENABLED=true (make demo does)")
        if options["headless"]:
            self._headless(options)
            return
        scenario = options["scenario"] or "story"
        if scenario == "story" and options["pools"] not in (None, 1):
            raise CommandError("the story plays on one pool (and its fallback): leave out --pools")
        refusal = port_refusal(options["port"])
        if refusal:
            raise CommandError(refusal)
        with_prometheus = shutil.which("prometheus") is not None and settings.PROMETHEUS_ENABLED
        if not with_prometheus:
            self.stderr.write("Prometheus is not installed (or PROMETHEUS_ENABLED is off): the loop will see "
                              "replica counts only and hold. `apt-get install prometheus` for the full demo.")
        config = self._config(scenario, options, with_prometheus)
        try:
            sandbox = Sandbox(config).start()
        except (ValueError, OSError, PrometheusError, RuntimeError) as error:
            raise CommandError(f"the sandbox did not start: {error}") from None
        started = time.time()  # the traffic starts as start() returns
        # The loop runs on the wall clock: an alert rule holds one scenario minute, not `speed` of them.
        settings.ALERT_HOLD_SCALE = 1.0 / config.speed
        stop = threading.Event()
        # runserver only stops cleanly on Ctrl-C: make SIGTERM the same, so Prometheus and the fleet stop too.
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            try:
                self.stdout.write(retire_previous())
                self.stdout.write(register(sandbox, team_slug=DEMO_TEAM))
            except RegistrationError as error:
                raise CommandError(str(error)) from None
            loop_thread = threading.Thread(target=self._run_loop, args=(stop,), name="control-loop", daemon=True)
            loop_thread.start()
            self.stdout.write(f"Control loop: every {TICK_EVERY_S:.0f} s on cluster {CLUSTER_NAME!r} "
                              f"({scenario} traffic at {config.speed:g}x). "
                              f"Prometheus: {sandbox.prometheus.url if sandbox.prometheus else 'off'}")
            if scenario == "story" and sandbox.fallback_spec is not None:
                director = story.Director(sandbox.primary_specs[0].name, sandbox.fallback_spec.name, config.speed,
                                          self.stdout.write, started)
                threading.Thread(target=director.run, args=(stop,), name="story", daemon=True).start()
            self.stdout.write(f"Headroom is at http://127.0.0.1:{options['port']}/  "
                              "(log in as alice or bob, password headroom-demo; Ctrl-C stops everything)")
            call_command("runserver", f"127.0.0.1:{options['port']}", use_reloader=False)
        finally:
            stop.set()
            sandbox.stop()
            self.stderr.write("demo stopped")

    def _config(self, scenario: str, options: dict[str, Any], with_prometheus: bool) -> SandboxConfig:
        """The sandbox for the live demo; the story's has one pool, its warm fallback and yesterday's history."""
        if scenario != "story":
            return SandboxConfig(pools=options["pools"] or 2, scenario=scenario, speed=options["speed"] or 1.0,
                                 prometheus=with_prometheus, scrape_interval_s=5.0,
                                 history_hours=options["history"] or 0.0, traces_dir=Path(settings.TRACES_DIR))
        speed = options["speed"] or story.DEFAULT_SPEED
        config = SandboxConfig(pools=1, scenario=scenario, speed=speed, prometheus=with_prometheus,
                               # Two samples in every rate window (registration.sandbox_rate_window) at any speed.
                               scrape_interval_s=max(1.0, min(5.0, 20.0 / speed)),
                               history_hours=story.HISTORY_HOURS if options["history"] is None else options["history"],
                               traffic_after_ready=True)  # the story starts from a serving pool, not a cold start
        # No per-request spill-over here (the headless run has it): with it, the surge's TTFT p99 can stay under
        # the P0 rule's 5 s, and the story's incident, one of the things it is there to show, does not open.
        return dataclasses.replace(config, fallback_replicas=headless.fallback_replicas(config))

    def _headless(self, options: dict[str, Any]) -> None:
        scenario = options["scenario"] or "surge-10x"
        if scenario not in headless.HEADLESS_SCENARIOS:
            raise CommandError(f"--headless needs a scenario with an end: {', '.join(headless.HEADLESS_SCENARIOS)} "
                               f"(not {scenario})")
        if options["pools"] not in (None, 1):
            raise CommandError("--headless runs one pool: leave out --pools")
        wait_s = 60.0 if options["auto_approve_after_s"] is None else options["auto_approve_after_s"]
        if not (shutil.which("prometheus") and settings.PROMETHEUS_ENABLED):
            raise CommandError("--headless needs Prometheus: install it (make system-deps) and set PROMETHEUS_ENABLED=true")
        call_command("seed_demo", stdout=io.StringIO())  # the on-call approver and the ML Platform team
        run = headless.HeadlessOptions(scenario=scenario, speed=options["speed"] or 4.0, auto_approve_after_s=wait_s,
                                       team_slug=DEMO_TEAM, fallback=not options["no_fallback"],
                                       spillover_wait_share=None if options["no_spillover"] else headless.SPILLOVER_WAIT_SHARE,
                                       history_hours=(headless.HISTORY_HOURS if options["history"] is None
                                                      else options["history"]))
        try:
            report = headless.run(run, lambda line: self.stderr.write(line))
        except (ValueError, OSError, PrometheusError, RegistrationError, RuntimeError) as error:
            raise CommandError(f"the headless run failed: {error}") from None
        self.stdout.write(json.dumps(report) if options["json"] else json.dumps(report, indent=2))

    def _run_loop(self, stop: threading.Event) -> None:
        while not stop.wait(TICK_EVERY_S):
            try:
                close_old_connections()
                beat.run_once(self.stdout.write)
            except Exception as error:  # the demo keeps going; the next tick tries again
                self.stderr.write(f"[loop] tick failed: {type(error).__name__}: {error}")
