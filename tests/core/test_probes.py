"""The web pod's probes as deploy/kubernetes/headroom.yaml wires them: liveness never reads the database (a
restart cannot bring PostgreSQL back, and restarting every pod at once makes the outage worse), readiness does."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from django.db import OperationalError
from django.test import Client

from controlplane import views

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "headroom.yaml"


def _web_container() -> dict:
    [web] = [doc for doc in yaml.safe_load_all(DEPLOY.read_text()) if doc and doc["kind"] == "Deployment"
             and doc["metadata"]["name"] == "headroom-web"]
    [container] = web["spec"]["template"]["spec"]["containers"]
    return container


def _probe_path(kind: str) -> str:
    return _web_container()[kind]["httpGet"]["path"]


class _DownDatabase:
    def cursor(self):  # noqa: ANN201
        raise OperationalError("connection to server at \"db.internal\" (10.1.2.3), port 5432 failed")


def test_it_keeps_the_pod_alive_while_the_database_is_down() -> None:
    # No `db` fixture: pytest-django refuses any query, so the probe answers without touching the database.
    response = Client().get(_probe_path("livenessProbe"))
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_it_takes_the_pod_out_of_the_service_while_the_database_is_down(monkeypatch, caplog) -> None:  # noqa: ANN001
    monkeypatch.setattr(views, "connection", _DownDatabase())
    with caplog.at_level(logging.WARNING, logger="controlplane.views"):
        response = Client().get(_probe_path("readinessProbe"))
    assert response.status_code == 503
    # Probed every 10 s by every pod through the whole outage: one line each, not a traceback each.
    [record] = [record for record in caplog.records if record.name == "controlplane.views"]
    assert record.levelname == "WARNING" and record.exc_info is None and "db.internal" in record.getMessage()


@pytest.mark.django_db
def test_the_readiness_probe_answers_ok_with_the_database_up() -> None:
    assert Client().get(_probe_path("readinessProbe")).json() == {"status": "ok"}


def test_the_probes_are_exempt_from_the_https_redirect(settings) -> None:  # noqa: ANN001
    settings.SECURE_SSL_REDIRECT = True  # the kubelet speaks plain http to the pod
    assert Client().get(_probe_path("livenessProbe")).status_code == 200
