"""Signals carry their age; missing, NaN and stale are unknown, never zero."""
from __future__ import annotations

import math

import pytest

from scaling.engine.signals import (
    MISSING,
    STALE_AFTER_S,
    UNKNOWN,
    PoolSignals,
    Reading,
    all_known,
    is_unknown,
    known_values,
    sample,
    work_share,
)

READINGS = [
    ("fresh", Reading(4.0, 10.0), 4.0),
    ("a real zero is zero", Reading(0.0, 5.0), 0.0),
    ("exactly 90 s old is still known", Reading(3.0, STALE_AFTER_S), 3.0),
    ("older than 90 s is unknown", Reading(3.0, STALE_AFTER_S + 0.1), UNKNOWN),
    ("missing", MISSING, UNKNOWN),
    ("NaN", Reading(math.nan, 1.0), UNKNOWN),
    ("infinite", Reading(math.inf, 1.0), UNKNOWN),
    ("age unknown", Reading(2.0, None), UNKNOWN),
    ("from the future", Reading(2.0, -5.0), UNKNOWN),
]


@pytest.mark.parametrize("name, reading, expected", READINGS, ids=[row[0] for row in READINGS])
def test_it_reads_each_value_with_its_age(name: str, reading: Reading, expected: object) -> None:
    assert reading.known == expected
    assert reading.is_known == (expected is not UNKNOWN)
    assert is_unknown(reading) == (expected is UNKNOWN)


def test_it_never_confuses_unknown_with_zero() -> None:
    assert UNKNOWN != 0 and UNKNOWN != 0.0
    with pytest.raises(TypeError):
        bool(UNKNOWN)


def test_it_goes_stale_as_time_passes() -> None:
    reading = sample(12.0, sampled_at_s=1000.0, now_s=1030.0)
    assert reading.age_s == 30.0 and reading.is_known
    assert reading.aged(61.0).is_stale and reading.aged(61.0).known is UNKNOWN
    assert MISSING.aged(100.0) == MISSING


def test_it_lists_a_pools_unknown_signals() -> None:
    signals = PoolSignals(
        pool="llama-70b",
        queue_depth=Reading(12.0, 10.0),
        request_rate_rps=Reading(math.nan, 10.0),
        ready_replicas=Reading(4.0, 80.0),
        waiting_per_ready_replica=(Reading(6.0, 10.0), Reading(None, 10.0), Reading(6.0, 200.0)),
    )
    unknown = signals.unknown_signals()
    assert "request_rate_rps" in unknown and "kv_cache_usage" in unknown
    assert "queue_depth" not in unknown and "ready_replicas" not in unknown
    assert signals.oldest_age_s() == 80.0
    assert signals.waiting_values() == [6.0, None, None]
    later = signals.aged(20.0)
    assert later.ready_replicas.known is UNKNOWN and later.queue_depth.known == 12.0
    assert all_known(signals.queue_depth, signals.ready_replicas) and not all_known(signals.queue_depth, MISSING)
    assert known_values(list(signals.waiting_per_ready_replica)) == [6.0]


def test_it_has_no_age_when_nothing_is_known() -> None:
    assert PoolSignals(pool="empty").oldest_age_s() is UNKNOWN


# --- the work share (what the busy share term reads) ---------------------------------------------


def _pool(ready=4.0, running=None, tokens=None, age=5.0, engines=None) -> PoolSignals:
    def reading(value):
        return Reading(value, age) if value is not None else Reading()

    return PoolSignals(pool="chat", ready_replicas=Reading(ready, 0.0) if ready is not None else Reading(),
                       running_requests=reading(running), prompt_tokens_tick_rate=reading(tokens),
                       engines_per_replica=reading(engines))


@pytest.mark.parametrize(
    ("case", "signals", "slots", "prefill", "expected"),
    [
        ("the batch fill: 48 running on 4 x 16 slots", _pool(running=48.0), 16, None, 0.75),
        ("the prefill share: 30,000 tokens/s on 4 x 10,000", _pool(tokens=30_000.0), None, 10_000.0, 0.75),
        ("whichever is higher", _pool(running=16.0, tokens=36_000.0), 16, 10_000.0, 0.9),
        ("at most 1 (a queue does not make it more)", _pool(running=100.0), 16, None, 1.0),
        ("one sequence decoding on a replica reads nearly idle (DCGM would read busy)", _pool(ready=1.0, running=1.0),
         256, None, 1 / 256),
        ("a part whose series went missing: the other part", _pool(running=8.0, tokens=None), 16, 10_000.0, 0.125),
        ("neither field set: unknown, never 0", _pool(running=48.0, tokens=30_000.0), None, None, None),
        ("both series missing: unknown", _pool(), 16, 10_000.0, None),
        ("no ready replica: no share of anything", _pool(ready=0.0, running=3.0), 16, None, None),
        ("ready unknown: unknown", _pool(ready=None, running=3.0), 16, None, None),
        # --data-parallel-size 2: each pod runs two engines, each with its own --max-num-seqs and GPUs.
        ("data-parallel pods: 48 running on 4 pods x 2 engines x 16 slots", _pool(running=48.0, engines=2.0), 16,
         None, 0.375),
        ("data-parallel pods: the prefill share per engine", _pool(tokens=30_000.0, engines=2.0), None, 10_000.0,
         0.375),
        ("engines per replica unknown: one each", _pool(running=48.0, engines=None), 16, None, 0.75),
    ],
)
def test_the_work_share_is_read_from_vllm_against_the_pools_slots_and_prefill(case, signals, slots, prefill,
                                                                               expected):
    share = work_share(signals, slots, prefill)
    if expected is None:
        assert not share.is_known, case
    else:
        assert share.is_known and share.value == pytest.approx(expected), case
        assert share.age_s == 5.0, case  # the oldest part's (ready was read just now)


@pytest.mark.parametrize("value", [1e154, -1e12, math.inf])
def test_a_reading_past_any_pools_scale_is_a_broken_series_read_as_unknown(value):
    assert not Reading(value, 5.0).is_known
    assert Reading(250_000.0, 5.0).is_known  # a large pool's tokens a second still count
