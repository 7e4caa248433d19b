"""Warm-pool reports through Django: asked for in the API, the page or the CLI, run, stored, read back.

The replays are short (a couple of hours of stored samples or a trace cut to 40 minutes) and use two
sizes, so each report takes seconds; the computation itself is tested in tests/sim/test_warm_pool_report.py.
"""
from __future__ import annotations

import csv
import json
import io
import math
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Cluster, Pool
from scaling import report_service, reports
from scaling.choices import ReportState
from scaling.models import ColdStart, SignalSample, WarmPoolReport

HOURS = 2.5


def _api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _store_history(pool: Pool, hours: float = HOURS, gap: tuple[float, float] | None = None) -> None:
    """Every 15 s: a request rate rising and falling between 20 and 80 req/s, with the latency and
    replicas the loop would have recorded. `gap` (hours from the start): no samples in between."""
    now = timezone.now()
    rows = []
    for tick in range(int(hours * 240)):
        at_h = tick / 240
        if gap is not None and gap[0] <= at_h < gap[1]:
            continue
        rate = 50 + 30 * math.sin(2 * math.pi * at_h / 1.5)
        rows.append(SignalSample(pool=pool, at=now - timedelta(hours=hours - at_h), request_rate_rps=rate,
                                 ttft_p95_s=0.25 + rate / 1000, ready_replicas=round(rate / 12) + 1))
    SignalSample.objects.bulk_create(rows)


def _ask(pool: Pool, user: User, **kwargs) -> WarmPoolReport:  # noqa: ANN003
    options = {"days": HOURS / 24 - 0.001, "sizes_pct": (0, 60), "enqueue": False} | kwargs
    return report_service.request_report(pool, core.Actor(user, Channel.API), **options)


def test_it_reports_from_the_stored_history_and_compares_with_it(pool: Pool, alice: User, settings) -> None:  # noqa: ANN001
    settings.WARM_POOL_REPORT_FLAG_ABOVE_PCT = 5
    Cluster.objects.filter(pk=pool.cluster_id).update(gpu_prices={"H100": {"on_demand": 4.0, "spot": 1.5}})
    ColdStart.objects.bulk_create([ColdStart(pool=pool, seconds=seconds) for seconds in (50, 55, 60, 70, 120)])
    _store_history(pool)
    report = report_service.run(_ask(pool, alice, peak_basis="day-peak").pk)
    assert report.state == ReportState.SUCCEEDED and report.percent_done == 100, report.error
    result = report.result
    assert [row["warm_pool_pct"] for row in result["rows"]] == [0, 40, 60]  # the pool's 40 % is added
    assert sum(row["current"] for row in result["rows"]) == 1 and result["rows"][1]["current"]
    row = result["rows"][-1]
    assert row["cost_on_demand_usd"] == pytest.approx(row["gpu_hours"] * 4.0, abs=0.05)
    assert row["cost_spot_usd"] == pytest.approx(row["gpu_hours"] * 1.5, abs=0.05)
    assert any("5 measured cold starts" in line for line in result["assumptions"])
    assert any("gpu-us-east's prices for H100: $4.00 on demand, $1.50 spot" in line for line in result["assumptions"])
    compared = result["observed_vs_replay"]
    assert compared["ready_replicas_mean"]["observed"] == pytest.approx(5.1, abs=0.6)
    assert compared["ttft_p95_ms_median"]["observed"] == pytest.approx(300, abs=20)
    assert compared["ttft_p95_ms_median"]["predicted"] is not None and compared["observed_samples"] > 400
    assert result["period"]["start"] is not None and result["worst_day"]["minutes"] > 100
    assert result["flag_above_pct"] == 5 and all(r["flagged"] == (r["extra_cost_pct"] > 5) for r in result["rows"])


def test_a_pool_without_history_fails_with_a_sentence(pool: Pool, alice: User) -> None:
    report = report_service.run(_ask(pool, alice).pk)
    assert report.state == ReportState.FAILED
    assert "has no stored request history in the last" in report.error and "upload a trace" in report.error


def test_a_gap_in_the_history_fails_naming_it(pool: Pool, alice: User) -> None:
    _store_history(pool, gap=(0.8, 1.6))
    report = report_service.run(_ask(pool, alice).pk)
    assert report.state == ReportState.FAILED and "the history has a gap of 0.8 h from" in report.error


