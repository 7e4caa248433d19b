"""The base of every service error; the API and views turn one into a 4xx answer."""
from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status_code = 400

    def payload(self) -> dict[str, Any]:
        return {"detail": str(self)}
