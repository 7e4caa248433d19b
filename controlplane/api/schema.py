"""The error answers every endpoint can give, written into the OpenAPI schema (drf-spectacular hook).

drf-spectacular documents the success answers it can see in the views; the errors come from the shared
machinery (authentication, RolePermission, the team scoping that answers 404, the exception handler's
400 and 409): documenting them here, once, keeps the schema true for every endpoint (schemathesis checks).
"""
from __future__ import annotations

from typing import Any

ERROR = {"$ref": "#/components/schemas/Error"}
ERROR_SCHEMA = {
    "type": "object",
    "description": "`detail` says what went wrong; a validation error names each field instead: "
                   "`{\"field\": [\"message\"]}`.",
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": True,
}
WRITES = {"post", "put", "patch", "delete"}
DESCRIPTIONS = {
    "400": "Bad input: the body, a field or a query parameter (named in the answer).",
    "401": "No valid token or session.",
    "403": "The role in the object's team does not allow this.",
    "404": "No such object, or not visible to the caller's teams.",
    "409": "The change conflicts with the current state (a transition no longer allowed, an object still in use, "
           "a uniqueness rule).",
}


def _codes(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    codes = ["401", "403"]
    if "{" in path:
        codes.append("404")
    parameters = {parameter.get("name") for parameter in operation.get("parameters", [])}
    if method in WRITES or parameters - {"id", "slug"}:  # bodies, and query parameters such as limit
        codes.append("400")
    if method in WRITES:
        codes.append("409")
    return codes


def document_errors(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:  # noqa: ARG001
    """POSTPROCESSING_HOOKS entry: adds the error answers and their `Error` schema."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for code in _codes(path, method, operation):
                operation["responses"].setdefault(code, {
                    "description": DESCRIPTIONS[code], "content": {"application/json": {"schema": ERROR}}})
    return result
