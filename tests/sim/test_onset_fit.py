"""bench/onset_fit.py: the busy-share onset's rule on the training side, and its bad input."""
from __future__ import annotations

from bench.onset_fit import chosen, passes
from tests.sim.helpers import assert_refused
WEEK = {"worst_day": 0.995, "worst_day_ratio": 0.9, "gpu_hours": 1240.0}


def _case(below: bool = False, dominated: bool = False) -> dict:
    return {"case": "code", "below_a_baseline": below, "dominated": dominated, "gpu_hours": 5.0}


def _fit(onset: float, week_hours: float, code_hours: float, ok: bool = True) -> dict:
    return {"onset": onset, "passes": ok, "week_1": {**WEEK, "gpu_hours": week_hours}, "code_gpu_hours": code_hours}


def test_the_rule_asks_every_code_case_and_every_day_of_week_1():
    assert passes([_case(), _case()], WEEK)
    assert not passes([_case(), _case(below=True)], WEEK)
    assert not passes([_case(dominated=True)], WEEK)
    assert not passes([_case()], {**WEEK, "worst_day": 0.989})  # a day under the objective
    assert not passes([_case()], {**WEEK, "worst_day_ratio": 1.26})  # a day past 1.25x the clairvoyant's


def test_of_the_passing_onsets_the_fewest_gpu_hours_ties_to_the_smaller():
    fits = [_fit(1.2, 1246.1, 70.0), _fit(2.0, 1242.9, 70.0), _fit(1.5, 1242.9, 70.0), _fit(3.0, 1200.0, 60.0, ok=False)]
    assert chosen(fits)["onset"] == 1.5  # 3 is cheaper but fails; 1.5 and 2 tie: the smaller sees more onsets
    assert chosen([_fit(1.5, 1242.9, 71.0), _fit(2.0, 1242.9, 70.0)])["onset"] == 2.0  # then the code cases' hours
    assert chosen([_fit(3.0, 1200.0, 60.0, ok=False)]) is None


def test_bad_input_gets_a_message_before_any_replay():
    assert_refused("bench/onset_fit.py", ((["--onsets", "x"], "expected numbers"), (["--onsets", "11"], "from 0 to 10"),
                                          (["--busy-share-target", "0"], "--busy-share-target"),
                                          (["--pool", "nope=1"], "--pool 'nope=1'")))
