"""Six workers take the same warm-pool report at one instant: one runs it."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import report_service
from scaling.choices import ReportState
from scaling.models import WarmPoolReport

from tests.concurrency import race

pytestmark = pytest.mark.django_db(transaction=True)


def test_one_of_the_racing_workers_takes_the_report(pool: Pool, alice: User) -> None:
    report = report_service.request_report(pool, core.Actor(alice, Channel.API), days=1, enqueue=False)
    results = race(lambda: report_service.take(report.pk))
    assert sorted(results) == [False] * 5 + [True]
    assert WarmPoolReport.objects.get(pk=report.pk).state == ReportState.RUNNING
