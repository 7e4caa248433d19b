"""The demo's story (`manage.py demo --scenario story`, what `make demo` plays): the director that says
what happens, phase by phase, and asks for the warm-pool report once the surge has passed.

The traffic is the `story` scenario (sandbox/scenarios.py) and everything it shows is the product's own
work: the loop's pre-scale from yesterday's backfilled history, its reactive scale-ups, the fallback
policy, the alert rules and their incident. The director only watches the database and prints one line
per event, `[story mm:ss] …` (wall time since the traffic started), and at `REPORT_AT_S` requests the
warm-pool report for the surged pool as a person would from its reports page.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox.registration import CLUSTER_NAME
from sandbox.scenarios import (DAILY_FACTOR, STORY_REPORT_AT_S, STORY_SURGE_END_S, STORY_SURGE_START_S,
                               SURGE_FACTOR, story_peak_wall_s)

REPORT_AT_S = STORY_REPORT_AT_S  # model seconds: the fallback has handed back and the pool is calm
REPORT_DAYS = 0.25  # the last 6 hours: today's surge (a day takes minutes to replay on two loaded cores)
REPORT_SIZES_PCT = (0.0, 20.0, 40.0, 60.0)
HISTORY_HOURS = 26.0  # yesterday's peak, and the day before it as quiet
DEFAULT_SPEED = 2.0
WATCH_EVERY_S = 1.0  # wall seconds between looks at the database
PERSON_AFTER_S = 20.0  # wall seconds a scale-up may stay pending before it is told as waiting for a person

if TYPE_CHECKING:
    from controlplane.models import Pool

Say = Callable[[str], None]


@dataclass
class StoryState:
    """What the director has said already (so each event is told once)."""

    prescales: set[int] = field(default_factory=set)
    scale_ups: set[int] = field(default_factory=set)
    fallbacks: set[int] = field(default_factory=set)
    restored: set[int] = field(default_factory=set)
    incidents: set[int] = field(default_factory=set)
    surge_started: bool = False
    surge_ended: bool = False
    report_id: int | None = None
    report_told: bool = False
    peak_told: bool = False


def clock(wall_s: float) -> str:
    minutes, seconds = divmod(int(max(0.0, wall_s)), 60)
    return f"{minutes:02d}:{seconds:02d}"


class Director:
    """Watches the story's pool and says what happens; requests the warm-pool report after the surge."""

    def __init__(self, primary: str, fallback: str, speed: float, say: Say, started: float | None = None) -> None:
        self.primary, self.fallback, self.speed, self.say = primary, fallback, speed, say
        self.started = started if started is not None else time.time()
        self.state = StoryState()

    def wall_s(self) -> float:
        return time.time() - self.started

    def model_s(self) -> float:
        return self.wall_s() * self.speed

    def tell(self, line: str) -> None:
        self.say(f"[story {clock(self.wall_s())}] {line}")

    def run(self, stop: threading.Event) -> None:
        from django.db import close_old_connections

        self.tell(self.opening())
        while not stop.wait(WATCH_EVERY_S):
            try:
                close_old_connections()
                self.step()
            except Exception as error:  # noqa: BLE001 - the story goes on; the next look tries again
                self.tell(f"(could not look: {type(error).__name__}: {error})")
        close_old_connections()

    def opening(self) -> str:
        return (f"quiet start: {self.primary} serves its base load on 1 replica; {self.fallback} (a smaller model) "
                f"waits warm at route weight 0; Prometheus holds yesterday ({HISTORY_HOURS:g} h), with a "
                f"{DAILY_FACTOR:g}x peak at about {clock(story_peak_wall_s(self.speed))} on today's clock")

    def step(self) -> None:
        from controlplane.models import Pool

        pool = Pool.objects.filter(cluster__name=CLUSTER_NAME, name=self.primary).first()
        if pool is None:
            return
        self._proposals(pool)
        self._surge()
        self._fallbacks(pool)
        self._incidents(pool)
        self._report(pool)
        self._peak()

    def _proposals(self, pool: Pool) -> None:
        from scaling.choices import ProposalKind, ProposalState
        from scaling.models import Proposal

        for proposal in Proposal.objects.filter(pool=pool).order_by("pk"):
            if proposal.kind == ProposalKind.PRESCALE and proposal.pk not in self.state.prescales:
                self.state.prescales.add(proposal.pk)
                peak_in = max(0.0, story_peak_wall_s(self.speed) - self.wall_s())
                self.tell(f"forecast peak in {peak_in / 60:.0f} min: pre-scale proposal #{proposal.pk} "
                          f"({proposal.current_replicas} → {proposal.target_replicas}) waits in the inbox "
                          f"(/approvals/): {_reason(proposal, 'PreScaleProposed')}")
            elif (proposal.kind in (ProposalKind.REACTIVE, ProposalKind.PREDICTIVE)
                  and proposal.target_replicas > proposal.current_replicas and proposal.pk not in self.state.scale_ups):
                # Policy approves right after the proposal is stored: told once decided, or once it has waited
                # longer than a tick for a person (a scale-up beyond the guardrail).
                waited_s = time.time() - proposal.created_at.timestamp()
                if proposal.state == ProposalState.PENDING and waited_s < PERSON_AFTER_S:
                    continue
                self.state.scale_ups.add(proposal.pk)
                if proposal.state == ProposalState.PENDING:
                    by = "waits for a person in the inbox"
                elif proposal.decided_by_id is None:
                    by = "approved by policy"
                else:
                    by = f"approved by {proposal.decided_by}"
                self.tell(f"safety net: {proposal.kind} scale-up #{proposal.pk} {proposal.current_replicas} → "
                          f"{proposal.target_replicas} ({by}); the new replicas arrive after their cold start "
                          f"(/pools/{pool.pk}/)")

    def _surge(self) -> None:
        now = self.model_s()
        if not self.state.surge_started and now >= STORY_SURGE_START_S:
            self.state.surge_started = True
            self.tell(f"unforeseen {SURGE_FACTOR:g}x surge on {self.primary}: nothing in yesterday's history "
                      "foretold it, so no pre-scale covers it")
        if not self.state.surge_ended and now >= STORY_SURGE_END_S:
            self.state.surge_ended = True
            self.tell(f"the surge is over: {self.primary} is back to its base load")

    def _fallbacks(self, pool: Pool) -> None:
        from scaling.choices import FallbackPhase
        from scaling.models import FallbackActivation

        for activation in FallbackActivation.objects.filter(pool=pool).order_by("pk"):
            if activation.pk not in self.state.fallbacks and activation.route_percent:
                self.state.fallbacks.add(activation.pk)
                self.tell(f"fallback active: {self.fallback} takes {activation.route_percent} % of the route "
                          f"while {self.primary}'s replicas arrive (activation #{activation.pk})")
            if activation.phase == FallbackPhase.RESTORED and activation.pk not in self.state.restored:
                self.state.restored.add(activation.pk)
                self.tell(f"fallback restored: the whole route is back on {self.primary}")

    def _incidents(self, pool: Pool) -> None:
        from incidents.models import Incident

        for incident in Incident.objects.filter(pool=pool).order_by("pk"):
            if incident.pk not in self.state.incidents:
                self.state.incidents.add(incident.pk)
                self.tell(f"incident #{incident.pk} ({incident.severity}) opened: {incident.title}; its timeline "
                          f"is at /incidents/{incident.pk}/")

    def _report(self, pool: Pool) -> None:
        from controlplane import services as core
        from controlplane.choices import Channel
        from scaling import report_service
        from scaling.choices import ReportState
        from scaling.models import WarmPoolReport

        if self.state.report_id is None and self.model_s() >= REPORT_AT_S:
            # The stored rates are per wall second, `speed` times the model's; the report replays them against the
            # profile's real latency, so it is given the model's rates (rate scale 1/speed).
            report = report_service.request_report(pool, core.Actor(None, Channel.AUTO), days=REPORT_DAYS,
                                                   sizes_pct=REPORT_SIZES_PCT, peak_basis="day-peak",
                                                   rate_scale=1.0 / self.speed)
            self.state.report_id = report.pk
            if not self.state.incidents:
                # The alert rules hold for a scenario minute: when the first tick sees the onset, the fallback and
                # the new replicas can bring TTFT back within their limits before then.
                self.tell(f"the surge passed without an incident: no alert rule on {self.primary} held for its "
                          "scenario minute (the fallback and the new replicas caught it in time)")
            self.tell(f"calm again: warm-pool report #{report.pk} requested for {self.primary} (the last "
                      f"{REPORT_DAYS * 24:g} h replayed at each warm-pool size; /pools/{pool.pk}/reports/)")
        if self.state.report_id is not None and not self.state.report_told:
            report = WarmPoolReport.objects.get(pk=self.state.report_id)
            if report.state == ReportState.SUCCEEDED:
                self.state.report_told = True
                advice = (report.result or {}).get("recommendation") or "no recommendation"
                self.tell(f"warm-pool report #{report.pk} is ready (/reports/{report.pk}/): {advice}")
            elif report.state == ReportState.FAILED:
                self.state.report_told = True
                self.tell(f"warm-pool report #{report.pk} failed: {report.error}")

    def _peak(self) -> None:
        if not self.state.peak_told and self.wall_s() >= story_peak_wall_s(self.speed):
            self.state.peak_told = True
            self.tell(f"the forecast peak arrives ({DAILY_FACTOR:g}x for 30 minutes, as yesterday): the story is "
                      "told; the demo runs on until Ctrl-C")


def _reason(proposal: object, code: str) -> str:
    reasons = getattr(proposal, "reasons", None) or []
    return next((r.get("detail", "") for r in reasons if r.get("code") == code), "")
