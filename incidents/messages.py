"""What a message says about a proposal or an alert, gathered once for every transport and template."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.urls import reverse

from incidents import rules
from incidents.choices import INCIDENT_TRANSITIONS, AlertState, IncidentState, NotificationKind
from incidents.models import Alert
from scaling import explain
from scaling.choices import ProposalState
from scaling.models import Proposal


def slack_escape(text: str) -> str:
    """Slack's mrkdwn treats &, < and > as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class ProposalFacts:
    id: int
    pool: str
    team: str
    tier: str
    kind: str
    state: str
    state_label: str
    current_replicas: int
    target_replicas: int
    cost_per_hour_usd: float | None
    expires_at: datetime
    reasons: list[str]
    forecast: str
    decided_by: str
    decided_channel: str
    decision_comment: str
    last_error: str
    measured_cold_start_s: float | None
    url: str
    sentence: str = ""  # the card's plain sentence (scaling.explain), said first

    @property
    def pending(self) -> bool:
        return self.state == ProposalState.PENDING


def _forecast(evidence: dict) -> str:
    peak = max(evidence.get("forecast_p90") or evidence.get("forecast_expected") or [0], default=0)
    capacity = (evidence.get("capacity") or [None])[-1]
    if not peak:
        return ""
    line = f"peak {peak:.0f} req/s (upper quantile)"
    if capacity:
        line += f" against {capacity:.0f} req/s of capacity"
    window = evidence.get("window")
    return f"{line} {window}".strip() if window else line


def proposal_facts(proposal: Proposal) -> ProposalFacts:
    """The proposal as it is now; messages always show the current state, never a stale one."""
    pool = proposal.pool
    reasons = [f"{reason.get('code', '')}: {reason.get('detail', '')}".strip(": ") for reason in proposal.reasons or []]
    return ProposalFacts(
        id=proposal.pk, pool=str(pool), team=pool.team.name, tier=pool.priority, kind=proposal.get_kind_display(),
        state=proposal.state, state_label=proposal.get_state_display(),
        current_replicas=proposal.current_replicas, target_replicas=proposal.target_replicas,
        cost_per_hour_usd=proposal.cost_per_hour_usd, expires_at=proposal.expires_at, reasons=reasons,
        forecast=_forecast(proposal.evidence or {}),
        decided_by=proposal.decided_by.get_username() if proposal.decided_by else "",
        decided_channel=proposal.decided_channel, decision_comment=proposal.decision_comment,
        last_error=proposal.last_error, measured_cold_start_s=proposal.measured_cold_start_s,
        url=settings.SITE_URL.rstrip("/") + reverse("approvals") + f"#proposal-{proposal.pk}",
        sentence=explain.sentence(explain.facts_of(proposal)),
    )


INCIDENT_ORDER = list(IncidentState)


@dataclass(frozen=True)
class AlertFacts:
    id: int
    rule: str
    title: str
    tier: str
    state: str
    firing: bool
    pool: str
    cluster: str
    team: str
    summary: str
    numbers: dict
    started_at: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    others_active: list[str]  # the rest of the pool's group, e.g. "P1 queue_growth"
    url: str
    incident_id: int | None = None  # the incident a P0/P1 firing opened or joined
    incident_state: str = ""
    incident_url: str = ""

    @property
    def incident_actions(self) -> list[str]:
        """The moves a firing alert's message offers for its incident, as its state allows them now."""
        if self.incident_id is None or not self.firing:
            return []
        return sorted(INCIDENT_TRANSITIONS.get(self.incident_state, frozenset()), key=INCIDENT_ORDER.index)


def alert_facts(alert: Alert, kind: str = "") -> AlertFacts:
    """The alert as it is now, with the other active alerts of its group (its pool). A message's kind
    says which news it carries: a firing message sent late still says firing."""
    rule = rules.RULES.get(alert.rule)
    incident = alert.incident
    group = Alert.objects.filter(state=AlertState.FIRING, team_id=alert.team_id).exclude(pk=alert.pk)
    group = group.filter(pool_id=alert.pool_id) if alert.pool_id else group.filter(cluster_id=alert.cluster_id, pool=None)
    return AlertFacts(
        id=alert.pk, rule=alert.rule, title=rule.title if rule else alert.rule, tier=alert.tier, state=alert.state,
        firing=kind == NotificationKind.ALERT_FIRING if kind else alert.state == AlertState.FIRING, pool=str(alert.pool) if alert.pool_id else "",
        cluster=alert.cluster.name, team=alert.team.name, summary=alert.summary, numbers=dict(alert.numbers or {}),
        started_at=alert.started_at, fired_at=alert.fired_at, resolved_at=alert.resolved_at,
        others_active=[f"{tier} {key}" for tier, key in group.order_by("tier", "rule").values_list("tier", "rule")],
        url=settings.SITE_URL.rstrip("/") + reverse("incidents:alerts") + f"#alert-{alert.pk}",
        incident_id=incident.pk if incident else None, incident_state=incident.state if incident else "",
        incident_url=settings.SITE_URL.rstrip("/") + reverse("incidents:incident-view", args=[incident.pk]) if incident else "",
    )
