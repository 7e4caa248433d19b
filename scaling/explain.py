"""A proposal in words: one plain sentence first, then who may approve it and why a person is needed.

Pure Python (no Django): the card, the Slack message and the webhook all say the same sentence, and
the wording is tested table-driven. `facts_of()` reads a proposal's attributes; nothing here queries.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from controlplane.config import ApprovalPolicy
from scaling.engine.decide import DEFAULT_TTFT_P95_S

# Values of `scaling.choices.ProposalKind`, repeated so this module stays free of Django.
PRESCALE, REACTIVE, PREDICTIVE, SCHEDULED, WARM_POOL, MANUAL = (
    "prescale", "reactive", "predictive", "scheduled", "warm_pool", "manual")
# The planner sizes every pool for its TTFT p95 SLO, or this default without one (scaling.loop.pool_plan): the
# sentence names that objective, whatever other SLOs the pool has (they drive alerts, not the size).
TTFT_P95 = "ttft_p95"  # `controlplane.choices.SloIndicator.TTFT_P95`, repeated so this module stays free of Django


@dataclass(frozen=True)
class ChangeFacts:
    """What the sentence is made of; None: not known (the sentence then leaves it out, never guesses)."""

    kind: str
    current_replicas: int
    target_replicas: int
    ready_replicas: float | None = None
    queue_depth: float | None = None
    request_rate_rps: float | None = None
    latency_name: str = "TTFT"
    latency_s: float | None = None  # observed, at the SLO's percentile
    slo_s: float | None = None
    slo_is_default: bool = False  # the pool has no TTFT p95 SLO: `slo_s` is the planner's default
    capacity_per_replica_rps: float | None = None  # corrected, as the planner uses it
    forecast_peak_rps: float | None = None
    # The rate a cold start ahead where it grew over the last minute (the rate term's growth), else None.
    rate_ahead_rps: float | None = None
    # The GPU busy share where it set the target (the busy-share term), else None.
    busy_share: float | None = None
    # Their busy replicas (busy share x ready) over the previous minute's mean, where there was one.
    busy_rise: float | None = None
    cost_per_hour_usd: float | None = None


def _known(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.2g} s"  # 1 s, 0.5 s, 2.5 s, 12 s


def _replicas(count: float) -> str:
    return f"{count:.0f} ready replica" + ("" if round(count) == 1 else "s")


def signed_cost(usd_per_hour: float | None) -> str:
    """'+$18/h', '−$4.50/h', or 'cost unknown' (no GPU price for the pool's type)."""
    if usd_per_hour is None:
        return "cost unknown (no GPU price)"
    sign = "+" if usd_per_hour >= 0 else "−"
    amount = abs(usd_per_hour)
    return f"cost {sign}${amount:.0f}/h" if amount >= 10 else f"cost {sign}${amount:.2f}/h"


def _situation(facts: ChangeFacts) -> str:
    ready = facts.ready_replicas
    where = f" on {_replicas(ready)}" if _known(ready) else ""
    if facts.kind == PRESCALE and _known(facts.forecast_peak_rps):
        now = f" (now {facts.request_rate_rps:.1f})" if _known(facts.request_rate_rps) else ""
        return f"A peak of {facts.forecast_peak_rps:.1f} req/s is forecast{now}{where}"
    if _known(facts.busy_share):
        rise = f", {facts.busy_rise:.1f}x their work of the last minute" if _known(facts.busy_rise) else ""
        return f"GPUs are {facts.busy_share:.0%} busy{where}{rise}"
    if _known(facts.queue_depth) and facts.queue_depth >= 1:
        return f"Queue is {facts.queue_depth:.0f} requests{where}"
    if _known(facts.request_rate_rps):
        return f"Traffic is {facts.request_rate_rps:.1f} req/s{where}"
    plural = "" if facts.current_replicas == 1 else "s"
    return f"The pool runs {facts.current_replicas} replica{plural}"


def _demand(facts: ChangeFacts) -> float | None:
    values = [v for v in (facts.request_rate_rps, facts.forecast_peak_rps, facts.rate_ahead_rps) if _known(v)]
    return max(values) if values else None


def _growing(facts: ChangeFacts, demand: float) -> str:
    """': 35 now, grown as over the last minute...' where the demand is the rate a cold start ahead."""
    ahead, now = facts.rate_ahead_rps, facts.request_rate_rps
    if _known(ahead) and _known(now) and ahead == demand and ahead > now:
        return f": {now:.0f} now, grown as over the last minute until new replicas are ready"
    return ""


def _effect(facts: ChangeFacts) -> str:
    up = facts.target_replicas > facts.current_replicas
    verb = f"scaling to {facts.target_replicas}" if up else f"scaling down to {facts.target_replicas}"
    demand = _demand(facts)
    if not (_known(facts.slo_s) and _known(facts.capacity_per_replica_rps) and demand is not None):
        change = facts.target_replicas - facts.current_replicas
        return f"{verb} ({change:+d} replicas)"
    capacity = facts.target_replicas * facts.capacity_per_replica_rps
    objective = f"{facts.latency_name} under {'the default ' if facts.slo_is_default else ''}{_seconds(facts.slo_s)}"
    numbers = f"{capacity:.0f} req/s of capacity for {demand:.0f}{_growing(facts, demand)}"
    if capacity >= demand:
        return f"{verb} keeps {objective} ({numbers})"
    return f"{verb} is not enough to keep {objective} ({numbers})"


def sentence(facts: ChangeFacts) -> str:
    """One plain sentence: what is happening, what the change does to the objective, what it costs.

    "Queue is 180 requests on 4 ready replicas; scaling to 10 keeps TTFT under 1 s (…); cost +$18/h"
    """
    return f"{_situation(facts)}; {_effect(facts)}; {signed_cost(facts.cost_per_hour_usd)}."


def why_a_person(*, kind: str, delta: int, by_the_planner: bool, policy: ApprovalPolicy, team: str,
                 requested_by: str = "", current: int = 0) -> str:
    """Who may approve and why policy did not: shown on a pending card."""
    who = f"Operators and admins of team {team} may approve"
    if not by_the_planner:
        because = f"{requested_by or 'a person'} asked for it: policy approves only the planner's own changes"
    elif kind == PRESCALE:
        because = "a pre-scale for a forecast peak is decided by a person (or the off-hours window)"
    elif kind in (REACTIVE, PREDICTIVE) and delta > 0:
        enabled = policy.auto_approve_reactive if kind == REACTIVE else policy.auto_approve_predictive
        because = (f"it adds {delta} replicas, more than the guardrail of {policy.guardrail(current)} approved by policy"
                   if enabled else f"this pool's policy approves no {kind} scale-up automatically")
    elif delta < 0:
        because = ("this pool's policy approves no scale-down automatically" if not policy.auto_approve_scale_down
                   else "the scale-down has not yet held through the stabilization window, or it would go under "
                        "the warm floor")
    else:
        because = f"policy approves no {kind.replace('_', ' ')} change automatically"
    second = ""
    if requested_by and policy.two_person_min_delta is not None and abs(delta) >= policy.two_person_min_delta:
        second = (f"; a change of {policy.two_person_min_delta} or more replicas needs someone other than "
                  f"{requested_by}")
    return f"{who}: {because}{second}."


def facts_of(proposal: Any) -> ChangeFacts:
    """A proposal's facts from its stored signals and evidence (what the planner saw when it proposed)."""
    signals = proposal.signals or {}
    evidence = proposal.evidence or {}
    slo = next((s for s in proposal.pool.slos.all() if s.indicator == TTFT_P95), None)
    forecast = [v for v in (evidence.get("forecast_p90") or []) if _known(v)]
    return ChangeFacts(
        kind=proposal.kind, current_replicas=proposal.current_replicas, target_replicas=proposal.target_replicas,
        ready_replicas=signals.get("ready_replicas"), queue_depth=signals.get("queue_depth"),
        request_rate_rps=signals.get("request_rate_rps"), latency_name="TTFT", latency_s=signals.get("ttft_p95_s"),
        slo_s=slo.threshold / 1000.0 if slo else DEFAULT_TTFT_P95_S, slo_is_default=slo is None,
        capacity_per_replica_rps=evidence.get("capacity_per_replica_rps"),
        forecast_peak_rps=max(forecast) if forecast else None, rate_ahead_rps=evidence.get("rate_ahead_rps"),
        busy_share=evidence.get("busy_share"), busy_rise=evidence.get("busy_rise"), cost_per_hour_usd=proposal.cost_per_hour_usd,
    )


def why_for(proposal: Any) -> str:
    """`why_a_person` for a proposal (its pool's policy and team, who asked)."""
    requester = proposal.requested_by.get_username() if proposal.requested_by else ""
    return why_a_person(kind=proposal.kind, delta=proposal.target_replicas - proposal.current_replicas,
                        by_the_planner=proposal.requested_by_id is None, policy=proposal.pool.approval,
                        team=proposal.pool.team.name, requested_by=requester, current=proposal.current_replicas)
