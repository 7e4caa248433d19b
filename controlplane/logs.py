"""Structured logs: one JSON object per line (`LOG_FORMAT=json`), each with the request id of the request
it was written in, so a line in the log, an `X-Request-ID` answer header and an audit row can be joined, and
the id of the Celery task it was written in, so one task's lines can be told from the others' on a worker."""
from __future__ import annotations

import contextvars
import json
import logging
from datetime import datetime, timezone

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


class RequestIdFilter(logging.Filter):
    """Puts the current request's id and the current Celery task's id on every record (each empty outside one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        # Django logs a 4xx/5xx answer after the middleware chain returned, outside the context var: it
        # passes the request along, which carries the id the middleware gave it.
        record.request_id = request_id.get() or getattr(getattr(record, "request", None), "request_id", "")
        record.task_id = _task_id()
        return True


def _task_id() -> str:
    """The id of the Celery task running in this thread (a worker's, or an eager one's in the demo), else ''."""
    from celery import current_task  # a proxy to None outside a task

    task_request = getattr(current_task, "request", None)
    return str(getattr(task_request, "id", None) or "")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", ""),
            "task_id": getattr(record, "task_id", ""),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)