def test_a_report_is_run_once_even_if_two_workers_take_it(pool: Pool, alice: User) -> None:
    report = _ask(pool, alice)
    assert report_service.take(report.pk) and not report_service.take(report.pk)
    later = timezone.now() + report_service.RUN_LEASE + timedelta(seconds=1)
    assert report_service.take(report.pk, now=later)  # its worker died: the lease ran out


def test_the_api_creates_reports_and_returns_their_result_and_csv(pool: Pool, alice: User) -> None:
    _store_history(pool)
    api = _api(alice)
    created = api.post("/api/v1/reports/", {"pool": pool.pk, "days": HOURS / 24 - 0.001, "sizes_pct": [0, 60],
                                            "peak_basis": "day-peak"}, format="json")
    assert created.status_code == 201, created.content
    assert created.data["state"] == "pending" and created.data["percent_done"] == 0
    assert AuditEvent.objects.filter(object_type="scaling.warmpoolreport", object_id=str(created.data["id"])).exists()
    assert api.get(f"/api/v1/reports/{created.data['id']}/csv/").status_code == 409  # not done yet
    report_service.run(created.data["id"])
    done = api.get(f"/api/v1/reports/{created.data['id']}/")
    assert done.data["state"] == "succeeded" and done.data["percent_done"] == 100
    assert [row["warm_pool_pct"] for row in done.data["result"]["rows"]] == [0, 40, 60]
    listed = api.get("/api/v1/reports/", {"pool": pool.pk})
    assert listed.data["results"][0]["id"] == created.data["id"] and "result" not in listed.data["results"][0]
    response = api.get(f"/api/v1/reports/{created.data['id']}/csv/")
    lines = list(csv.reader(io.StringIO(response.content.decode())))
    assert response["Content-Type"] == "text/csv" and tuple(lines[0]) == reports.CSV_COLUMNS and len(lines) == 4
    assert [float(line[0]) for line in lines[1:]] == [0, 40, 60]


@pytest.mark.parametrize(("payload", "field"), [
    ({"pool": 999_999}, "pool"),
    ({"days": 30}, "days"),
    ({"days": "a week"}, "days"),
    ({"sizes_pct": [0, 150]}, "sizes_pct"),
    ({"peak_basis": "yesterday"}, "peak_basis"),
    ({"rate_scale": 0}, "rate_scale"),
])
def test_the_api_answers_bad_input_with_a_400_naming_the_field(pool: Pool, alice: User, payload: dict, field: str) -> None:
    response = _api(alice).post("/api/v1/reports/", {"pool": pool.pk} | payload, format="json")
    assert response.status_code == 400 and field in response.data, response.data
    assert not WarmPoolReport.objects.exists()


