"""Warm-pool reports, the Django side: ask for one, run it in a worker, keep the answer.

The computation is `scaling/reports.py` (pure); this module reads what it needs from the database
(the pool's profile, SLO, prices, measured cold starts and stored request history), owns the
report's states (`pending → running → succeeded | failed`, a conditional UPDATE per move) and
writes the progress on the row. Kept apart from `scaling/services.py` (the proposals' workflows).
"""
from __future__ import annotations

import logging
import math
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import AuditAction, SloIndicator
from controlplane.models import Pool
from scaling import reports
from scaling.choices import REPORT_ACTIVE_STATES, PeakBasis, ReportState
from scaling.models import ColdStart, FallbackPolicy, SignalSample, WarmPoolReport
from scaling.sim import transforms
from scaling.sim.loaders import TraceFormatError, load_trace
from scaling.sim.profiles import DEFAULT_PROFILE, PROFILES, PoolProfile, get_profile
from scaling.sim.workload import Workload

if TYPE_CHECKING:
    from incidents.models import Incident

logger = logging.getLogger(__name__)

MAX_DAYS = 9.0  # stored samples are kept SIGNAL_SAMPLE_RETENTION_DAYS (9 by default; scaling/loop.py prune_samples)
MIN_DAYS = 0.01  # about a quarter of an hour
MAX_TRACE_BYTES = 50 * 1024 * 1024
RUN_LEASE = timedelta(minutes=30)  # a worker that died mid-report frees it after this; each progress write renews it
# A pending report no worker took in this long lost its task (a broker outage, a CLI killed before it
# started): the sweep hands it to a worker again.
PENDING_PICKUP = timedelta(minutes=10)
# A report asked for this long ago that is still not done killed its worker every time: the sweep ends it
# instead of handing it out again, so one poisonous report cannot take workers down forever.
GIVE_UP_AFTER = timedelta(hours=6)
PROGRESS_EVERY_S = 1.0  # percent done is written at most this often
COLD_STARTS_READ = 200  # the most recent measurements make the distribution
WHAT_IF_WARMUP_S = 1800.0  # an incident's replay starts this long before its window (seen, not scored)
WHAT_IF_MAX_WINDOW_S = 24 * 3600.0  # a longer incident is replayed over its first day
WHAT_IF_DEFAULT_SIZES_PCT = (0, 20, 40, 60, 80, 100)  # of the day's peak: an incident is about the peak
# Replayed request by request (the what-if counts requests) when the window holds at most this many;
# above it, in fluid mode (minute by minute, the same arithmetic on expected counts).
WHAT_IF_REQUEST_MODE_MAX = 400_000


class ReportRequestError(ValueError):
    """A report that cannot be asked for; `field` names the input at fault (the API's 400)."""

    def __init__(self, message: str, field: str = "non_field_errors") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Inputs:
    workload: Workload
    spec: reports.ReportSpec
    recorded: reports.Recorded | None


# ---------------------------------------------------------------------------- asking


def check_days(days: float) -> float:
    if not (isinstance(days, (int, float)) and math.isfinite(days) and MIN_DAYS <= days <= MAX_DAYS):
        raise ReportRequestError(f"days must be between {MIN_DAYS:g} and {MAX_DAYS:g}, got {days}", "days")
    return float(days)


class _UploadedTraceError(TraceFormatError):
    """A loader's error with the temporary copy's path replaced by the name the person sent."""

    def __init__(self, message: str) -> None:
        ValueError.__init__(self, message)


class _RunLost(Exception):
    """The run is no longer this worker's: its lease ran out and another took it, or the report is gone."""


