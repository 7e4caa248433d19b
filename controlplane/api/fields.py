"""Ids in request bodies: whole numbers, and nothing that merely rounds to one.

DRF hands a related field's value to the ORM as it came, and the ORM casts it with `int()`: `{"pool": 3.7}`,
`{"pool": 3.0}`, `" 3"` and `"+3"` all named pool 3. A caller whose id went through a float has a bug;
acting on the object it rounds to hides it. An id here is a JSON integer or a string of ASCII digits.
"""
from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

DIGITS = re.compile(r"[0-9]+")
NOT_AN_ID = "Expected a whole-number id such as 12 (a JSON integer or a string of digits), received {data_type}."


def whole_number(data: Any) -> int | None:
    """`data` as an id when it is exactly one: an int (not a bool), or a string of ASCII digits; else None."""
    if isinstance(data, bool):
        return None
    if isinstance(data, int):
        return data
    if isinstance(data, str) and DIGITS.fullmatch(data):
        return int(data)
    return None


class StrictPrimaryKeyRelatedField(serializers.PrimaryKeyRelatedField):
    """A related object named by its id, and by a whole number only (ScopedModelSerializer's related field)."""

    default_error_messages = {"not_an_id": NOT_AN_ID}

    def to_internal_value(self, data: Any) -> Any:
        pk = whole_number(data)
        if pk is None:
            self.fail("not_an_id", data_type=type(data).__name__)
        return super().to_internal_value(pk)


class StrictIdField(serializers.IntegerField):
    """An id the view looks up itself (a bulk decision's ids, a playbook run's incident): a whole number only,
    where DRF's IntegerField would take 3.0 and "3.0" as 3."""

    default_error_messages = {"not_an_id": NOT_AN_ID}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", 2**63 - 1)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        pk = whole_number(data)
        if pk is None:
            self.fail("not_an_id", data_type=type(data).__name__)
        return pk
