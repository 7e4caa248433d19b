"""`manage.py warm_pool_report POOL [--days 7] [--trace PATH] [--sizes 0,10,...] [--json]`.

Runs a warm-pool report in this process (no worker needed), with a progress bar on stderr; stores
it like one asked for in the browser or the API, prints the table (or the JSON) and writes the
charts and the CSV into `--out`.
"""
from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane import services as core
from controlplane.charts import cost_latency_curve, worst_day_chart
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import report_service, reports
from scaling.choices import ReportState

BAR_WIDTH = 30


def find_pool(wanted: str) -> Pool:
    pools = [pool for pool in Pool.objects.select_related("cluster")
             if wanted in (pool.name, f"{pool.cluster.name}/{pool.name}", str(pool.pk))]
    if not pools:
        known = ", ".join(sorted(str(pool) for pool in Pool.objects.select_related("cluster"))) or "none"
        raise CommandError(f"No pool named {wanted!r}. Known: {known}")
    if len(pools) > 1:
        raise CommandError(f"{wanted!r} names {len(pools)} pools; use CLUSTER/NAME: {', '.join(map(str, pools))}")
    return pools[0]


def table(result: dict[str, Any]) -> str:
    header = ("warm %", "GPU-h", "on-demand $", "spot $", "+cost %", "+$/month", "TTFT p95/p99 ms", "e2e p95/p99 ms",
              "SLO met", "cold-start misses", "worst minute", "")
    lines = [header]
    for row in result["rows"]:
        worst = "-" if row["worst_minute_s"] is None else (
            f"{_at(row['worst_minute_s'], result)} ({row['worst_minute_misses']:,})")
        marks = " ".join(mark for mark, on in (("current", row["current"]), ("RECOMMENDED", row["recommended"]),
                                                ("FLAG >" + f"{result['flag_above_pct']:g} %", row["flagged"])) if on)
        spot = "-" if row["cost_spot_usd"] is None else f"{row['cost_spot_usd']:,.0f}"
        lines.append((f"{row['warm_pool_pct']:g}", f"{row['gpu_hours']:,.1f}", f"{row['cost_on_demand_usd']:,.0f}", spot,
                      f"{row['extra_cost_pct']:+.1f}", f"{row['extra_cost_usd_per_month']:+,.0f}",
                      f"{_ms(row['ttft_p95_ms'])} / {_ms(row['ttft_p99_ms'])}",
                      f"{_ms(row['e2e_p95_ms'])} / {_ms(row['e2e_p99_ms'])}", f"{row['slo_attainment']:.2%}",
                      f"{row['cold_start_requests']:,}", worst, marks))
    if (result.get("fallback") or {}).get("replayed"):  # the fallback column: SLO met, share on it, +$/month
        lines[0] = (*header[:-1], "with fallback: SLO met / share / +$/month", "")
        for number, row in enumerate(result["rows"], start=1):
            cells, line = row["with_fallback"], lines[number]
            lines[number] = (*line[:-1], f"{cells['slo_attainment']:.2%} / {cells['fallback_share']:.0%} / "
                                         f"{cells['extra_cost_usd_per_month']:+,.0f}", line[-1])
        header = lines[0]
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)


def _ms(value: float | None) -> str:
    """A latency, or "-" where the replay had none to measure (stored as null)."""
    return "-" if value is None else f"{value:,.0f}"


def _at(seconds: float, result: dict[str, Any]) -> str:
    day, rest = divmod(int(seconds), 86_400)
    return f"day {day + 1} {rest // 3600:02d}:{rest % 3600 // 60:02d}"


def write_files(report_id: int, result: dict[str, Any], folder: Path) -> list[Path]:
    """The curve and the worst day as SVG, the rows as CSV and the whole report as JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        f"warm-pool-report-{report_id}-curve.svg": str(cost_latency_curve(result["rows"], result["slo"]["objective"])),
        f"warm-pool-report-{report_id}-worst-day.svg": str(worst_day_chart(result["worst_day"], result["slo"]["ttft_ms"])),
        f"warm-pool-report-{report_id}.csv": reports.rows_csv(result),
        f"warm-pool-report-{report_id}.json": json.dumps(result, indent=1),
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    return [folder / name for name in files]


def output_folder(given: str) -> Path:
    """`--out`, made before the replay so that a bad one is not found after it."""
    folder = Path(given)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"--out: cannot use {folder} as a folder: {exc.strerror or exc}") from None
    return folder


def read_trace(given: str) -> tuple[str, bytes]:
    """`--trace`'s name and bytes; its size is checked before anything is read."""
    path = Path(given)
    try:
        status = path.stat()
    except OSError:
        raise CommandError(f"--trace: no such file: {path}") from None
    if not stat.S_ISREG(status.st_mode):
        raise CommandError(f"--trace: {path} is not a regular file")
    if status.st_size > report_service.MAX_TRACE_BYTES:
        raise CommandError(f"--trace: {path} is {status.st_size / 1e6:.0f} MB; at most "
                           f"{report_service.MAX_TRACE_BYTES / 1e6:.0f} MB")
    return path.name, path.read_bytes()