def check_trace(name: str, data: bytes, days: float = reports.DEFAULT_DAYS) -> Workload:
    """Parse an uploaded trace (any format the replay reads) and check its last `days` as the run will;
    a malformed one names line and column, one that cannot be replayed says why."""
    if len(data) > MAX_TRACE_BYTES:
        raise ReportRequestError(f"the trace is {len(data) / 1e6:.0f} MB; at most {MAX_TRACE_BYTES / 1e6:.0f} MB", "trace")
    try:
        return reports.replayable_window(_load_trace_bytes(name, data), days, reports.WARMUP_S)
    except (TraceFormatError, ValueError) as exc:
        raise ReportRequestError(f"the trace cannot be read: {exc}", "trace") from None


def _load_trace_bytes(name: str, data: bytes) -> Workload:
    suffix = ".tar.gz" if name.endswith((".tar.gz", ".tgz")) else Path(name).suffix or ".csv"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"trace{suffix}"
        path.write_bytes(data)
        try:  # an archive may unpack to no more than a plain trace may weigh
            workload = load_trace(path, max_unpacked_bytes=MAX_TRACE_BYTES)
        except TraceFormatError as exc:  # name the file the person sent (and its members), never the copy
            message = str(exc)
            if message.startswith(f"{path}, "):  # "NAME: line 3, column 2: ..."
                message = f"{name}: {message.removeprefix(f'{path}, ')}"
            raise _UploadedTraceError(message.replace(str(path), name)) from None
    if workload.expected_requests <= 0:
        raise TraceFormatError(name, None, None, "no requests in the trace")
    return workload


def _fitting_trace_name(name: str) -> str:
    """The uploaded name cut to the column's width, keeping its ending (the format is read from it)."""
    width = WarmPoolReport._meta.get_field("trace_name").max_length
    if len(name) <= width:
        return name
    ending = name[-20:]
    return name[:width - len(ending) - 1] + "…" + ending


def request_report(pool: Pool, actor: core.Actor, *, days: float = reports.DEFAULT_DAYS,
                   sizes_pct: tuple[float, ...] = reports.DEFAULT_SIZES_PCT, trace_name: str = "",
                   trace_data: bytes | None = None, rate_scale: float = 1.0, peak_basis: str = PeakBasis.FORECAST,
                   enqueue: bool = True) -> WarmPoolReport:
    """Check the inputs, store a pending report (audited) and hand it to a worker after the commit."""
    days = check_days(days)
    if not (math.isfinite(rate_scale) and 0 < rate_scale <= 1000):
        raise ReportRequestError(f"rate_scale must be above 0 and at most 1000, got {rate_scale}", "rate_scale")
    if peak_basis not in PeakBasis.values:
        raise ReportRequestError(f"peak_basis must be one of {', '.join(PeakBasis.values)}, got {peak_basis!r}",
                                 "peak_basis")
    if not 1 <= len(sizes_pct) <= reports.MAX_SIZES:
        raise ReportRequestError(f"sizes: give 1 to {reports.MAX_SIZES} sizes (each is a replay), got {len(sizes_pct)}",
                                 "sizes")
    for size in sizes_pct:
        if not 0 <= size <= 100:
            raise ReportRequestError(f"sizes: {size:g} is outside 0-100 (percent of the expected peak)", "sizes")
    if trace_data is not None:
        trace_name = _fitting_trace_name(trace_name or "trace.csv")
        check_trace(trace_name, trace_data, days)
    with transaction.atomic():
        report = WarmPoolReport.objects.create(
            pool=pool, days=days, sizes_pct=[float(size) for size in sizes_pct], trace_name=trace_name if trace_data else "",
            trace_data=trace_data, rate_scale=rate_scale, peak_basis=peak_basis, requested_by=actor.user,
            requested_channel=actor.channel)
        core.record(actor, AuditAction.CREATE, report, after={
            "days": days, "sizes_pct": report.sizes_pct, "source": report.source, "rate_scale": rate_scale,
            "peak_basis": peak_basis})
        if enqueue:
            transaction.on_commit(lambda: _enqueue(report.pk))
    return report


