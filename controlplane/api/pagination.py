"""`?limit=&offset=` pagination that answers a clear 400 for values out of range, never a database error."""
from __future__ import annotations

from rest_framework import pagination
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

MAX_LIMIT = 500
MAX_OFFSET = 2**31 - 1


def _bounded(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise ValidationError({name: [f"Must be a whole number from {low} to {high}."]})
    return int(raw)


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_limit(self, request: Request) -> int:
        return _bounded(request, self.limit_query_param, self.default_limit, 1, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return _bounded(request, self.offset_query_param, 0, 0, MAX_OFFSET)
