"""API errors answered as Kubernetes `Status` objects, the way the real API server words them."""
from __future__ import annotations

from typing import Any

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict",
           410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError"}


class ApiError(Exception):
    def __init__(self, code: int, message: str, *, name: str = "", group: str = "", kind: str = "",
                 reason: str | None = None, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message = code, message
        self.name, self.group, self.kind = name, group, kind
        self.reason = reason or REASONS.get(code, "Unknown")
        self.retry_after_s = retry_after_s  # sent as the Retry-After header and details.retryAfterSeconds

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        }
        if self.name or self.kind:
            body["details"] = {"name": self.name, "group": self.group, "kind": self.kind}
        if self.retry_after_s is not None:
            body.setdefault("details", {})["retryAfterSeconds"] = self.retry_after_s
        return body


def not_found(plural: str, group: str, name: str) -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(404, f'{qualified} "{name}" not found', name=name, group=group, kind=plural)


def conflict(plural: str, group: str, name: str) -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(409, f'Operation cannot be fulfilled on {qualified} "{name}": the object has been '
                         "modified; please apply your changes to the latest version and try again",
                    name=name, group=group, kind=plural)


def invalid(kind: str, group: str, name: str, problem: str) -> ApiError:
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, f'{qualified} "{name}" is invalid: {problem}', name=name, group=group, kind=kind)
