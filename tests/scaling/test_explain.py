"""A proposal in one plain sentence, and who may approve it and why a person is needed (pure, table-driven)."""
from __future__ import annotations

import pytest

from controlplane.config import ApprovalPolicy
from scaling import explain
from scaling.explain import ChangeFacts


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (ChangeFacts("reactive", 4, 10, ready_replicas=4, queue_depth=180, request_rate_rps=38.0, slo_s=1.0,
                     capacity_per_replica_rps=5.0, cost_per_hour_usd=18.0),
         "Queue is 180 requests on 4 ready replicas; scaling to 10 keeps TTFT under 1 s (50 req/s of capacity "
         "for 38); cost +$18/h."),
        (ChangeFacts("reactive", 4, 6, ready_replicas=4, queue_depth=90, request_rate_rps=50.0, slo_s=0.5,
                     capacity_per_replica_rps=5.0, cost_per_hour_usd=6.0),
         "Queue is 90 requests on 4 ready replicas; scaling to 6 is not enough to keep TTFT under 0.5 s (30 req/s "
         "of capacity for 50); cost +$6.00/h."),
        (ChangeFacts("reactive", 6, 4, ready_replicas=6, queue_depth=0, request_rate_rps=8.0, slo_s=1.0,
                     capacity_per_replica_rps=5.0, cost_per_hour_usd=-8.0),
         "Traffic is 8.0 req/s on 6 ready replicas; scaling down to 4 keeps TTFT under 1 s (20 req/s of capacity "
         "for 8); cost −$8.00/h."),
        (ChangeFacts("prescale", 2, 8, ready_replicas=1, request_rate_rps=3.0, forecast_peak_rps=30.0,
                     latency_name="end-to-end p95", slo_s=2.0, capacity_per_replica_rps=4.0, cost_per_hour_usd=24.0),
         "A peak of 30.0 req/s is forecast (now 3.0) on 1 ready replica; scaling to 8 keeps end-to-end p95 under "
         "2 s (32 req/s of capacity for 30); cost +$24/h."),
        # The rate term planned for the rate's growth over a cold start: the sentence says so.
        (ChangeFacts("reactive", 10, 15, ready_replicas=2, queue_depth=40, request_rate_rps=35.0, slo_s=1.0,
                     capacity_per_replica_rps=4.25, rate_ahead_rps=61.25),
         "Queue is 40 requests on 2 ready replicas; scaling to 15 keeps TTFT under 1 s (64 req/s of capacity for 61: "
         "35 now, grown as over the last minute until new replicas are ready); cost unknown (no GPU price)."),
        # The busy-share term set the target: the sentence says what it read, not only the rate.
        (ChangeFacts("reactive", 4, 8, ready_replicas=4, queue_depth=3, request_rate_rps=20.0, slo_s=1.0,
                     capacity_per_replica_rps=4.25, busy_share=0.9, cost_per_hour_usd=16.0),
         "GPUs are 90% busy on 4 ready replicas; scaling to 8 keeps TTFT under 1 s (34 req/s of capacity for 20); "
         "cost +$16/h."),
        # ...at an onset: how much the work rose over the last minute, the reason it acted now.
        (ChangeFacts("reactive", 4, 8, ready_replicas=4, request_rate_rps=20.0, slo_s=1.0,
                     capacity_per_replica_rps=4.25, busy_share=0.9, busy_rise=3.0, cost_per_hour_usd=16.0),
         "GPUs are 90% busy on 4 ready replicas, 3.0x their work of the last minute; scaling to 8 keeps TTFT under "
         "1 s (34 req/s of capacity for 20); cost +$16/h."),
        (ChangeFacts("manual", 1, 3),  # nothing known: says only what is certain
         "The pool runs 1 replica; scaling to 3 (+2 replicas); cost unknown (no GPU price)."),
    ],
)
def test_it_says_the_change_in_one_sentence(facts: ChangeFacts, expected: str) -> None:
    assert explain.sentence(facts) == expected


def test_unknown_numbers_are_left_out_never_guessed() -> None:
    nan = float("nan")
    facts = ChangeFacts("reactive", 2, 4, ready_replicas=None, queue_depth=nan, request_rate_rps=None, slo_s=1.0,
                        capacity_per_replica_rps=5.0, cost_per_hour_usd=4.0)
    assert explain.sentence(facts) == "The pool runs 2 replicas; scaling to 4 (+2 replicas); cost +$4.00/h."


@pytest.mark.parametrize(
    ("kwargs", "policy", "expected"),
    [
        ({"kind": "reactive", "delta": 7, "by_the_planner": True}, ApprovalPolicy(),
         "it adds 7 replicas, more than the guardrail of 4 approved by policy"),
        ({"kind": "predictive", "delta": 2, "by_the_planner": True}, ApprovalPolicy(auto_approve_predictive=False),
         "this pool's policy approves no predictive scale-up automatically"),
        ({"kind": "prescale", "delta": 6, "by_the_planner": True}, ApprovalPolicy(),
         "a pre-scale for a forecast peak is decided by a person"),
        ({"kind": "reactive", "delta": -2, "by_the_planner": True}, ApprovalPolicy(),
         "has not yet held through the stabilization window"),
        ({"kind": "reactive", "delta": -2, "by_the_planner": True}, ApprovalPolicy(auto_approve_scale_down=False),
         "approves no scale-down automatically"),
        ({"kind": "manual", "delta": 8, "by_the_planner": False, "requested_by": "alice"},
         ApprovalPolicy(two_person_min_delta=6),
         "alice asked for it: policy approves only the planner's own changes; a change of 6 or more replicas needs "
         "someone other than alice"),
    ],
)
def test_it_says_who_may_approve_and_why_a_person_is_needed(kwargs: dict, policy: ApprovalPolicy,
                                                            expected: str) -> None:
    said = explain.why_a_person(policy=policy, team="ML", **kwargs)
    assert said.startswith("Operators and admins of team ML may approve: ") and expected in said
