"""Chaos: PostgreSQL drops Headroom's idle connection between two ticks (a failover, an admin's
pg_terminate_backend, a proxy's idle timeout). The worker keeps connections for DATABASE_CONN_MAX_AGE, so
the next tick starts on a dead one: it must notice before its first query and reconnect, not lose the tick."""
from __future__ import annotations

import psycopg
import pytest
from django.db import close_old_connections, connection

from controlplane.models import Pool
from scaling import loop
from scaling.models import SignalSample


def _terminate(pid: int) -> None:
    settings = connection.settings_dict
    with psycopg.connect(host=settings["HOST"] or "127.0.0.1", port=settings["PORT"] or 5432,
                         user=settings["USER"] or "postgres", dbname=settings["NAME"], autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.django_db(transaction=True)
def test_a_connection_dropped_between_two_ticks_costs_no_tick(pool: Pool, settings, monkeypatch) -> None:  # noqa: ANN001
    settings.PROMETHEUS_ENABLED = settings.KUBERNETES_ENABLED = False
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)  # production's default (the tests use 0)
    connection.close()  # the next connection is made with it
    close_old_connections()  # a task starts (Celery's Django fixup does this, as a request does)
    loop.tick([Pool.objects.select_related("cluster", "team").get(pk=pool.pk)])
    close_old_connections()  # the task ends: the connection is kept for the next one
    dead = connection.connection.info.backend_pid
    _terminate(dead)

    close_old_connections()  # the next tick's task starts
    loop.tick([Pool.objects.select_related("cluster", "team").get(pk=pool.pk)])  # no OperationalError
    assert connection.connection.info.backend_pid != dead
    assert SignalSample.objects.filter(pool=pool).count() == 2  # both ticks recorded, none lost or doubled
    connection.close()
