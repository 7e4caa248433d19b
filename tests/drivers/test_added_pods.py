"""Which pods a scale-up added, told from whole-second creation stamps (the cold start is measured on them)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kubernetes import client

from scaling.drivers.kubernetes import added_pods_ready_at

WRITE = datetime(2026, 12, 2, 12, 0, 0, 600_000, tzinfo=timezone.utc)


def _pod(created: datetime, ready_at: datetime | None) -> client.V1Pod:
    condition = client.V1PodCondition(type="Ready", status="True" if ready_at else "False",
                                      last_transition_time=ready_at or created)
    return client.V1Pod(metadata=client.V1ObjectMeta(creation_timestamp=created.replace(microsecond=0)),
                        status=client.V1PodStatus(conditions=[condition]))


def test_a_pod_ready_before_the_write_is_not_counted_even_when_created_within_its_second() -> None:
    old = _pod(WRITE - timedelta(milliseconds=500), WRITE - timedelta(milliseconds=100))
    new = _pod(WRITE + timedelta(milliseconds=50), WRITE + timedelta(seconds=2))
    assert added_pods_ready_at([old, new], WRITE, 1) == WRITE + timedelta(seconds=2)


def test_it_waits_until_every_added_pod_is_ready() -> None:
    first = _pod(WRITE + timedelta(seconds=1), WRITE + timedelta(seconds=3))
    second = _pod(WRITE + timedelta(seconds=1), None)
    assert added_pods_ready_at([first, second], WRITE, 2) is None
    assert added_pods_ready_at([first], WRITE, 2) is None  # one still to be created
    second = _pod(WRITE + timedelta(seconds=1), WRITE + timedelta(seconds=4))
    assert added_pods_ready_at([first, second], WRITE, 2) == WRITE + timedelta(seconds=4)


def test_pods_from_earlier_seconds_are_never_counted() -> None:
    earlier = _pod(WRITE - timedelta(seconds=5), None)
    assert added_pods_ready_at([earlier], WRITE, 1) is None


def test_an_older_pod_still_starting_in_the_second_of_the_write_is_waited_for_not_measured() -> None:
    starting = _pod(WRITE - timedelta(milliseconds=400), None)
    new = _pod(WRITE + timedelta(milliseconds=100), WRITE + timedelta(seconds=2))
    assert added_pods_ready_at([starting, new], WRITE, 1) is None
    starting = _pod(WRITE - timedelta(milliseconds=400), WRITE + timedelta(milliseconds=100))
    assert added_pods_ready_at([starting, new], WRITE, 1) == WRITE + timedelta(seconds=2)


def test_pods_of_a_later_write_are_not_waited_for() -> None:
    new = _pod(WRITE + timedelta(milliseconds=100), WRITE + timedelta(seconds=2))
    later = _pod(WRITE + timedelta(seconds=3), None)
    assert added_pods_ready_at([later, new], WRITE, 1) == WRITE + timedelta(seconds=2)
