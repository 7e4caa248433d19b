"""Left running for a year: the alerts and incidents pages read their latest resolved rows by index, not by
sorting every alert and incident ever resolved."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane.models import Pool
from incidents.choices import AlertState, IncidentState
from incidents.models import Alert, Incident

from tests.history_reads import grown, reads_of


def add_resolved_day(pool: Pool, day: datetime) -> None:
    """A bad day long over: ten incidents, each opened by ten alerts, all resolved."""
    for i in range(10):
        at = day + timedelta(hours=i)
        incident = Incident.objects.create(team=pool.team, cluster=pool.cluster, pool=pool, title="surge", severity="P0",
                                           state=IncidentState.RESOLVED, opened_at=at, resolved_at=at + timedelta(hours=1))
        Alert.objects.bulk_create(
            Alert(team=pool.team, cluster=pool.cluster, pool=pool, rule="ttft_p99", tier="P0",
                  fingerprint=f"{at:%Y%m%d%H}-{j}", state=AlertState.RESOLVED, started_at=at, fired_at=at,
                  resolved_at=at + timedelta(minutes=j), last_evaluated_at=at, incident=incident) for j in range(10))


def test_the_alerts_and_incidents_pages_read_no_more_with_ten_days_resolved(pool: Pool, alice: User) -> None:
    client = Client()
    client.force_login(alice)
    now = timezone.now()

    def pages() -> None:
        for url in ("/alerts/", "/incidents/"):
            assert client.get(url).status_code == 200, url

    add_resolved_day(pool, now - timedelta(days=1))
    one_day = reads_of(pages)
    for days_ago in range(2, 11):
        add_resolved_day(pool, now - timedelta(days=days_ago))
    assert grown(one_day, reads_of(pages)) == {}