def what_if_window(incident: "Incident", now: datetime | None = None) -> tuple[datetime, datetime]:
    """From the first alert's condition (or the opening) to the resolution (or now), at most a day."""
    start = min([incident.opened_at] + [alert.started_at for alert in incident.alerts.all()])
    end = incident.resolved_at or now or timezone.now()
    return start, min(end, start + timedelta(seconds=WHAT_IF_MAX_WINDOW_S))


def request_what_if(incident: "Incident", actor: core.Actor, *,
                    sizes_pct: tuple[float, ...] = WHAT_IF_DEFAULT_SIZES_PCT, peak_basis: str = PeakBasis.DAY_PEAK,
                    enqueue: bool = True, now: datetime | None = None) -> WarmPoolReport:
    """Replay an incident's window at other warm-pool settings (and with the fallback model): a report
    linked from the incident (`Incident.what_if`), run by a worker like any other. While one is pending
    or running, asking again answers that one."""
    from incidents.models import Incident  # incidents depends on scaling, not the other way

    if incident.pool_deleted:
        raise ReportRequestError(
            f"pool {incident.pool_name} has been deleted, its samples with it: there is nothing to replay", "incident")
    if incident.pool_id is None:
        raise ReportRequestError("a system incident has no pool whose warm pool could be replayed", "incident")
    if peak_basis not in PeakBasis.values:
        raise ReportRequestError(f"peak_basis must be one of {', '.join(PeakBasis.values)}, got {peak_basis!r}",
                                 "peak_basis")
    if not sizes_pct:
        raise ReportRequestError("sizes: give at least one size", "sizes")
    for size in sizes_pct:
        if not (isinstance(size, (int, float)) and math.isfinite(size) and 0 <= size <= 100):
            raise ReportRequestError(f"sizes: {size} is outside 0-100 (percent of the expected peak)", "sizes")
    start, end = what_if_window(incident, now)
    if (end - start).total_seconds() < reports.RATE_BIN_S * 2:
        raise ReportRequestError("the incident's window is shorter than two minutes: nothing to replay", "incident")
    with transaction.atomic():
        locked = Incident.objects.select_for_update().get(pk=incident.pk)
        running = WarmPoolReport.objects.filter(pk=locked.what_if_id, state__in=REPORT_ACTIVE_STATES).first()
        if running is not None:  # a second click while it runs: the same replay, not another one
            return running
        report = WarmPoolReport.objects.create(
            pool_id=locked.pool_id, days=round((end - start).total_seconds() / 86_400.0, 6),
            sizes_pct=[float(size) for size in sizes_pct], peak_basis=peak_basis, window_start=start, window_end=end,
            requested_by=actor.user, requested_channel=actor.channel)
        before = locked.what_if_id
        locked.what_if = report
        locked.save(update_fields=["what_if"])
        core.record(actor, AuditAction.CREATE, report, after={
            "incident": locked.pk, "window_start": start.isoformat(), "window_end": end.isoformat(),
            "sizes_pct": report.sizes_pct, "peak_basis": peak_basis})
        core.record(actor, AuditAction.UPDATE, locked, before={"what_if": before}, after={"what_if": report.pk})
        if enqueue:
            transaction.on_commit(lambda: _enqueue(report.pk))
    return report


def _enqueue(report_id: int, expires_s: float | None = None) -> None:
    """A worker takes it; without Celery (the embedded demo) a thread does, so the page can show progress.
    `expires_s`: a task still queued after it is dropped (the sweep hands the report out again if need be)."""
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        from scaling.tasks import run_warm_pool_report

        try:
            run_warm_pool_report.apply_async((report_id,), expires=expires_s)
        except Exception:  # noqa: BLE001 - any broker failure: the report is stored, pending, and the sweep hands it out
            logger.warning("could not queue warm-pool report #%s; the sweep hands it to a worker within %s min",
                           report_id, round(PENDING_PICKUP.total_seconds() / 60), exc_info=True)
        return

    def run_here() -> None:
        try:
            run(report_id)
        finally:
            connection.close()

    threading.Thread(target=run_here, name=f"warm-pool-report-{report_id}", daemon=True).start()


