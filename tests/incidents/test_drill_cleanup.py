"""A drill's cluster and pool writes are audited, and a drill that is over leaves nothing the control loop
ticks: played to its end, interrupted (Ctrl-C) or failed before its incident opened."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import AuditEvent, Pool, Team
from incidents import drills, playbooks
from incidents.models import Drill
from scaling import loop


@pytest.fixture
def surge_playbook(ml_team: Team):  # noqa: ANN201, F811
    return playbooks.seed_surge_playbook(ml_team, core.Actor(None, ActorChannel.CLI))


def drill(*args: str) -> None:
    try:
        call_command("drill", "ml-platform/surge", "--scenario", "surge-10x", "--speed", "100", *args,
                     stdout=StringIO(), stderr=StringIO())
    except KeyboardInterrupt:  # pytest would take it for the session's own Ctrl-C
        pytest.fail("Ctrl-C left the drill command as a KeyboardInterrupt, not its one-line exit")


def interrupt_once_the_incident_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    real_execute = drills._execute

    def execute_then_ctrl_c(pool: Pool, driver: object) -> None:
        real_execute(pool, driver)
        if Drill.objects.exists():
            raise KeyboardInterrupt

    monkeypatch.setattr(drills, "_execute", execute_then_ctrl_c)


def test_it_audits_the_drills_cluster_and_pool(surge_playbook, alice, monkeypatch) -> None:  # noqa: ANN001
    interrupt_once_the_incident_opened(monkeypatch)
    with pytest.raises(CommandError):
        drill()
    pool = Pool.objects.get(cluster__name="drill-ml-platform")
    created = AuditEvent.objects.filter(action="create", channel="cli")
    assert created.filter(object_type="controlplane.cluster", object_id=str(pool.cluster_id)).exists()
    assert created.filter(object_type="controlplane.pool", object_id=str(pool.pk)).exists()
    with pytest.raises(CommandError):
        drill()  # a second drill points the team's drill cluster at its own emulator: an update, audited
    assert AuditEvent.objects.filter(action="update", object_type="controlplane.cluster",
                                     object_id=str(pool.cluster_id)).exists()


def test_an_interrupted_drill_resolves_its_incident_and_exits_130(surge_playbook, alice, monkeypatch) -> None:  # noqa: ANN001
    interrupt_once_the_incident_opened(monkeypatch)
    with pytest.raises(CommandError, match="drill interrupted") as caught:
        drill("--auto-respond", "alice")
    assert caught.value.returncode == 130
    record = Drill.objects.get()
    assert record.finished_at is not None and record.ticks
    assert record.incident.state == "resolved"
    assert record.incident.events.filter(text="drill interrupted").exists()


def test_the_loop_leaves_a_finished_drills_pool_out(surge_playbook, alice, settings, monkeypatch) -> None:  # noqa: ANN001
    settings.KUBERNETES_ENABLED = True
    interrupt_once_the_incident_opened(monkeypatch)
    with pytest.raises(CommandError):
        drill()
    assert Drill.objects.get().finished_at is not None
    # Its emulator is gone: before, every tick logged `drill-ml-platform: … connection refused` for good.
    report = loop.tick()
    assert not any("drill-ml-platform" in where for where in report.errors) and not report.pools
    call_command("tick", stdout=StringIO(), stderr=StringIO())  # the command ticks what the loop ticks


def test_a_drill_that_fails_before_its_incident_deletes_its_pool(surge_playbook, alice, monkeypatch) -> None:  # noqa: ANN001
    def deployment_never_ready(*args: object) -> None:
        raise drills.DrillError("the sandbox's Deployment did not report 1 Ready within 10 s")

    monkeypatch.setattr(drills, "_wait_for_the_deployment", deployment_never_ready)
    with pytest.raises(CommandError, match="did not report"):
        drill()
    assert not Pool.objects.filter(cluster__name="drill-ml-platform").exists()
    assert AuditEvent.objects.filter(action="delete", object_type="controlplane.pool").exists()
