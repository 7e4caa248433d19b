"""`?limit=&offset=` pagination that answers a clear 400 for values out of range, never a database error."""
from __future__ import annotations

from rest_framework import pagination
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

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


class UncountedPagination(LimitOffsetPagination):
    """`?limit=&offset=` pages without a total, for the audit log: a count would read every visible event of the
    log on every page, millions of rows after a year (docs/api.md). One row more than the page is read, so
    `next` is there exactly while more rows are."""

    def paginate_queryset(self, queryset, request: Request, view=None) -> list:  # noqa: ANN001
        self.request = request
        self.limit = self.get_limit(request)
        self.offset = self.get_offset(request)
        rows = list(queryset[self.offset:self.offset + self.limit + 1])
        self.has_next = len(rows) > self.limit
        self.count = self.offset + len(rows)  # what is known to exist: the browsable API's page links
        return rows[:self.limit]

    def get_next_link(self) -> str | None:
        if not self.has_next:
            return None
        url = self.request.build_absolute_uri()
        url = replace_query_param(url, self.limit_query_param, self.limit)
        return replace_query_param(url, self.offset_query_param, self.offset + self.limit)

    def get_paginated_response(self, data: list) -> Response:
        return Response({"next": self.get_next_link(), "previous": self.get_previous_link(), "results": data})

    def get_paginated_response_schema(self, schema: dict) -> dict:
        paginated = super().get_paginated_response_schema(schema)
        paginated["properties"].pop("count")
        paginated["required"] = [name for name in paginated.get("required", []) if name != "count"]
        return paginated
