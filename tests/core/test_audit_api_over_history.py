"""Left running for a year: GET /api/v1/audit/ pages through the log without counting it (docs/api.md: no
total), so a page reads what it shows whatever the log holds, and `next` is there exactly while more rows are."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.choices import Channel
from controlplane.models import AuditEvent, Team

from tests.core.conftest import token_client
from tests.history_reads import grown, reads_of


def _log(team: Team, day: datetime, events: int) -> None:
    """A day of the loop's records (written with their time: the log is append-only, in PostgreSQL too)."""
    field = AuditEvent._meta.get_field("at")
    field.auto_now_add = False
    try:
        AuditEvent.objects.bulk_create(
            AuditEvent(at=day + timedelta(seconds=i), actor_name="auto:system", channel=Channel.AUTO, action="propose",
                       object_type="scaling.proposal", object_id=str(i), team=team) for i in range(events))
    finally:
        field.auto_now_add = True


def test_a_page_of_the_log_reads_no_more_with_ten_days_of_it(alice: User, ml_team: Team) -> None:
    client = token_client(alice)
    now = timezone.now()

    def page() -> None:
        assert client.get("/api/v1/audit/").status_code == 200

    _log(ml_team, now - timedelta(days=1), 300)
    one_day = reads_of(page)
    for days_ago in range(2, 11):
        _log(ml_team, now - timedelta(days=days_ago), 300)
    assert grown(one_day, reads_of(page)) == {}


def test_next_is_there_while_more_rows_are(alice: User, ml_team: Team) -> None:
    _log(ml_team, timezone.now() - timedelta(hours=1), 5)
    client = token_client(alice)
    first = client.get("/api/v1/audit/?limit=3").json()
    assert len(first["results"]) == 3 and first["previous"] is None and "count" not in first
    second = client.get(first["next"]).json()
    assert len(second["results"]) == 2 and second["next"] is None and second["previous"] is not None
    assert [row["object_id"] for row in first["results"] + second["results"]] == ["4", "3", "2", "1", "0"]
