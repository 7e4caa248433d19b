"""The planner's constants live in one place, with their provenance and bounds (issue 12 item 10)."""
from __future__ import annotations

import dataclasses

import pytest

from scaling.engine import constants
from scaling.engine.planner import PoolPlan


def test_every_constant_is_a_pool_plan_default_and_within_its_own_bounds():
    plan = PoolPlan(capacity_rps_per_replica=1.0)
    names = {f.name for f in dataclasses.fields(PoolPlan)}
    for name, constant in constants.CONSTANTS.items():
        assert name in names, name
        assert getattr(plan, name) == constant.value, name
        assert constant.low <= constant.value <= constant.high and constant.fitted_on, name


def test_overrides_are_validated_and_applied():
    overrides = constants.parse_overrides({"request_rate_margin": 1.5, "scale_down_pods": 2})
    plan = constants.apply_overrides(PoolPlan(capacity_rps_per_replica=1.0), overrides)
    assert plan.request_rate_margin == 1.5 and plan.scale_down_pods == 2 and isinstance(plan.scale_down_pods, int)
    assert constants.parse_overrides(None) == {} == constants.parse_overrides({})
    for bad in ({"hold_after_unknown_s": 10}, {"correction_min": True}, {"correction_min": float("nan")},
                {"correction_min": 1.0, "correction_max": 1.0, "correction_gain": 0}):
        with pytest.raises(ValueError):
            constants.parse_overrides(bad)
