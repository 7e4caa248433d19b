"""Warm-pool reports on thin or holed stored history: a scored period without a request, a history that stops
hours before the report was asked (Prometheus down since), a pool younger than the period asked for, and
traffic scaled away from what the pool recorded."""
from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import report_service
from scaling.choices import ReportState
from scaling.models import SignalSample, WarmPoolReport


def _samples(pool: Pool, hours: float, rate=lambda at_h: 50 + 30 * math.sin(2 * math.pi * at_h / 1.5),  # noqa: ANN001
             ending_h_ago: float = 0.0) -> None:
    """Every 15 s for `hours`, the last one `ending_h_ago` hours before now."""
    now = timezone.now() - timedelta(hours=ending_h_ago)
    SignalSample.objects.bulk_create(
        SignalSample(pool=pool, at=now - timedelta(hours=hours - tick / 240), request_rate_rps=rate(tick / 240),
                     ttft_p95_s=0.3, ready_replicas=5) for tick in range(int(hours * 240)))


def _run(pool: Pool, user: User, days: float, **options) -> WarmPoolReport:  # noqa: ANN003
    report = report_service.request_report(pool, core.Actor(user, Channel.API), days=days, sizes_pct=(0, 60),
                                           enqueue=False, **options)
    return report_service.run(report.pk)


def test_a_report_whose_scored_period_holds_no_requests_fails_with_a_sentence(pool: Pool, alice: User,
                                                                               tmp_path: Path) -> None:
    """Traffic in the warm-up only, then a quiet pool: nothing is scored, so no size 'meets the SLO at 100 %'."""
    _samples(pool, 0.5, rate=lambda at_h: 10.0 if at_h < 0.17 else 0.0)
    report = _run(pool, alice, days=0.3 / 24)
    assert report.state == ReportState.FAILED, report.result.get("recommendation")
    assert "holds no requests" in report.error
    with pytest.raises(CommandError, match="holds no requests"):  # one line, never a TypeError from the table
        call_command("warm_pool_report", "chat-8b", "--days", str(0.3 / 24), "--sizes", "0", "--out", str(tmp_path))


def test_a_report_after_a_recent_prometheus_outage_replays_up_to_the_last_sample(pool: Pool, alice: User) -> None:
    """Three hours stored, then nothing for the last two (Prometheus down): no --days steps over a hole at the
    period's end, so the report replays the last days that were recorded and says where they stop."""
    _samples(pool, 3.0, ending_h_ago=2.0)
    report = _run(pool, alice, days=2.0 / 24)
    assert report.state == ReportState.SUCCEEDED, report.error
    assert "before the report was asked" in report.result["period"]["source"]
    assert report.result["rows"][0]["requests"] > 100_000


def test_a_young_pool_is_told_where_its_history_starts_not_of_a_gap(pool: Pool, alice: User) -> None:
    """An hour of samples and the default 7 days asked for: the history is not holed, it is short."""
    _samples(pool, 1.0)
    report = _run(pool, alice, days=7)
    assert report.state == ReportState.FAILED
    assert "gap" not in report.error and "starts only at" in report.error and "covers 1.0 h" in report.error


def test_a_rate_scaled_report_does_not_compare_its_replay_with_the_unscaled_record(pool: Pool, alice: User) -> None:
    """x3 traffic is a what-if the pool never served: its record cannot say how far to trust the replay."""
    _samples(pool, 2.5)
    report = _run(pool, alice, days=2.5 / 24 - 0.001, rate_scale=3.0)
    assert report.state == ReportState.SUCCEEDED, report.error
    assert report.result["observed_vs_replay"] is None, report.result["observed_vs_replay"]