# ---------------------------------------------------------------------------- running


def take(report_id: int, now: datetime | None = None) -> bool:
    """pending (or running with its lease run out) → running; False when another worker has it."""
    return _take(report_id, now) is not None


def _take(report_id: int, now: datetime | None = None) -> datetime | None:
    """The run's `started_at`, which names its owner: progress and the end are written only while it is
    still the row's (another worker may have taken the report after this one's lease ran out)."""
    now = now or timezone.now()
    # One UPDATE whose WHERE is on the row itself: a second worker waits for the first one's lock and
    # then finds the row no longer free (PostgreSQL re-checks it), so a report runs once.
    free = Q(state=ReportState.PENDING) | Q(state=ReportState.RUNNING, lease_until__lt=now)
    taken = WarmPoolReport.objects.filter(free, pk=report_id).update(
        state=ReportState.RUNNING, started_at=now, lease_until=now + RUN_LEASE, percent_done=0, error="")
    return now if taken == 1 else None


def _owned(report_id: int, owner: datetime) -> QuerySet[WarmPoolReport]:
    return WarmPoolReport.objects.filter(pk=report_id, state=ReportState.RUNNING, started_at=owner)


def _finish(report_id: int, owner: datetime, state: str, **fields: object) -> bool:
    return _owned(report_id, owner).update(state=state, finished_at=timezone.now(), lease_until=None, **fields) == 1


def _store_result(report_id: int, owner: datetime, result: dict[str, object]) -> None:
    """Succeeded with its result; a result the database refuses ends it failed instead of running forever."""
    try:
        with transaction.atomic():  # a savepoint: the refused write must not spoil the one after it
            _finish(report_id, owner, ReportState.SUCCEEDED, result=reports.json_safe(result), percent_done=100)
    except DatabaseError as exc:
        logger.exception("storing warm-pool report #%s's result failed", report_id)
        _finish(report_id, owner, ReportState.FAILED,
                error=f"the result could not be stored ({type(exc).__name__}); ask for the report again")


