"""JSON bodies within `controlplane.jsonlimits`' nesting limit (NUL characters are the fields' to refuse)."""
from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from controlplane.jsonlimits import MAX_JSON_DEPTH, nesting_depth


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None) -> Any:  # noqa: ANN001
        too_deep = ParseError(f"JSON parse error - the body nests deeper than {MAX_JSON_DEPTH} levels.")
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise too_deep from None
        if nesting_depth(data) > MAX_JSON_DEPTH:
            raise too_deep
        return data
