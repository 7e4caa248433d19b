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

    def get_schema_operation_parameters(self, view):  # noqa: ANN001, ANN201
        """The bounds the API enforces, in the schema too (a client and schemathesis can see them)."""
        parameters = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: (1, self.max_limit), self.offset_query_param: (0, MAX_OFFSET)}
        for parameter in parameters:
            low, high = bounds[parameter["name"]]
            parameter["schema"] |= {"minimum": low, "maximum": high}
        return parameters