def test_a_malformed_trace_upload_is_a_400_naming_the_line(pool: Pool, alice: User) -> None:
    upload = io.BytesIO(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nyesterday,1,2\n")
    upload.name = "broken.csv"
    response = _api(alice).post("/api/v1/reports/", {"pool": pool.pk, "trace": upload}, format="multipart")
    assert response.status_code == 400 and "line 3" in str(response.data["trace"]), response.data
    assert not WarmPoolReport.objects.exists()


def test_other_teams_neither_see_nor_ask_for_reports(pool: Pool, alice: User, charlie: User) -> None:
    report = _ask(pool, alice)
    outsider = _api(charlie)
    assert outsider.get(f"/api/v1/reports/{report.pk}/").status_code == 404
    assert outsider.get("/api/v1/reports/").data["count"] == 0
    assert outsider.post("/api/v1/reports/", {"pool": pool.pk}, format="json").status_code == 400
    client = Client()
    client.force_login(charlie)
    assert client.get(f"/reports/{report.pk}/").status_code == 404
    assert client.get(f"/pools/{pool.pk}/reports/").status_code == 404


def test_the_page_asks_for_a_report_and_shows_it_with_its_charts(pool: Pool, alice: User) -> None:
    _store_history(pool)
    client = Client()
    client.force_login(alice)
    asked = client.post(f"/pools/{pool.pk}/reports/", {"days": str(HOURS / 24 - 0.001), "sizes": "0,60",
                                                      "peak_basis": "day-peak"})
    report = WarmPoolReport.objects.get()
    assert asked.status_code == 302 and asked["Location"] == f"/reports/{report.pk}/"
    running = client.get(f"/reports/{report.pk}/body/").content.decode()
    assert 'hx-trigger="every 2s"' in running and "<progress" in running  # polls while it runs
    report = report_service.run(report.pk)
    page = client.get(f"/reports/{report.pk}/").content.decode()
    assert 'every 2s' not in page and report.result["recommendation"][:40] in page
    assert page.count("<svg") == 2 and "Assumptions" in page and "current" in page
    curve = client.get(f"/reports/{report.pk}/download/curve.svg")
    assert curve["Content-Type"] == "image/svg+xml" and curve.content.startswith(b"<svg xmlns")
    assert client.get(f"/reports/{report.pk}/download/csv").content.decode().startswith("warm_pool_pct,")
    listing = client.get(f"/pools/{pool.pk}/reports/").content.decode()
    assert f"/reports/{report.pk}/" in listing


def test_the_page_shows_a_bad_size_without_storing_anything(pool: Pool, alice: User) -> None:
    client = Client()
    client.force_login(alice)
    response = client.post(f"/pools/{pool.pk}/reports/", {"days": "1", "sizes": "0,ten"})
    assert response.status_code == 400 and "&#x27;ten&#x27; is not a number" in response.content.decode()
    assert not WarmPoolReport.objects.exists()


def test_the_command_replays_a_trace_and_writes_the_charts(pool: Pool, alice: User, traces_dir: Path,
                                                          tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    call_command("warm_pool_report", "gpu-us-east/chat-8b", "--trace", str(traces_dir / "AzureLLMInferenceTrace_conv.csv"),
                 "--days", "0.03", "--sizes", "0,60", "--peak", "day-peak", "--out", str(tmp_path))
    out, err = capsys.readouterr()
    report = WarmPoolReport.objects.get()
    assert "warm %" in out and "current" in out and report.result["recommendation"] in out
    assert "100.0 %" in err  # the progress bar ended
    assert "profile matched by the served model llama-3.1-8b" in out
    assert report.requested_channel == Channel.CLI and report.trace_name == "AzureLLMInferenceTrace_conv.csv"
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == [f"warm-pool-report-{report.pk}{suffix}" for suffix in
                     ("-curve.svg", "-worst-day.svg", ".csv", ".json")]


@pytest.mark.parametrize(("arguments", "message"), [
    (["no-such-pool"], "No pool named 'no-such-pool'"),
    (["chat-8b", "--sizes", "0,x"], "'x' is not a number"),
    (["chat-8b", "--days", "40"], "days must be between"),
    (["chat-8b", "--trace", "/nonexistent.csv"], "no such file"),
    (["chat-8b"], "has no stored request history"),
])
def test_the_command_names_what_is_wrong(pool: Pool, arguments: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("warm_pool_report", *arguments, "--out", str(tmp_path))


def test_the_command_names_the_line_of_a_malformed_trace(pool: Pool, tmp_path: Path) -> None:
    trace = tmp_path / "broken.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,many,44\n")
    with pytest.raises(CommandError, match=r"broken.csv: line 2, column 2 \(ContextTokens\): expected a number"):
        call_command("warm_pool_report", "chat-8b", "--trace", str(trace), "--out", str(tmp_path))


def test_the_worker_task_runs_the_report_by_id(pool: Pool, alice: User) -> None:
    from scaling.tasks import run_warm_pool_report

    report = _ask(pool, alice)
    run_warm_pool_report(report.pk)
    report.refresh_from_db()
    assert report.state == ReportState.FAILED and report.finished_at is not None and report.lease_until is None
    run_warm_pool_report(report.pk)  # a redelivered task finds it finished and leaves it alone
    assert WarmPoolReport.objects.get(pk=report.pk).finished_at == report.finished_at


def test_the_command_prints_json(pool: Pool, traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    call_command("warm_pool_report", "chat-8b", "--trace", str(traces_dir / "AzureLLMInferenceTrace_code.csv"),
                 "--days", "0.012", "--sizes", "0", "--json", "--out", str(tmp_path))
    printed = json.loads(capsys.readouterr().out)
    assert printed["pool"] == "gpu-us-east/chat-8b" and [row["warm_pool_pct"] for row in printed["rows"]] == [0, 40]
    assert printed == {"id": printed["id"], "pool": printed["pool"], **WarmPoolReport.objects.get().result}
