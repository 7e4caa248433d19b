"""Warm-pool reports at their edges: results the database refuses, workers that die or stall, pools
deleted under a run, uploads that are cut, nested, bombs, holed or never replayable, and the command's
options and Ctrl-C. Replays are a few minutes of traffic at two sizes, so each takes about a second.
"""
from __future__ import annotations

import io
import math
import tarfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane import services as core
from controlplane.celery import app
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import report_service, reports, tasks
from scaling.choices import ReportState
from scaling.models import SignalSample, WarmPoolReport

HOURS = 1.0
AZURE_HEADER = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
SERVEGEN_HEADER = (b"window_start_s,window_len_s,total_rate_rps,active_clients,rate_weighted_mean_cv,"
                   b"collection_gap,suspect_low\n")


def _azure(minutes: int = 40) -> bytes:
    """A request every 2 s for `minutes`."""
    return AZURE_HEADER + b"".join(b"2023-11-16 18:%02d:%02d.0,100,10\n" % (minute, second)
                                   for minute in range(minutes) for second in range(0, 60, 2))


def _store_history(pool: Pool, ttft_p95_s: float | None = None) -> None:
    """An hour of 15-s samples between 20 and 80 req/s; the last one's TTFT p95 is `ttft_p95_s` when given."""
    now = timezone.now()
    rows = []
    for tick in range(int(HOURS * 240)):
        rate = 50 + 30 * math.sin(2 * math.pi * tick / 360)
        rows.append(SignalSample(pool=pool, at=now - timedelta(hours=HOURS - tick / 240), request_rate_rps=rate,
                                 ttft_p95_s=0.25 + rate / 1000, ready_replicas=round(rate / 12) + 1))
    if ttft_p95_s is not None:
        rows[-1].ttft_p95_s = ttft_p95_s
    SignalSample.objects.bulk_create(rows)


def _ask(pool: Pool, user: User) -> WarmPoolReport:
    return report_service.request_report(pool, core.Actor(user, Channel.API), days=HOURS / 24 - 0.001,
                                         sizes_pct=(0,), enqueue=False)


def _upload(user: User, pool: Pool, name: str, data: bytes, days: float = 0.02):  # noqa: ANN202
    client = APIClient()
    client.force_authenticate(user)
    upload = io.BytesIO(data)
    upload.name = name
    return client.post("/api/v1/reports/", {"pool": pool.pk, "trace": upload, "days": days}, format="multipart")


def _targz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=9) as archive:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def _client_rows(windows: int) -> bytes:
    return b"".join(b"%d,1.0,1.0,Gamma,1.0,1.0\n" % (window * 600) for window in range(windows))


def _corrupt_deflate() -> bytes:
    """An archive whose compressed stream breaks after its first member's header: zlib fails mid-read."""
    rows = b"".join(b"%d,%d.5,1.0,Gamma,1.0,1.0\n" % (window * 600, window % 97) for window in range(3000))
    data = bytearray(_targz({"client.csv": rows}))
    data[1458] ^= 0x55
    return bytes(data)


# ---------------------------------------------------------------------------- results the database refuses


def test_it_leaves_a_nan_latency_sample_out_of_the_comparison(pool: Pool, alice: User) -> None:
    _store_history(pool, ttft_p95_s=float("nan"))
    report = report_service.run(_ask(pool, alice).pk)
    assert report.state == ReportState.SUCCEEDED, report.error
    compared = report.result["observed_vs_replay"]
    assert compared["ttft_p95_ms_median"]["observed"] == pytest.approx(300, abs=20)
    assert compared["ttft_p95_ms_95th_minute"]["observed"] is not None


