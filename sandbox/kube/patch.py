"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), as the API server applies them.

Strategic merge patch is treated as a merge patch: for the fields the sandbox's objects carry
(replicas, labels, annotations, weights) the two agree; list merging by key is not emulated.
"""
from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """The patch cannot be applied (bad document, failed `test`, missing path)."""


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"invalid JSON pointer {pointer!r}")
    return [_unescape(token) for token in pointer[1:].split("/")]


def _parent(document: Any, pointer: str) -> tuple[Any, str]:
    tokens = _split(pointer)
    if not tokens:
        raise PatchError("the whole document cannot be the target of this operation")
    node = document
    for token in tokens[:-1]:
        node = _child(node, token, pointer)
    return node, tokens[-1]


def _child(node: Any, token: str, pointer: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise PatchError(f"path {pointer} does not exist")
        return node[token]
    if isinstance(node, list):
        index = _index(node, token, pointer, allow_end=False)
        return node[index]
    raise PatchError(f"path {pointer} does not exist")


def _index(node: list[Any], token: str, pointer: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(node)
    if not token.isdigit():
        raise PatchError(f"invalid array index in {pointer}")
    index = int(token)
    if index > len(node) or (index == len(node) and not allow_end):
        raise PatchError(f"array index out of range in {pointer}")
    return index


def _get(document: Any, pointer: str) -> Any:
    node = document
    for token in _split(pointer):
        node = _child(node, token, pointer)
    return node


def _add(document: Any, pointer: str, value: Any) -> Any:
    if pointer == "":
        return value
    parent, token = _parent(document, pointer)
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, pointer, allow_end=True), value)
    else:
        raise PatchError(f"path {pointer} does not exist")
    return document


def _remove(document: Any, pointer: str) -> Any:
    parent, token = _parent(document, pointer)
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"path {pointer} does not exist")
        return parent.pop(token)
    if isinstance(parent, list):
        return parent.pop(_index(parent, token, pointer, allow_end=False))
    raise PatchError(f"path {pointer} does not exist")


def json_patch(document: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    result = copy.deepcopy(document)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"invalid operation {operation!r}")
        op, path = operation["op"], operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f"operation {op} on {path} needs a value")
        if op == "add":
            result = _add(result, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            _remove(result, path)
        elif op == "replace":
            _get(result, path)  # must exist
            if path == "":
                result = copy.deepcopy(operation["value"])
            else:
                _remove(result, path)
                result = _add(result, path, copy.deepcopy(operation["value"]))
        elif op in ("move", "copy"):
            value = _get(result, operation.get("from", ""))
            if op == "move":
                _remove(result, operation["from"])
            result = _add(result, path, copy.deepcopy(value))
        elif op == "test":
            if _get(result, path) != operation["value"]:
                raise PatchError(f"test operation failed at {path}")
        else:
            raise PatchError(f"unknown operation {op!r}")
    return result
