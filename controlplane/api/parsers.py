"""JSON bodies with a nesting limit: no request of ours needs more, and a deeper one is an attack.

Python's decoder raises RecursionError (a 500) on thousands of nested brackets, and a few hundred
levels that do decode still make every later walk over the value (validation, JSON columns) costly.
"""
from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_JSON_DEPTH = 32  # channel settings and policies nest 3 or 4 levels


def nesting_depth(value: Any) -> int:
    """How deep objects and arrays nest in `value` (a scalar is 0, `{}` is 1), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


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
