"""What JSON we accept from people, on every surface (the API's bodies, the web forms' JSON fields).

No setting of ours nests more than a few levels, and PostgreSQL's text and jsonb columns cannot hold a
NUL character, so both are refused with a message before anything is stored. Python's decoder raises
RecursionError (a 500) on thousands of nested brackets, and a few hundred levels that do decode still
make every later walk over the value costly.
"""
from __future__ import annotations

import json
from typing import Any

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


def problem(value: Any) -> str | None:
    """Why `value` (decoded JSON) cannot be stored, or None. Walks without recursion."""
    if nesting_depth(value) > MAX_JSON_DEPTH:
        return f"nests deeper than {MAX_JSON_DEPTH} levels"
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and "\x00" in item:
            return "contains a NUL character (\\u0000), which cannot be stored"
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def loads(text: str) -> Any:
    """`text` decoded, or ValueError naming what is wrong: not JSON, too deep, or a NUL character."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    reason = problem(value)
    if reason:
        raise ValueError(reason)
    return value
