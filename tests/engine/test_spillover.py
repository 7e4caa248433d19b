"""The per-request spill-over rule shared by the replay's route and the sandbox gateway."""
from __future__ import annotations

import math

import pytest

from scaling.engine.spillover import queued_start_wait_s, spill_after_s, spills


def test_the_threshold_is_a_share_of_the_slo() -> None:
    assert spill_after_s(0.2, 1.0) == pytest.approx(0.2)
    assert spill_after_s(0.2, 2.5) == pytest.approx(0.5)


@pytest.mark.parametrize("share, slo, message", [(0.0, 1.0, "wait share"), (-0.1, 1.0, "wait share"),
                                                 (math.nan, 1.0, "wait share"), (0.2, 0.0, "TTFT SLO")])
def test_a_bad_threshold_is_refused(share: float, slo: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spill_after_s(share, slo)


def test_a_late_eligible_request_spills_with_or_without_an_active_fallback() -> None:
    assert spills(eligible=True, start_wait_s=0.5, after_s=0.2)  # the gateway's rule: no fallback state in it
    assert not spills(eligible=False, start_wait_s=0.5, after_s=0.2)  # the priority class stays
    assert not spills(eligible=True, start_wait_s=0.2, after_s=0.2)  # not later than
    assert not spills(eligible=True, start_wait_s=0.5, after_s=None)  # off
    assert spills(eligible=True, start_wait_s=math.inf, after_s=0.2)  # no ready replica


def test_a_replica_with_a_free_slot_and_no_queue_starts_at_once() -> None:
    assert queued_start_wait_s(waiting=0, running=7, slots=8, completions_per_s=6.0) == 0.0
    assert queued_start_wait_s(waiting=0, running=0, slots=8, completions_per_s=0.0) == 0.0


def test_a_full_or_queued_replica_waits_for_the_queue_and_one_slot() -> None:
    assert queued_start_wait_s(waiting=0, running=8, slots=8, completions_per_s=8.0) == pytest.approx(0.125)
    assert queued_start_wait_s(waiting=3, running=8, slots=8, completions_per_s=8.0) == pytest.approx(0.5)
    # A queue with free slots (the KV cache is full) waits the same way.
    assert queued_start_wait_s(waiting=3, running=5, slots=8, completions_per_s=8.0) == pytest.approx(0.5)
    assert queued_start_wait_s(waiting=1, running=8, slots=8, completions_per_s=0.0) == math.inf


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="slots at least 1"):
        queued_start_wait_s(waiting=-1, running=0, slots=8, completions_per_s=1.0)
    with pytest.raises(ValueError, match="slots at least 1"):
        queued_start_wait_s(waiting=0, running=0, slots=0, completions_per_s=1.0)
