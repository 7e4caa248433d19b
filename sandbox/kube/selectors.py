"""Kubernetes label selectors (`app=x,tier!=db,env in (a,b),!legacy,team`) and field selectors."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Matcher = Callable[[dict[str, str]], bool]

_SET_RE = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_KEY_RE = re.compile(r"^[\w./-]+$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [term.strip() for term in terms if term.strip()]


def _term(term: str) -> Matcher:
    found = _SET_RE.match(term)
    if found:
        key, operator, raw = found.groups()
        values = {value.strip() for value in raw.split(",") if value.strip()}
        if operator == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    for operator in ("!=", "==", "="):
        if operator in term:
            key, value = (part.strip() for part in term.split(operator, 1))
            if operator == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    key = term[1:].strip() if term.startswith("!") else term
    if not _KEY_RE.match(key):
        raise ValueError(term)
    if term.startswith("!"):
        return lambda labels: key not in labels
    return lambda labels: key in labels


def label_matcher(selector: str | None) -> Matcher:
    """A predicate over a label dict; ValueError on a selector it cannot read."""
    if not selector:
        return lambda labels: True
    try:
        matchers = [_term(term) for term in _split_terms(selector)]
    except ValueError:
        raise ValueError(f"unable to parse requirement: {selector!r}") from None
    return lambda labels: all(match(labels) for match in matchers)


def field_matcher(selector: str | None) -> Callable[[dict[str, Any]], bool]:
    """Field selectors on dotted paths (metadata.name=x, status.phase!=Running)."""
    if not selector:
        return lambda obj: True
    tests: list[tuple[list[str], str, bool]] = []
    for term in _split_terms(selector):
        negate = "!=" in term
        path, value = term.split("!=" if negate else ("==" if "==" in term else "="), 1)
        tests.append((path.strip().split("."), value.strip(), negate))

    def matches(obj: dict[str, Any]) -> bool:
        for path, value, negate in tests:
            node: Any = obj
            for part in path:
                node = node.get(part) if isinstance(node, dict) else None
            if (str(node) == value) == negate:
                return False
        return True

    return matches


_OPERATOR_FORMS = {"In": "{key} in ({values})", "NotIn": "{key} notin ({values})", "Exists": "{key}",
                   "DoesNotExist": "!{key}"}


def selector_string(selector: dict[str, Any]) -> str:
    """A LabelSelector (matchLabels and matchExpressions) serialized as the API server does, sorted by key."""
    terms = [(key, f"{key}={value}") for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or []:
        values = ",".join(sorted(expression.get("values") or []))
        terms.append((expression["key"], _OPERATOR_FORMS[expression["operator"]].format(key=expression["key"],
                                                                                         values=values)))
    return ",".join(term for _, term in sorted(terms))
