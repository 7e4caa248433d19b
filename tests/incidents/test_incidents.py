"""Incidents on the database: P0/P1 alerts open or join the pool's incident, resolving alerts suggest
closing it, people move it open → acknowledged → mitigated → resolved, once, whoever races."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel, Role
from controlplane.models import AuditEvent, Membership, Pool
from incidents import incidents
from incidents.choices import AlertState, IncidentEventKind, IncidentState
from incidents.models import Alert, Incident, Silence

from tests.concurrency import race
from tests.incidents.test_alerts import T0, evaluate


def web(user: User) -> core.Actor:
    return core.Actor(user=user, channel=ActorChannel.WEB)


def fire_ttft_p95(pool: Pool, start=T0) -> Alert:  # noqa: ANN001
    """A P1 alert: TTFT p95 over 1 s for longer than its 2-minute `for`."""
    for minute in range(4):
        evaluate(pool, start + timedelta(minutes=minute), ttft_p95_s=1.6)
    alert = Alert.objects.filter(pool=pool, rule="ttft_p95").latest("started_at")
    assert alert.state == AlertState.FIRING
    return alert


@pytest.fixture
def dave(ml_team) -> User:  # noqa: ANN001
    """A viewer of ML Platform: reads incidents, changes none."""
    user = User.objects.create_user(username="dave", password="pw-dave")
    Membership.objects.create(user=user, team=ml_team, role=Role.VIEWER)
    return user


def test_a_firing_p1_alert_opens_one_incident_for_its_pool(pool: Pool) -> None:
    alert = fire_ttft_p95(pool)
    incident = Incident.objects.get()
    assert (incident.pool, incident.severity, incident.state, incident.commander) == (pool, "P1", IncidentState.OPEN, None)
    assert incident.opened_at == alert.fired_at
    assert alert.incident == incident
    assert list(incident.events.values_list("kind", "alert_id")) == [(IncidentEventKind.OPENED, alert.pk)]
    evaluate(pool, T0 + timedelta(minutes=5), ttft_p95_s=1.7)  # keeps firing: nothing new
    assert Incident.objects.count() == 1 and incident.events.count() == 1
    assert AuditEvent.objects.filter(action="open_incident", object_id=str(incident.pk)).count() == 1


def test_a_pending_alert_opens_nothing(pool: Pool) -> None:
    evaluate(pool, T0, ttft_p95_s=1.6)
    assert Alert.objects.get().state == AlertState.PENDING
    assert not Incident.objects.exists()


def test_a_p0_alert_joins_the_open_incident_and_raises_its_severity(pool: Pool) -> None:
    fire_ttft_p95(pool)
    later = T0 + timedelta(minutes=4)
    evaluate(pool, later, ttft_p95_s=1.6, ttft_p99_s=6.0)
    evaluate(pool, later + timedelta(minutes=1, seconds=5), ttft_p95_s=1.6, ttft_p99_s=6.0)
    p99 = Alert.objects.get(pool=pool, rule="ttft_p99")
    assert p99.state == AlertState.FIRING
    incident = Incident.objects.get()
    assert p99.incident == incident and incident.severity == "P0"
    assert list(incident.events.values_list("kind", flat=True)) == [
        IncidentEventKind.OPENED, IncidentEventKind.ALERT_JOINED, IncidentEventKind.SEVERITY]


def test_resolving_every_alert_suggests_resolving_and_a_new_firing_withdraws_it(pool: Pool) -> None:
    fire_ttft_p95(pool)
    evaluate(pool, T0 + timedelta(minutes=5), ttft_p95_s=0.4)
    assert Incident.objects.get().resolve_suggested_at is None  # its alert is in its 2-minute resolve hold
    evaluate(pool, T0 + timedelta(minutes=7), ttft_p95_s=0.4)
    incident = Incident.objects.get()
    assert incident.state == IncidentState.OPEN  # a person says when it is over
    assert incident.resolve_suggested_at == T0 + timedelta(minutes=7)
    assert incident.events.filter(kind=IncidentEventKind.RESOLVE_SUGGESTED).count() == 1
    fire_ttft_p95(pool, T0 + timedelta(minutes=8))
    incident.refresh_from_db()
    assert incident.resolve_suggested_at is None
    assert Alert.objects.filter(incident=incident).count() == 2


def test_after_resolving_a_new_firing_opens_a_new_incident(pool: Pool, alice: User) -> None:
    fire_ttft_p95(pool)
    first = Incident.objects.get()
    incidents.resolve(first.pk, web(alice), "capacity arrived")
    evaluate(pool, T0 + timedelta(minutes=5), ttft_p95_s=0.4)
    evaluate(pool, T0 + timedelta(minutes=7), ttft_p95_s=0.4)  # the alert resolves after its 2-minute hold
    fire_ttft_p95(pool, T0 + timedelta(minutes=8))
    assert Incident.objects.count() == 2
    assert Incident.objects.exclude(pk=first.pk).get().state == IncidentState.OPEN


def test_a_silenced_alert_opens_nothing(pool: Pool, alice: User) -> None:
    Silence.objects.create(team=pool.team, matchers=[{"label": "pool", "value": str(pool.pk)}],
                           starts_at=T0 - timedelta(hours=1), ends_at=T0 + timedelta(hours=1))
    fire_ttft_p95(pool)
    assert not Incident.objects.exists()


def test_the_heartbeat_opens_a_system_incident_for_the_cluster(pool: Pool) -> None:
    from incidents import alerts

    evaluate(pool, T0)
    alerts.evaluate_heartbeats(T0 + timedelta(minutes=2))
    incident = Incident.objects.get()
    assert (incident.pool, incident.cluster, incident.severity) == (None, pool.cluster, "P0")
    assert incident.scope == "gpu-us-east (control loop)"


def test_it_moves_open_acknowledged_mitigated_resolved_with_events_and_audit(pool: Pool, alice: User, bob: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    done = incidents.acknowledge(incident.pk, web(alice), "looking")
    assert done.changed and (done.incident.state, done.incident.commander) == (IncidentState.ACKNOWLEDGED, alice)
    incidents.mitigate(incident.pk, web(bob), "scale-up ready")
    incidents.resolve(incident.pk, web(bob))
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED and incident.commander == alice  # the first to take it leads
    assert incident.acknowledged_at and incident.mitigated_at and incident.resolved_at
    moves = list(incident.events.exclude(kind__in=["opened"]).values_list("kind", "from_state", "to_state", "actor_name",
                                                                          "channel", "text"))
    assert moves == [("acknowledged", "open", "acknowledged", "alice", "web", "looking"),
                     ("mitigated", "acknowledged", "mitigated", "bob", "web", "scale-up ready"),
                     ("resolved", "mitigated", "resolved", "bob", "web", "")]
    assert list(AuditEvent.objects.filter(object_type="incidents.incident", actor__isnull=False).order_by("id")
                .values_list("action", flat=True)) == ["acknowledged", "mitigated", "resolved"]


def test_illegal_moves_are_conflicts_that_change_nothing(pool: Pool, alice: User, bob: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    incidents.resolve(incident.pk, web(alice))
    for move in (incidents.acknowledge, incidents.mitigate, incidents.resolve):
        with pytest.raises(incidents.IncidentConflict, match="is resolved"):
            move(incident.pk, web(bob))
    assert incident.events.count() == 2


def test_the_same_person_acknowledging_twice_is_a_no_op_and_someone_else_is_told_who(pool: Pool, alice: User,
                                                                                       bob: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    incidents.acknowledge(incident.pk, web(alice))
    again = incidents.acknowledge(incident.pk, web(alice))
    assert not again.changed and again.incident.state == IncidentState.ACKNOWLEDGED
    with pytest.raises(incidents.IncidentConflict, match="acknowledged by alice"):
        incidents.acknowledge(incident.pk, web(bob))
    assert incident.events.filter(kind=IncidentEventKind.ACKNOWLEDGED).count() == 1


def test_viewers_and_outsiders_may_not_act(pool: Pool, dave: User, charlie: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    for user in (dave, charlie):
        with pytest.raises(core.AccessDenied):
            incidents.acknowledge(incident.pk, web(user))
        with pytest.raises(core.AccessDenied):
            incidents.add_note(incident.pk, web(user), "hello")
    incident.refresh_from_db()
    assert incident.state == IncidentState.OPEN and incident.events.count() == 1


def test_notes_need_text_and_are_kept_after_resolving(pool: Pool, alice: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    with pytest.raises(incidents.InvalidIncidentInput) as error:
        incidents.add_note(incident.pk, web(alice), "   ")
    assert error.value.payload() == {"text": ["A note needs some text."]}
    with pytest.raises(incidents.InvalidIncidentInput, match="At most 4000"):
        incidents.add_note(incident.pk, web(alice), "x" * 4001)
    incidents.resolve(incident.pk, web(alice))
    note = incidents.add_note(incident.pk, web(alice), "raise the warm pool to 3", follow_up=True)
    assert (note.kind, note.data, note.to_state) == (IncidentEventKind.NOTE, {"follow_up": True}, IncidentState.RESOLVED)


@pytest.mark.django_db(transaction=True)
def test_two_workers_acknowledging_at_once_make_one_acknowledgement(pool: Pool, alice: User, bob: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    actors = iter([web(alice), web(bob)] * 3)
    results = race(lambda: incidents.acknowledge(incident.pk, next(actors)), threads=6)
    changed = [r for r in results if isinstance(r, incidents.Transition) and r.changed]
    assert len(changed) == 1
    others = [r for r in results if r not in changed]
    # The winner's own repeats are no-ops; the other person is told who has it.
    assert all((isinstance(r, incidents.Transition) and not r.changed) or isinstance(r, incidents.IncidentConflict)
               for r in others)
    assert incident.events.filter(kind=IncidentEventKind.ACKNOWLEDGED).count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_evaluators_racing_open_one_incident(pool: Pool) -> None:
    """Two P1 rules firing on the same tick from two workers: one incident, both alerts in it."""
    from incidents import alerts
    from tests.incidents.test_alerts import tick

    for minute in range(3):
        tick(pool, T0 + timedelta(minutes=minute), ttft_p95_s=1.6)
        alerts.evaluate_alerts([pool], T0 + timedelta(minutes=minute))
    at = T0 + timedelta(minutes=3)
    tick(pool, at, ttft_p95_s=1.6)
    race(lambda: alerts.evaluate_alerts([Pool.objects.select_related("cluster", "team").get(pk=pool.pk)], at), threads=4)
    assert Incident.objects.count() == 1
    assert Alert.objects.filter(rule="ttft_p95", state=AlertState.FIRING, incident__isnull=False).count() == 1
