"""`manage.py tick [--pool NAME] [--json]`: one control-loop iteration now, with what it read, decided, did."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scaling import loop, tasks


class Command(BaseCommand):
    help = "Run one control-loop iteration now, synchronously, and print what it read, decided and did."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pool", help="only this pool (its name, or CLUSTER/NAME when names repeat)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        pools = everything = list(loop.loop_pools())
        if options["pool"] is not None:
            wanted = options["pool"].strip()
            if not wanted:
                raise CommandError("--pool needs a pool name (leave it out to tick every pool)")
            pools = [p for p in pools if wanted in (p.name, f"{p.cluster.name}/{p.name}")]
            if not pools:
                raise CommandError(f"No pool named {wanted!r}. Known: {', '.join(sorted(map(str, everything)))}")
            if len(pools) > 1:
                raise CommandError(f"{wanted!r} names {len(pools)} pools; use CLUSTER/NAME: {', '.join(map(str, pools))}")
        tasks.advance_executions()
        report = loop.tick(pools)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), default=str))
        else:
            self._print(report)
        if report.errors:
            # A tick that failed somewhere must fail for scripts and cron too, not only print it.
            raise CommandError(f"{len(report.errors)} error(s) in this tick (listed above)")

    def _print(self, report: loop.TickReport) -> None:
        for pool in report.pools:
            read, decided = pool.read, pool.decided

            def show(value: Any, unit: str = "") -> str:
                return "unknown" if value is None else f"{value:g}{unit}"

            self.stdout.write(f"{pool.pool}")
            self.stdout.write(
                f"  read     ready {show(read['ready_replicas'])}, desired {show(read['desired_replicas'])}, "
                f"queue {show(read['queue_depth'])}, {show(read['request_rate_rps'], ' req/s')}, "
                f"TTFT p95 {show(read['ttft_p95_s'], ' s')}"
            )
            self.stdout.write(
                f"  decided  target {show(decided['target_replicas'])} ({decided['binding']}; "
                f"{', '.join(decided['reasons'])})"
            )
            self.stdout.write("  did      " + ("; ".join(pool.did) if pool.did else "nothing"))
        for where, error in report.errors.items():
            self.stderr.write(f"error: {where}: {error}")
        for cluster, why in report.skipped.items():
            self.stdout.write(f"skipped cluster {cluster}: {why}")
        if report.expired:
            self.stdout.write(f"expired {report.expired} proposal(s)")