def test_it_stores_non_finite_numbers_as_null(pool: Pool, alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    _store_history(pool)
    as_json = reports.Report.as_json
    monkeypatch.setattr(reports.Report, "as_json", lambda self: {**as_json(self), "odd": [float("nan"), float("inf")]})
    report = report_service.run(_ask(pool, alice).pk)
    assert report.state == ReportState.SUCCEEDED and report.result["odd"] == [None, None]


def test_it_ends_failed_when_the_database_refuses_the_result(pool: Pool, alice: User,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _store_history(pool)
    monkeypatch.setattr(reports, "json_safe", lambda result: {**result, "odd": float("nan")})  # PostgreSQL says no
    report = report_service.run(_ask(pool, alice).pk)
    assert report.state == ReportState.FAILED and report.lease_until is None
    assert report.error.startswith("the result could not be stored (DataError)")


# ---------------------------------------------------------------------------- workers that die or stall


def test_the_sweep_hands_out_reports_whose_worker_died_or_whose_task_was_lost(
        pool: Pool, alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    handed_out: list[int] = []
    monkeypatch.setattr(report_service, "_enqueue", lambda report_id, expires_s=None: handed_out.append(report_id))
    died, lost, queued, live = (_ask(pool, alice) for _ in range(4))
    now = timezone.now()
    assert report_service.take(died.pk, now=now - report_service.RUN_LEASE - timedelta(seconds=1))
    WarmPoolReport.objects.filter(pk=lost.pk).update(created_at=now - report_service.PENDING_PICKUP - timedelta(seconds=1))
    assert report_service.take(live.pk)
    tasks.retake_stalled_reports()
    assert handed_out == [died.pk, lost.pk]  # the fresh pending one and the live run are left alone
    entry = app.conf.beat_schedule["retake-stalled-reports"]
    assert entry["task"] == "scaling.tasks.retake_stalled_reports" and entry["options"]["expires"] < entry["schedule"]


def test_a_report_handed_out_twice_runs_once(pool: Pool, alice: User) -> None:
    report = _ask(pool, alice)
    assert report_service.take(report.pk, now=timezone.now() - report_service.RUN_LEASE - timedelta(seconds=1))
    tasks.run_warm_pool_report(report.pk)  # the sweep's copy: no history, so it ends failed
    finished = WarmPoolReport.objects.get(pk=report.pk)
    tasks.run_warm_pool_report(report.pk)  # the next sweep's copy finds it done
    assert finished.state == ReportState.FAILED and WarmPoolReport.objects.get(pk=report.pk).finished_at == finished.finished_at


def test_the_sweep_gives_up_on_a_report_that_never_finishes(pool: Pool, alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_service, "_enqueue", lambda report_id, expires_s=None: None)
    report = _ask(pool, alice)
    WarmPoolReport.objects.filter(pk=report.pk).update(created_at=timezone.now() - report_service.GIVE_UP_AFTER)
    assert report_service.retake_stalled() == []
    report.refresh_from_db()
    assert report.state == ReportState.FAILED and "no worker finished the report within 6 hours" in report.error


def _around_the_first_progress(monkeypatch: pytest.MonkeyPatch, before: Callable[[], object] = lambda: None,
                               after: Callable[[], object] = lambda: None) -> None:
    """The replay calls `before()` and `after()` around its first progress write (written at every call)."""
    real = reports.run_report
    monkeypatch.setattr(report_service, "PROGRESS_EVERY_S", 0.0)

    def replay(workload, spec, progress, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls: list[float] = []

        def watched(share: float) -> None:
            if calls:
                progress(share)
                return
            calls.append(share)
            before()
            progress(share)
            after()
        return real(workload, spec, watched, *args, **kwargs)

    monkeypatch.setattr(reports, "run_report", replay)


def test_a_live_worker_renews_its_lease_with_each_progress_write(pool: Pool, alice: User,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _store_history(pool)
    report = _ask(pool, alice)
    second_worker: list[bool] = []
    _around_the_first_progress(  # 30 minutes into a long replay, the lease is about to run out
        monkeypatch, before=lambda: WarmPoolReport.objects.filter(pk=report.pk).update(
            lease_until=timezone.now() - timedelta(seconds=1)),
        after=lambda: second_worker.append(report_service.take(report.pk)))
    done = report_service.run(report.pk)
    assert second_worker == [False] and done.state == ReportState.SUCCEEDED


def test_a_worker_whose_report_was_taken_over_stops_and_writes_nothing(pool: Pool, alice: User,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _store_history(pool)
    report = _ask(pool, alice)
    later = timezone.now() + report_service.RUN_LEASE + timedelta(minutes=1)
    _around_the_first_progress(monkeypatch, before=lambda: report_service.take(report.pk, now=later))  # it stalled
    report_service.run(report.pk)
    report.refresh_from_db()
    assert report.state == ReportState.RUNNING and report.started_at == later and report.percent_done == 0
    assert report.result == {}


# ---------------------------------------------------------------------------- pools deleted under a run


def test_the_task_ends_quietly_when_the_pool_was_deleted_before_it(pool: Pool, alice: User) -> None:
    report = _ask(pool, alice)
    Pool.objects.filter(pk=pool.pk).delete()
    tasks.run_warm_pool_report(report.pk)
    assert report_service.run(report.pk) is None


def test_the_task_ends_quietly_when_the_pool_is_deleted_during_the_run(pool: Pool, alice: User,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _store_history(pool)
    report = _ask(pool, alice)
    _around_the_first_progress(monkeypatch, before=lambda: Pool.objects.filter(pk=pool.pk).delete())
    tasks.run_warm_pool_report(report.pk)
    assert not WarmPoolReport.objects.exists()


# ---------------------------------------------------------------------------- uploads


@pytest.mark.parametrize(("name", "data", "message"), [
    ("cut.tar.gz", _targz({"client.csv": _client_rows(2000)})[:3000], "cannot be read to its end"),
    ("corrupt.tar.gz", _corrupt_deflate(), "corrupt.tar.gz: cannot be read to its end: Error -3"),
    ("deep.jsonl", b'{"timestamp": 0, "input_length": 10, "output_length": 5, "x": ' + b"[" * 100_000
     + b"]" * 100_000 + b"}\n", "line 1: bad JSON: nested too deeply"),
])
def test_a_cut_or_corrupt_upload_is_a_400_naming_the_trace(pool: Pool, alice: User, name: str, data: bytes,
                                                          message: str) -> None:
    response = _upload(alice, pool, name, data)
    assert response.status_code == 400 and message in str(response.data["trace"]), response.data
    assert not WarmPoolReport.objects.exists()


def test_an_archive_that_unpacks_to_more_than_an_upload_may_weigh_is_refused_at_once(pool: Pool, alice: User) -> None:
    bomb = _targz({"client.csv": b"0,1.0,1.0,Gamma,1.0,1.0\n" * 2_500_000})  # 60 MB unpacked, 150 KB sent
    started = time.perf_counter()
    response = _upload(alice, pool, "bomb.tar.gz", bomb)
    assert response.status_code == 400 and "unpacks to more than 52 MB" in str(response.data["trace"])
    assert time.perf_counter() - started < 2


def test_servegen_windows_with_a_hole_are_refused(pool: Pool, alice: User) -> None:
    rows = [b"%d,60,20,1,1,0,0\n" % (minute * 60) for minute in range(60)]
    rows += [b"%d,60,20,1,1,0,0\n" % (6 * 3600 + minute * 60) for minute in range(60)]
    response = _upload(alice, pool, "agg.csv", SERVEGEN_HEADER + b"".join(rows), days=0.3)
    assert response.status_code == 400, response.data
    assert "window 61 starts at 21,600 s, not at 3,600 s" in str(response.data["trace"])


@pytest.mark.parametrize(("data", "message"), [
    (AZURE_HEADER + b"2023-11-16 18:15:46.6805900,374,44\n", "the traffic lasts 0 s"),
    (_azure() + b"9999-12-31 23:59:59.0,100,10\n",
     "hold 1 request over 0 s: too little for a 600-s warm-up and a scored period; its last request comes "),
])
def test_a_trace_that_can_never_be_replayed_is_refused_when_sent(pool: Pool, alice: User, data: bytes,
                                                                 message: str) -> None:
    response = _upload(alice, pool, "never.csv", data)
    assert response.status_code == 400 and message in str(response.data["trace"]), response.data


def test_a_long_file_name_is_cut_to_fit_keeping_its_ending(pool: Pool, alice: User) -> None:
    response = _upload(alice, pool, "t" * 230 + ".csv", _azure())
    assert response.status_code == 201, response.data
    name = WarmPoolReport.objects.get().trace_name
    assert len(name) == 200 and name.endswith("tttt.csv") and "…" in name


def test_trace_errors_name_the_upload_and_its_member_not_the_server_copy(pool: Pool, alice: User) -> None:
    response = _upload(alice, pool, "mine.tar.gz", _targz({"client.csv": b"0,abc,1,Gamma,1,1\n"}))
    said = str(response.data["trace"])
    assert response.status_code == 400 and "mine.tar.gz:client.csv, line 1, column 2" in said and "/tmp" not in said


# ---------------------------------------------------------------------------- the command


def test_the_command_ends_an_interrupted_report_failed(pool: Pool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(reports, "run_report", interrupted)
    trace = tmp_path / "azure.csv"
    trace.write_bytes(_azure())
    with pytest.raises(CommandError, match=r"report #\d+ interrupted") as caught:
        call_command("warm_pool_report", "chat-8b", "--trace", str(trace), "--days", "0.02", "--out", str(tmp_path))
    assert caught.value.returncode == 130
    report = WarmPoolReport.objects.get()
    assert report.state == ReportState.FAILED and report.error.startswith("interrupted")


@pytest.mark.parametrize(("arguments", "message"), [
    (["--workers", "0"], "--workers must be at least 1"),
    (["--out", "{file}"], "--out: cannot use"),
    (["--trace", "{folder}"], "is not a regular file"),
    (["--trace", "{big}"], r"--trace: \S+/big is 53 MB; at most 52 MB"),  # from its size, before reading it
])
def test_the_command_checks_every_option_before_it_stores_a_report(pool: Pool, tmp_path: Path, arguments: list[str],
                                                                  message: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    with (tmp_path / "big").open("wb") as big:  # sparse: never read, refused on its size
        big.truncate(report_service.MAX_TRACE_BYTES + 1_000_000)
    paths = {key: str(tmp_path / key) for key in ("file", "folder", "big")}
    with pytest.raises(CommandError, match=message):  # the last --out wins
        call_command("warm_pool_report", "chat-8b", "--out", str(tmp_path),
                     *[argument.format(**paths) for argument in arguments])
    assert not WarmPoolReport.objects.exists()


def test_the_command_reads_a_cut_archive_as_one_line_without_naming_a_missing_option(pool: Pool, tmp_path: Path) -> None:
    cut, unknown = tmp_path / "cut.tar.gz", tmp_path / "unknown.csv"
    cut.write_bytes(_targz({"client.csv": _client_rows(2000)})[:3000])
    unknown.write_bytes(b"time,tokens\n1,2\n")
    with pytest.raises(CommandError, match="cut.tar.gz: cannot be read to its end"):
        call_command("warm_pool_report", "chat-8b", "--trace", str(cut), "--out", str(tmp_path))
    with pytest.raises(CommandError, match="cannot tell the format") as caught:
        call_command("warm_pool_report", "chat-8b", "--trace", str(unknown), "--out", str(tmp_path))
    assert "--format" not in str(caught.value)


# ---------------------------------------------------------------------------- the page


def test_the_page_names_days_that_are_not_a_number(pool: Pool, alice: User) -> None:
    client = Client()
    client.force_login(alice)
    response = client.post(f"/pools/{pool.pk}/reports/", {"days": "abc", "sizes": "0"})
    assert response.status_code == 400 and "days: &#x27;abc&#x27; is not a number" in response.content.decode()
    assert not WarmPoolReport.objects.exists()


def test_a_report_asked_for_while_the_broker_is_down_is_kept_for_the_sweep(
        pool: Pool, alice: User, monkeypatch: pytest.MonkeyPatch, settings, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    """Redis down at the moment of asking: the person gets the report (pending) with a 201, not a 500 for a
    report that was stored anyway; the sweep hands it to a worker once the broker is back."""
    from kombu.exceptions import OperationalError

    def broker_down(*args, **kwargs) -> None:  # noqa: ANN002, ANN003
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr(tasks.run_warm_pool_report, "apply_async", broker_down)
    _store_history(pool)
    client = APIClient()
    client.force_authenticate(alice)
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post("/api/v1/reports/", {"pool": pool.pk, "days": HOURS / 24 - 0.001, "sizes_pct": [0]},
                             format="json")
    assert answer.status_code == 201, answer.content
    report = WarmPoolReport.objects.get(pk=answer.json()["id"])
    assert report.state == ReportState.PENDING
    handed_out: list[int] = []
    monkeypatch.setattr(tasks.run_warm_pool_report, "apply_async",
                        lambda args, expires=None: handed_out.append(args[0]))
    report_service.retake_stalled(now=timezone.now() + report_service.PENDING_PICKUP + timedelta(seconds=1))
    assert handed_out == [report.pk]
