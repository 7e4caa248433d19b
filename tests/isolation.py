"""What keeps two test runs on one machine, and one test and the machine, apart.

`RUN_ID` names the run's own PostgreSQL test database (tests/conftest.py) and claims its Redis
database (tests/integration/conftest.py): `TEST_RUN_ID` if set, else the pytest process id, and the
pytest-xdist worker's name after it.
"""
from __future__ import annotations

import os
import re
import socket

RUN_ID = os.environ.get("TEST_RUN_ID") or str(os.getpid())
if not re.fullmatch(r"[a-z0-9_]{1,20}", RUN_ID):
    raise ValueError(f"TEST_RUN_ID must be 1-20 of a-z, 0-9 and _, got {RUN_ID!r}")
# Under pytest-xdist (`make test` runs the database tier on two workers) each worker is a run of its own.
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    RUN_ID = f"{RUN_ID}_{worker}"


def closed_port() -> int:
    """A port nothing listens on: bound by us, then released. A fixed one (9, discard) may well be open."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
