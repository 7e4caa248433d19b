"""controlplane.audit_view: human names, links to live objects, one row per decision, the pool's events."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import audit_view, services
from controlplane.choices import Channel
from controlplane.models import AuditEvent, Pool
from scaling.models import Proposal

WEB = services.Actor(user=None, channel=Channel.WEB)
AUTO = services.Actor(user=None, channel=Channel.AUTO)


def proposal_of(pool: Pool) -> Proposal:
    return Proposal.objects.create(pool=pool, kind="reactive", state="executed", current_replicas=2, target_replicas=6,
                                   idempotency_key=f"k-{Proposal.objects.count()}", requested_channel=Channel.AUTO,
                                   expires_at=timezone.now() + timedelta(minutes=30))


def decide(proposal: Proposal, actor: services.Actor, *actions: str) -> None:
    for action in actions:
        services.record(actor, action, proposal, team=proposal.pool.team)


@pytest.mark.parametrize(("label", "name"), [
    ("scaling.proposal", "Proposal"), ("scaling.trafficshift", "Traffic shift"), ("controlplane.slo", "SLO"),
    ("incidents.channel", "Notification channel"), ("auth.user", "User"), ("scaling.coldstart", "Cold start"),
    ("gone.model", "gone.model"), ("not-a-label", "not-a-label"),
])
def test_it_names_object_types_in_words(label: str, name: str) -> None:
    assert audit_view.type_name(label) == name


@pytest.mark.parametrize(("action", "name"), [
    ("issue_token", "Issued API token"), ("propose", "Proposed"), ("approved", "Approved"),
    ("breaker-open", "Breaker open"), ("expire_silence", "Expire silence"),
])
def test_it_names_actions_in_words(action: str, name: str) -> None:
    assert audit_view.action_name(action) == name


def test_the_type_filter_offers_every_project_model_by_name(db) -> None:  # noqa: ANN001
    (_, common), (_, other) = audit_view.object_type_choices()
    assert dict(common)["scaling.proposal"] == "Proposal" and dict(common)["auth.user"] == "User"
    assert dict(other)["scaling.coldstart"] == "Cold start"
    every = dict(common) | dict(other)
    assert "contenttypes.contenttype" not in every and "controlplane.auditevent" not in every


def test_a_decisions_events_fold_into_one_row_between_the_others(pool: Pool) -> None:
    proposal = proposal_of(pool)
    decide(proposal, AUTO, "propose")
    services.record(WEB, "update", pool)
    decide(proposal, WEB, "approved")
    decide(proposal, AUTO, "executing", "scale-intent", "scale-intent", "executed")
    visible = AuditEvent.objects.all()
    rows = audit_view.rows_for(audit_view.row_heads(visible), visible)
    assert [row.kind for row in rows] == ["Proposal", "Pool"]  # the decision's latest step is the newest
    decision = rows[0]
    assert decision.folded and len(decision.events) == 6
    assert decision.steps == ["Proposed", "Approved", "Executing", "About to scale", "Executed"]
    assert decision.actors == ["auto:system", "web:system"] and decision.channels == ["auto", "web"]
    assert decision.url == f"/proposals/{proposal.pk}/card/"
    assert not rows[1].folded and rows[1].url == f"/pools/{pool.pk}/"


def test_a_filtered_decision_still_shows_all_its_steps(pool: Pool) -> None:
    proposal = proposal_of(pool)
    decide(proposal, AUTO, "propose", "approved", "executed")
    visible = AuditEvent.objects.all()
    heads = audit_view.row_heads(visible.filter(action="approved"))
    assert [row.steps for row in audit_view.rows_for(heads, visible)] == [["Proposed", "Approved", "Executed"]]


def test_pages_follow_rows_not_events(pool: Pool) -> None:
    for _ in range(3):
        decide(proposal_of(pool), AUTO, "propose", "approved", "executed")
    services.record(WEB, "update", pool)
    visible = AuditEvent.objects.all()
    first, second, beyond = (audit_view.page_of(visible, visible, number, per_page=2) for number in (1, "2", 3))
    assert [row.kind for row in first.rows] == ["Pool", "Proposal"] and first.has_next and not first.has_previous
    assert [len(row.events) for row in second.rows] == [3, 3] and not second.has_next
    assert beyond.rows == [] and audit_view.page_of(visible, visible, "x", 2).number == 1


def test_a_deleted_object_keeps_its_name_and_has_no_link(bob: User, pool: Pool) -> None:
    slo = pool.slos.get()
    services.delete_with_audit(services.Actor(bob, Channel.WEB), slo)
    services.record(WEB, "update", pool)
    rows = audit_view.build_rows([(event,) for event in AuditEvent.objects.order_by("at", "id")])
    deleted, live = rows
    assert deleted.kind == "SLO" and deleted.url is None and deleted.deleted and deleted.name == str(slo)
    assert live.url == f"/pools/{pool.pk}/" and not live.deleted


def test_it_finds_a_pools_events_live_and_deleted_but_not_another_pools(pool: Pool, search_pool: Pool) -> None:
    mine, theirs = proposal_of(pool), proposal_of(search_pool)
    decide(mine, AUTO, "scale-intent")  # no snapshot: found through the live proposal
    decide(theirs, AUTO, "propose")
    slo = pool.slos.get()
    services.delete_with_audit(WEB, slo)  # deleted: found through the snapshot it kept
    services.record(WEB, "update", pool)
    found = AuditEvent.objects.filter(audit_view.about_pool(pool.pk))
    assert sorted(found.values_list("object_type", flat=True)) == [
        "controlplane.pool", "controlplane.slo", "scaling.proposal"]


def test_the_time_range_must_run_forwards(bob: User) -> None:
    filters = audit_view.AuditEventFilter({"since": "2026-12-01T05:00", "until": "2026-12-01T04:00"},
                                          queryset=AuditEvent.objects.all())
    assert not filters.is_valid() and "until" in filters.errors
