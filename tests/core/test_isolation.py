"""Two test runs on one machine stay apart: each has its own PostgreSQL database; a closed port is closed."""
from __future__ import annotations

import socket

import pytest
from django.db import connection

from tests.isolation import RUN_ID, closed_port


@pytest.mark.django_db
def test_it_runs_on_a_database_named_after_the_run() -> None:
    name = connection.settings_dict["NAME"]
    assert name.startswith("test_") and name.endswith(f"_{RUN_ID}")


def test_a_closed_port_refuses_connections() -> None:
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", closed_port()), timeout=2):
        pass
