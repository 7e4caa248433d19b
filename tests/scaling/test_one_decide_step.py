"""The live loop and the replay decide alike: one decide step, the same inputs (issue 12 item 8)."""
from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta, timezone

import pytest

from controlplane.models import Pool
from scaling import loop
from scaling.engine import planner
from scaling.engine.planner import PlannerState
from scaling.engine.signals import Reading
from scaling.models import PlannerMemory, Proposal
from scaling.sim.policies.base import Observation
from scaling.sim.policies.headroom import HeadroomPolicy, signals_of

START = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
TICK_S = 15.0
BURST = 1.8  # one tick's rate over the ramp's: the busy replicas' onset


def _rate(tick: int) -> float:
    """Ten quiet minutes, a ramp to 6x with a burst on it, a plateau with queues, then the fall."""
    if tick < 40:
        return 5.0 + (tick % 4)
    if tick < 80:
        return (5.0 + 25.0 * (tick - 40) / 40) * (BURST if tick == 60 else 1.0)
    return 30.0 if tick < 110 else 8.0


def _observation(tick: int, desired: int) -> Observation:
    rate = _rate(tick)
    queue = max(0.0, rate - 5.0 * desired) * 4  # a queue once the rate passes what the replicas serve
    ttft = 0.3 + 0.02 * rate / max(desired, 1)
    return Observation(now=START.timestamp() + tick * TICK_S, ready_replicas=desired, starting_replicas=0,
                       desired_replicas=desired, queue_depth=queue, running=min(rate, 5.0 * desired) * 2,
                       utilisation=min(1.0, rate / (5.0 * desired)), arrival_rate_rps=rate,
                       ttft_p95_s=ttft, ttft_p99_s=ttft * 1.5)


def _accepted(pool: Pool, at: datetime, change: int) -> None:
    """What `services` records when the cluster accepts a change (the replay records it at once)."""
    memory = PlannerMemory.objects.get(pool=pool)
    memory.state = planner.record_scale_event(PlannerState.from_dict(memory.state), at.timestamp(), change).to_dict()
    memory.save()


@pytest.mark.parametrize("constants", [{}, {"busy_share_target": 0}], ids=["defaults (busy share on)", "busy share off"])
def test_the_loop_and_the_replay_make_the_same_decision_tick_by_tick(pool: Pool, constants: dict) -> None:
    Pool.objects.filter(pk=pool.pk).update(replica_capacity_rps=5.0, min_replicas=1, max_replicas=30,
                                           planner_constants=constants)
    pool = Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules").get(pk=pool.pk)
    # The replay's people never answer, as nobody approves the loop's pending proposals here.
    replay = HeadroomPolicy(loop.pool_plan(pool), approval_delay_s=math.inf, tick_s=TICK_S)
    state = replay.new_state()
    state.keep_decisions = True
    desired, compared = 2, []
    for tick in range(130):
        observation = _observation(tick, desired)
        now = START + timedelta(seconds=tick * TICK_S)
        # The loop reads Prometheus's rate(...[1m]): the mean of the last four 15-s ticks' rates.
        read = sum(_rate(earlier) for earlier in range(max(0, tick - 3), tick + 1)) / (min(tick, 3) + 1)
        live = loop.tick_pool(pool, dataclasses.replace(signals_of(observation), request_rate_rps=Reading(read, 0.0)),
                              now).decided
        applied = replay.decide(observation.now, observation, state)
        replayed = state.decisions[-1]
        compared.append((live["target_replicas"], replayed.target_replicas))
        assert (live["target_replicas"], live["binding"]) == (replayed.target_replicas, replayed.binding), tick
        assert live["reasons"] == list(replayed.reasons), tick
        _accepted(pool, now, applied - desired)  # both clusters run what the replay's approvals let through
        desired = applied
    targets = {live for live, _ in compared}
    assert len(targets) >= 3, f"the sequence should move the target: {sorted(targets)}"
    # The busy share term reads the same work share in both, and sets the target at the burst's onset (the
    # loop keeps the minute of busy replicas it compares with in its stored state, as the replay in memory).
    busy_on = not constants
    busy_ticks = [tick for tick, d in enumerate(state.decisions) if d.reasons[0] == planner.REACTIVE_BUSY]
    assert busy_ticks == ([60] if busy_on else []), busy_ticks
    # ...and the proposal it made says so (the card's sentence reads the busy share from its evidence).
    assert Proposal.objects.filter(pool=pool, evidence__has_key="busy_share").exists() == busy_on
    assert Proposal.objects.filter(pool=pool, evidence__has_key="busy_rise").exists() == busy_on