class Command(BaseCommand):
    help = "Replay a pool's traffic at each warm-pool size and report cost against latency (docs/reports.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("pool", help="the pool: its name, CLUSTER/NAME when names repeat, or its id")
        parser.add_argument("--days", type=float, default=reports.DEFAULT_DAYS,
                            help="the last D days of the history or the trace (default 7)")
        parser.add_argument("--trace", help="replay this trace file instead of the stored history")
        parser.add_argument("--sizes", default=",".join(f"{size:g}" for size in reports.DEFAULT_SIZES_PCT),
                            help="warm-pool sizes, percent of the expected peak (default 0,10,...,60; "
                                 "the current setting is always added)")
        parser.add_argument("--rate-scale", type=float, default=1.0,
                            help="multiply the traffic by K (what if it grew; default 1: as recorded)")
        parser.add_argument("--peak", default="forecast", choices=["forecast", "day-peak"],
                            help="what a size is a share of: the planner's 30-minute forecast (today's warm floor, "
                                 "default) or the last 24 hours' peak (a proposed standing floor)")
        parser.add_argument("--workers", type=int, default=1, help="replay sizes in N processes (default 1)")
        parser.add_argument("--out", default=".", help="folder for the SVG charts, CSV and JSON (default .)")
        parser.add_argument("--json", action="store_true", help="print the report as one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        pool = find_pool(options["pool"])
        # Every option is checked before the report row exists: a refused one leaves nothing behind.
        if options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        try:
            sizes = reports.parse_sizes(options["sizes"])
            report_service.check_days(options["days"])
            trace_name, trace_data = read_trace(options["trace"]) if options["trace"] else ("", None)
            out = output_folder(options["out"])
            report = report_service.request_report(
                pool, core.Actor(user=None, channel=Channel.CLI), days=options["days"], sizes_pct=sizes,
                trace_name=trace_name, trace_data=trace_data, rate_scale=options["rate_scale"],
                peak_basis=options["peak"], enqueue=False)
        except (reports.ReportInputError, report_service.ReportRequestError) as exc:
            raise CommandError(str(exc)) from None
        try:
            finished = report_service.run(report.pk, workers=options["workers"], progress=self._bar)
        except KeyboardInterrupt:  # run() has ended the report failed, "interrupted"
            sys.stderr.write("\n")
            raise CommandError(f"report #{report.pk} interrupted", returncode=130) from None
        sys.stderr.write("\n")
        if finished is None:
            raise CommandError(f"report #{report.pk} is gone: its pool was deleted while it ran")
        report = finished
        if report.state != ReportState.SUCCEEDED:
            raise CommandError(f"report #{report.pk} failed: {report.error}")
        result = report.result
        if options["json"]:
            self.stdout.write(json.dumps({"id": report.pk, "pool": str(pool), **result}))
        else:
            self.stdout.write(f"Warm-pool report #{report.pk} for {pool}: {result['period']['days']:g} days "
                              f"({result['period']['source']})\n")
            self.stdout.write(table(result) + "\n\n" + result["recommendation"] + "\n")
            if result.get("observed_vs_replay", {}) and result["observed_vs_replay"].get("summary"):
                self.stdout.write(result["observed_vs_replay"]["summary"] + "\n")
            fallback = result.get("fallback") or {}
            if fallback and not fallback.get("replayed"):
                self.stdout.write(f"Fallback {fallback['model']}: not replayed, {fallback['why_not']}.\n")
        for path in write_files(report.pk, result, out):
            sys.stderr.write(f"wrote {path}\n")
        sys.stderr.write(f"report #{report.pk} took {result['wall_s']:.1f} s\n")

    @staticmethod
    def _bar(share: float) -> None:
        filled = int(share * BAR_WIDTH)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share * 100:5.1f} %")
        sys.stderr.flush()
