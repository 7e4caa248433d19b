"""Times through the API: windows are wall-clock times in a named zone (an offset or an unknown zone is a
400 naming the field), and instants are ISO 8601 (UTC when no offset is given)."""
from __future__ import annotations

from django.contrib.auth.models import User

from controlplane.models import Cluster, Pool, ScheduleWindow

from .conftest import token_client


def _schedule(pool: Pool, **changes) -> dict:  # noqa: ANN003
    return {"pool": pool.pk, "name": "launch", "weekday": 2, "start": "18:00", "end": "20:00",
            "time_zone": "Europe/Paris"} | changes


def test_it_refuses_a_window_time_with_an_offset(bob: User, pool: Pool) -> None:
    response = token_client(bob).post("/api/v1/schedules/", _schedule(pool, start="18:00+02:00"), format="json")
    assert response.status_code == 400, response.data
    assert "offset" in str(response.data["start"]) and "time_zone" in str(response.data["start"])
    assert not ScheduleWindow.objects.exists()


def test_it_names_the_field_of_an_unknown_zone(bob: User, pool: Pool, cluster: Cluster) -> None:
    client = token_client(bob)
    response = client.post("/api/v1/schedules/", _schedule(pool, time_zone="Europe/Pariss"), format="json")
    assert response.status_code == 400 and list(response.data) == ["time_zone"]
    assert "Europe/Pariss" in str(response.data["time_zone"])
    response = client.patch(f"/api/v1/clusters/{cluster.pk}/", {"time_zone": "EST+5"}, format="json")
    assert response.status_code == 400 and list(response.data) == ["time_zone"]


def test_it_says_why_an_off_hours_time_has_no_offset(bob: User, cluster: Cluster) -> None:
    response = token_client(bob).patch(
        f"/api/v1/clusters/{cluster.pk}/",
        {"off_hours": [{"weekdays": [5], "start": "22:00Z", "end": "06:00"}]}, format="json")
    assert response.status_code == 400
    assert "without a UTC offset" in str(response.data["off_hours"])


def test_it_reads_an_instant_with_its_offset_and_one_without_as_utc(alice: User, pool: Pool) -> None:
    from incidents.models import Silence

    client = token_client(alice)
    for ends_at, expected in (("2099-01-12T12:00:00+05:30", "2099-01-12T06:30:00Z"),
                              ("2099-01-12T12:00:00", "2099-01-12T12:00:00Z")):
        created = client.post("/api/v1/silences/", {"team": "ml-platform", "ends_at": ends_at,
                                                    "matchers": [{"label": "rule", "value": "outage"}]}, format="json")
        assert created.status_code == 201, created.data
        assert created.data["ends_at"] == expected
        assert Silence.objects.get(pk=created.data["id"]).ends_at.isoformat() == expected.replace("Z", "+00:00")
