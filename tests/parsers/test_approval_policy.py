"""A pool's approval policy (`controlplane.config.parse_approval_policy`): what it accepts, what it refuses
and says why, and the guardrail it sets (pure)."""
from __future__ import annotations

import pytest

from controlplane.config import ApprovalPolicy, parse_approval_policy


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"reactive_max_percent": 0}, "reactive_max_percent must be a whole number >= 1"),
        ({"reactive_max_percent": True}, "reactive_max_percent must be a whole number >= 1"),
        ({"reactive_max_percent": 50.5}, "reactive_max_percent must be a whole number >= 1"),
        ({"reactive_max_percent": 1001}, "reactive_max_percent must be at most 1000"),
        ({"reactive_max_step": None}, "reactive_max_step must be a whole number >= 1"),
        ({"auto_approve_reactive": 1}, "auto_approve_reactive must be true or false"),
        ({"guardrail": 4}, "unknown keys: guardrail"),
        ([4], "must be an object"),
    ],
)
def test_it_refuses_a_bad_policy_naming_the_setting(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_approval_policy(raw)


@pytest.mark.parametrize(
    ("raw", "current", "guardrail"),
    [
        ({}, 1, 4),  # the default: the HPA's max(4 pods, 100 %)
        ({}, 40, 40),
        ({"reactive_max_percent": None}, 40, 4),  # null: off
        ({"reactive_max_percent": 100}, 1, 4),  # the step where the share is less (the HPA's max(4 pods, 100 %))
        ({"reactive_max_percent": 100}, 12, 12),
        ({"reactive_max_percent": 50}, 7, 4),
        ({"reactive_max_percent": 50}, 9, 5),  # rounded up
        ({"reactive_max_percent": 25, "reactive_max_step": 2}, 40, 10),
    ],
)
def test_the_guardrail_is_the_step_or_the_share_of_the_pool_whichever_is_more(raw, current, guardrail):
    assert parse_approval_policy(raw).guardrail(current) == guardrail


def test_the_default_is_the_hpas_own_scale_up_rate():
    assert ApprovalPolicy().reactive_max_percent == 100 and ApprovalPolicy().reactive_max_step == 4
