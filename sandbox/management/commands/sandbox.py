"""`manage.py sandbox`: start the whole sandbox, print its addresses, run until Ctrl-C or SIGTERM."""
from __future__ import annotations

import json
import math
import signal
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sandbox.prometheus import PrometheusError
from sandbox.runtime import Sandbox, SandboxConfig
from sandbox.scenarios import SCENARIOS

STATUS_EVERY_S = 10.0
MAX_SPEED = 100.0  # as a drill's: faster, the emulated replicas' threads cannot keep the model clock
MAX_COLD_START_S = 3600.0  # model seconds; an hour is already far past any profile's p95
MAX_SCRAPE_INTERVAL_S = 300.0  # Prometheus's rate windows need a few samples; five minutes is the most that helps
MAX_HISTORY_H = 24 * 7


def _check_within(option: str, value: float, low: float, high: float, *, low_allowed: bool = True) -> None:
    above_low = value >= low if low_allowed else value > low
    if not (math.isfinite(value) and above_low and value <= high):
        lowest = f"{low:g} or more" if low_allowed else f"greater than {low:g}"
        raise CommandError(f"{option} must be {lowest} and at most {high:g} (not {value:g})")


class Command(BaseCommand):
    help = ("Start the sandbox: emulated vLLM pools, a Kubernetes API, a route gateway, Prometheus and "
            "scenario traffic. Ctrl-C or SIGTERM stops everything it started.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pools", type=int, default=2, help="number of vLLM pools (default 2)")
        parser.add_argument("--scenario", default="steady", choices=SCENARIOS,
                            help="traffic to send through the route (default steady)")
        parser.add_argument("--speed", type=float, default=1.0,
                            help="model seconds per wall second: compresses latency, cold starts and traffic")
        parser.add_argument("--replicas", type=int, default=1, help="replicas per pool at start (default 1)")
        parser.add_argument("--cold-start", type=float, default=None,
                            help="cold start in model seconds (default: each profile's p50)")
        parser.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus")
        parser.add_argument("--scrape-interval", type=float, default=5.0, help="Prometheus scrape interval, s")
        parser.add_argument("--history", type=float, default=0.0, metavar="HOURS",
                            help="backfill Prometheus with this many hours of the scenario's past traffic")
        parser.add_argument("--register", action="store_true",
                            help="create or update the Cluster and Pool records for this sandbox")
        parser.add_argument("--json", action="store_true",
                            help="print the addresses as one JSON object on the first line")

    def handle(self, *args: Any, **options: Any) -> None:
        config = self._config(options)
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            sandbox = Sandbox(config).start()
        except (ValueError, OSError, PrometheusError) as error:
            raise CommandError(f"the sandbox did not start: {error}") from None
        try:
            if options["register"]:
                from sandbox.registration import RegistrationError, register

                try:
                    summary = register(sandbox)
                except RegistrationError as error:
                    raise CommandError(str(error)) from None
            description = sandbox.describe()
            if options["json"]:
                self.stdout.write(json.dumps(description))
                self.stdout.flush()
            else:
                self._print_addresses(description, sandbox.gateway.url)
            if options["register"]:
                self.stderr.write(summary)
            while not stop.wait(STATUS_EVERY_S):
                if not options["json"]:
                    self.stdout.write(sandbox.status_line())
        finally:
            report = sandbox.traffic.report().summary() if sandbox.traffic else None
            sandbox.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stderr.write("sandbox stopped" + (f"; clients saw {json.dumps(report)}" if report else ""))

    @staticmethod
    def _config(options: dict[str, Any]) -> SandboxConfig:
        if options["pools"] < 1:
            raise CommandError("--pools must be at least 1")
        if options["replicas"] < 0:
            raise CommandError("--replicas must be 0 or more")
        # `nan <= 0` is False: each number must be finite before its range means anything.
        _check_within("--speed", options["speed"], 0, MAX_SPEED, low_allowed=False)
        if options["cold_start"] is not None:
            _check_within("--cold-start", options["cold_start"], 0, MAX_COLD_START_S)
        _check_within("--scrape-interval", options["scrape_interval"], 0, MAX_SCRAPE_INTERVAL_S, low_allowed=False)
        _check_within("--history", options["history"], 0, MAX_HISTORY_H)
        return SandboxConfig(
            pools=options["pools"], scenario=options["scenario"], speed=options["speed"],
            replicas=options["replicas"], cold_start_s=options["cold_start"],
            prometheus=not options["no_prometheus"], scrape_interval_s=options["scrape_interval"],
            traces_dir=Path(settings.TRACES_DIR), history_hours=options["history"],
        )

    def _print_addresses(self, description: dict[str, Any], route_url: str) -> None:
        self.stdout.write(f"Kubernetes API  {description['kube_api']}")
        self.stdout.write(f"Route (gateway) {route_url}/v1/completions")
        self.stdout.write(f"Prometheus      {description['prometheus'] or '(not running)'}")
        for pool in description["pools"]:
            self.stdout.write(f"pool {pool['namespace']}/{pool['name']}  model {pool['model']}  "
                              f"route {pool['route']}")
            for url in pool["replicas"]:
                self.stdout.write(f"    replica {url}")
        self.stdout.write("Ctrl-C stops everything.")