def run(report_id: int, workers: int = 1, progress: Callable[[float], None] | None = None) -> WarmPoolReport | None:
    """Run a pending report to its end; the row carries the percent done while it runs, and each
    write of it renews the run's lease. None when the report is gone (its pool was deleted).

    Bad inputs (no history, a gap, a malformed trace) end it as failed with a sentence saying why;
    an interruption (Ctrl-C in the command) as failed, "interrupted"."""
    owner = _take(report_id)
    if owner is None:
        return WarmPoolReport.objects.filter(pk=report_id).first()
    report = WarmPoolReport.objects.select_related("pool__cluster").filter(pk=report_id).first()
    if report is None:
        return None
    last_write = [0.0]

    def on_progress(share: float) -> None:
        if progress is not None:
            progress(share)
        if time.monotonic() - last_write[0] >= PROGRESS_EVERY_S or share >= 1.0:
            last_write[0] = time.monotonic()
            renewed = _owned(report_id, owner).update(percent_done=min(99, int(share * 100)),
                                                      lease_until=timezone.now() + RUN_LEASE)
            if not renewed:
                raise _RunLost

    try:
        inputs = inputs_for(report)
        result = reports.run_report(inputs.workload, inputs.spec, on_progress, inputs.recorded, workers=workers)
    except _RunLost:
        logger.info("warm-pool report #%s was taken by another worker or deleted; this run stops", report_id)
    except (reports.ReportInputError, ReportRequestError, TraceFormatError) as exc:
        _finish(report_id, owner, ReportState.FAILED, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - the row must end; the worker's log keeps the traceback
        if _finish(report_id, owner, ReportState.FAILED, error=f"internal error: {type(exc).__name__}: {exc}"):
            raise
        # The report was deleted (with its pool) or taken by another worker under this run: nobody waits for it.
        logger.info("warm-pool report #%s is gone or another worker's; this run stopped on %r", report_id, exc)
    except KeyboardInterrupt:  # a person stopped it (Ctrl-C in the command): the row must not stay running
        _finish(report_id, owner, ReportState.FAILED, error="interrupted: the run was stopped before its end")
        raise
    # A worker that exits mid-run (SystemExit, a kill) leaves the row running: the sweep hands it out again
    # once its lease runs out (`retake_stalled`).
    else:
        _store_result(report_id, owner, result.as_json())
    return WarmPoolReport.objects.filter(pk=report_id).first()


def retake_stalled(now: datetime | None = None) -> list[int]:
    """The sweep: hand to a worker again every report whose run died (running past its lease) or whose
    task was lost (pending for PENDING_PICKUP); end those asked for GIVE_UP_AFTER ago. Idempotent: a
    report handed out twice still runs once (`take`), and a live run renews its lease."""
    now = now or timezone.now()
    stalled = WarmPoolReport.objects.filter(
        Q(state=ReportState.RUNNING, lease_until__lt=now)
        | Q(state=ReportState.PENDING, created_at__lt=now - PENDING_PICKUP))
    given_up = stalled.filter(created_at__lt=now - GIVE_UP_AFTER).update(
        state=ReportState.FAILED, finished_at=now, lease_until=None, error=(
            f"no worker finished the report within {GIVE_UP_AFTER.total_seconds() / 3600:.0f} hours of asking "
            "(its runs stopped each time); ask for it again"))
    if given_up:
        logger.warning("ended %s warm-pool report(s) that no worker finished", given_up)
    report_ids = list(stalled.values_list("pk", flat=True).order_by("pk"))
    for report_id in report_ids:  # a queue in backlog holds at most a few copies, then they expire
        _enqueue(report_id, expires_s=PENDING_PICKUP.total_seconds())
    return report_ids


# ---------------------------------------------------------------------------- inputs


def profile_for(pool: Pool) -> tuple[PoolProfile, str]:
    """The simulator profile whose served model matches the pool's (else the default), with the
    pool's GPUs per replica; and how it was chosen."""
    wanted = _model_key(pool.model_name)
    for profile in PROFILES.values():
        if _model_key(profile.model) == wanted:
            return _with_gpus(profile, pool), f"matched by the served model {pool.model_name}"
    return _with_gpus(get_profile(DEFAULT_PROFILE), pool), (
        f"the default profile: none matches the served model {pool.model_name}")


def _model_key(name: str) -> str:
    """'meta-llama/Llama-3.1-8B-Instruct' and 'llama-3.1-8b' name the same model."""
    return name.lower().rpartition("/")[2].removesuffix("-instruct")


def _with_gpus(profile: PoolProfile, pool: Pool) -> PoolProfile:
    from dataclasses import replace

    return replace(profile, gpus_per_replica=pool.gpus_per_replica)


def prices_for(pool: Pool, profile: PoolProfile) -> reports.Prices:
    price = pool.cluster.prices.get(pool.gpu_type)
    if price is None:
        return reports.Prices(profile.gpu_hour_usd, None, (
            f"the cluster {pool.cluster.name} lists no price for {pool.gpu_type}: the profile's estimate "
            f"${profile.gpu_hour_usd:.2f} per GPU-hour on demand, no spot price"))
    spot = f"${price.spot_usd_per_hour:.2f} spot" if price.spot_usd_per_hour is not None else "no spot price"
    return reports.Prices(price.on_demand_usd_per_hour, price.spot_usd_per_hour, (
        f"the cluster {pool.cluster.name}'s prices for {pool.gpu_type}: ${price.on_demand_usd_per_hour:.2f} on demand, "
        f"{spot} per GPU-hour"))


def fallback_spec_for(pool: Pool) -> reports.FallbackSpec | None:
    """The pool's fallback model as the replay routes to it: its fallback pool's profile, replayed as
    a warm pool of that pool's minimum replicas (at least one), under the pool's FallbackPolicy."""
    fallback_pool = pool.fallback_pool
    if fallback_pool is None:
        return None
    from scaling import fallbacks  # the live side's policy → the engine's, one translation

    stored = FallbackPolicy.objects.filter(pool=pool).first()
    profile, how = profile_for(fallback_pool)
    replicas = max(1, fallback_pool.min_replicas)
    policy = fallbacks.engine_policy(stored) if stored else reports.FallbackPolicy()
    eligible = stored.eligible_share if stored else 1.0
    state = ("no FallbackPolicy: the engine's defaults, as if one were added" if stored is None else
             "its FallbackPolicy" + ("" if stored.enabled else " (disabled: the incident ran without it)"))
    return reports.FallbackSpec(
        profile=profile, replicas=replicas, policy=policy, priority_share=round(1.0 - eligible, 4),
        live=bool(stored and stored.enabled),
        description=(f"the fallback pool {fallback_pool} ({how}), {replicas} replica(s) = its minimum, under {state}"),
        usd_per_gpu_hour=prices_for(fallback_pool, profile).on_demand_usd_per_gpu_hour)


def inputs_for(report: WarmPoolReport, now: datetime | None = None) -> Inputs:
    pool = report.pool
    profile, how = profile_for(pool)
    measured = list(ColdStart.objects.filter(pool=pool).values_list("seconds", flat=True)[:COLD_STARTS_READ])
    cold_start, cold_source = reports.cold_start_from(measured, pool.cold_start_p50_s, pool.cold_start_p95_s, profile)
    slo = pool.slos.filter(indicator=SloIndicator.TTFT_P95).first()
    end = now or report.created_at
    period_s = report.days * 86_400.0
    recorded = None
    warmup_s, mode, seed_peak, what_if = reports.WARMUP_S, "fluid", 0.0, False
    if report.window_start is not None:
        workload, start_s, warmup_s, seed_peak, source, recorded = _window_inputs(report)
        mode = "request" if workload.expected_requests <= WHAT_IF_REQUEST_MODE_MAX else "fluid"
        what_if = True
    elif report.trace_name:
        workload = reports.replayable_window(_load_trace_bytes(report.trace_name, bytes(report.trace_data or b"")),
                                             report.days, reports.WARMUP_S)
        source, start_s = f"the uploaded trace {report.trace_name}", None
    else:
        # The last `days` of the stored rates: when they stop well before the report was asked (Prometheus or
        # the loop down since), the period ends with them; no --days could step over a hole at its end.
        latest = SignalSample.objects.filter(
            pool=pool, at__gte=end - timedelta(seconds=period_s + reports.WARMUP_S), at__lt=end,
            request_rate_rps__isnull=False).aggregate(last=Max("at"))["last"]
        stopped = ""
        if latest is not None and (end - latest).total_seconds() > reports.MAX_GAP_S:
            stopped = (f"; they stop at {latest:%Y-%m-%d %H:%M} UTC, {(end - latest).total_seconds() / 3600:.1f} h "
                       "before the report was asked (nothing recorded since), and the period ends there")
            end = latest + timedelta(seconds=reports.RATE_BIN_S)
        start_s = end.timestamp() - period_s
        samples = list(SignalSample.objects.filter(
            pool=pool, at__gte=end - timedelta(seconds=period_s + reports.WARMUP_S), at__lt=end)
            .values_list("at", "request_rate_rps", "ttft_p95_s", "ready_replicas"))
        if not samples:
            raise reports.ReportInputError(
                f"the pool {pool} has no stored request history in the last {report.days:g} days: "
                "let the control loop run, or upload a trace")
        times = [at.timestamp() for at, *_ in samples]
        workload = reports.workload_from_rates(times, [rate for _, rate, *_ in samples],
                                               start_s - reports.WARMUP_S, end.timestamp(), f"{pool} history")
        scored = [row for row, at in zip(samples, times) if at >= start_s]
        recorded = reports.Recorded(tuple(row[2] for row in scored if row[2] is not None),
                                    tuple(row[3] for row in scored if row[3] is not None))
        source = f"the pool's stored request rates ({len(samples):,} samples, 1-minute means{stopped})"
    if report.rate_scale != 1.0:
        workload = transforms.rate_scale(workload, report.rate_scale)
        source += f", rates x{report.rate_scale:g}"
        recorded = None  # the pool never served this traffic: its record says nothing about this replay
    current_pct = base_pct = round(pool.warm_pool_fraction * 100.0, 3)
    if what_if and report.peak_basis == PeakBasis.DAY_PEAK:
        # What ran is the planner with the pool's own fraction and no standing floor: the 0 % row.
        current_pct = 0.0
    spec = reports.ReportSpec(
        profile=profile, cold_start=cold_start, cold_start_source=cold_source, prices=prices_for(pool, profile),
        current_pct=current_pct, base_warm_pct=base_pct if what_if else 0.0,
        sizes_pct=tuple(report.sizes_pct) or reports.DEFAULT_SIZES_PCT,
        slo_ttft_s=(slo.threshold / 1000.0) if slo else 1.0, slo_objective=slo.objective if slo else 0.99,
        min_replicas=pool.min_replicas, max_replicas=pool.max_replicas,
        flag_above_pct=float(settings.WARM_POOL_REPORT_FLAG_ABOVE_PCT), traffic_source=f"{source}; profile {how}",
        period_start_s=start_s, peak_basis=report.peak_basis, warmup_s=warmup_s, mode=mode,
        fallback=fallback_spec_for(pool), day_peak_seed_rps=seed_peak, what_if=what_if,
    )
    return Inputs(workload, spec, recorded)


def _window_inputs(report: WarmPoolReport) -> tuple[Workload, float, float, float, str, reports.Recorded]:
    """An incident's window of the stored rates, the warm-up before it (as much of WHAT_IF_WARMUP_S as
    the history holds), and the highest stored rate of the 24 hours before it (the day-peak floor's start)."""
    pool, start, end = report.pool, report.window_start, report.window_end
    samples = list(SignalSample.objects.filter(
        pool=pool, at__gte=start - timedelta(seconds=WHAT_IF_WARMUP_S), at__lt=end)
        .order_by("at").values_list("at", "request_rate_rps", "ttft_p95_s", "ready_replicas"))
    known = [(at, rate) for at, rate, *_ in samples if rate is not None]
    if not known:
        raise reports.ReportInputError(
            f"the pool {pool} has no stored request history from {start:%Y-%m-%d %H:%M} to {end:%H:%M} UTC "
            "(samples are kept 9 days): nothing to replay")
    first = min(known[0][0], start)
    # The warm-up is whole minutes of history before the window (none when the history starts with it).
    warmup_s = max(0.0, (start - first).total_seconds() // reports.RATE_BIN_S * reports.RATE_BIN_S)
    begin_s = start.timestamp() - warmup_s
    workload = reports.workload_from_rates(
        [at.timestamp() for at, _ in known], [rate for _, rate in known], begin_s, end.timestamp(),
        f"{pool} incident window", advice=("the what-if replays the stored rates of the incident's whole window, "
                                           "and nothing was recorded then (Prometheus or the control loop was down)"))
    day_before = SignalSample.objects.filter(pool=pool, at__gte=start - timedelta(days=1), at__lt=start) \
        .aggregate(peak=Max("request_rate_rps"))["peak"] or 0.0
    source = (f"the pool's stored request rates over the incident's window {start:%Y-%m-%d %H:%M}-{end:%H:%M} UTC "
              f"({len(known):,} samples, 1-minute means), the {warmup_s / 60:.0f} minutes before it as warm-up")
    scored = [row for row in samples if row[0] >= start]  # what the pool recorded in the window itself
    recorded = reports.Recorded(tuple(row[2] for row in scored if row[2] is not None),
                                tuple(row[3] for row in scored if row[3] is not None))
    return workload, start.timestamp(), warmup_s, float(day_before), source, recorded
