"""Every log line names what it came from: a web request's lines its request id (Django's own line for a 4xx or
5xx answer too), a Celery task's lines the task's id, so a worker's lines of one execution can be found."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from celery import shared_task
from django.test import Client

from controlplane import logs

logger = logging.getLogger("headroom.test.tasks")


@pytest.fixture
def json_lines() -> Iterator[list[dict]]:
    """What the production handler (settings.LOGGING with LOG_FORMAT=json) would write, one dict per line."""
    lines: list[dict] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(self.format(record)))

    handler = Collect()
    handler.addFilter(logs.RequestIdFilter())
    handler.setFormatter(logs.JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lines
    finally:
        root.removeHandler(handler)


@pytest.mark.django_db
def test_djangos_line_for_an_error_answer_carries_the_request_id(json_lines: list[dict]) -> None:
    # Django writes it after the whole middleware chain returned, outside the request id's context.
    response = Client().get("/api/no-such-page/", HTTP_X_REQUEST_ID="req-0123456789")
    assert response.status_code == 404
    [line] = [line for line in json_lines if line["logger"] == "django.request"]
    assert (line["level"], line["request_id"]) == ("WARNING", "req-0123456789")


@shared_task(ignore_result=True)
def _log_from_a_task() -> None:
    logger.warning("scaling chat-8b")


def test_a_tasks_lines_carry_its_task_id(json_lines: list[dict]) -> None:
    _log_from_a_task.apply(task_id="7f3c0a52-task-id")
    logger.warning("outside any task")
    inside, outside = (line for line in json_lines if line["logger"] == logger.name)
    assert (inside["task_id"], inside["request_id"]) == ("7f3c0a52-task-id", "")
    assert outside["task_id"] == ""
