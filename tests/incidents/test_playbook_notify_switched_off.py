"""A `notify` step aimed at a channel that switched itself off (its address answered 404, say) said
"message queued for on-call" while the outbox never sends to a disabled channel: the on-call believes the
stakeholders were told. docs/incidents.md: a notify step whose message the outbox would not send fails with
that reason rather than reporting it queued."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool, Team
from incidents import playbooks, services
from incidents.choices import ChannelKind, NotificationState
from incidents.models import Channel, Incident, Notification

from tests.incidents.test_incidents import fire_ttft_p95

pytestmark = pytest.mark.django_db


def test_a_notify_step_to_a_switched_off_channel_fails_with_the_reason(pool: Pool, ml_team: Team, alice: User) -> None:
    fire_ttft_p95(pool)
    incident = Incident.objects.get()
    channel = Channel.objects.create(team=ml_team, name="stakeholders", kind=ChannelKind.WEBHOOK,
                                     settings={"url": "https://hooks.example/x", "secret": "s" * 32})
    playbook = playbooks.save(core.Actor(alice, ActorChannel.API), ml_team, "tell", steps=[
        playbooks.StepSpec("Tell the stakeholders", "notify", {"channel": "stakeholders", "text": "surge"})])
    services.disable_channel(channel, "404 from https://hooks.example")
    run = playbooks.start_run(incident, playbook, core.Actor(alice, ActorChannel.WEB))
    step = playbooks.run_step(run.pk, 1, core.Actor(alice, ActorChannel.WEB))
    assert step.state == "failed", step.reason
    assert "stakeholders" in step.reason and "404" in step.reason
    # Nothing waits in the outbox to surprise anyone once the channel is switched back on hours later.
    assert not Notification.objects.filter(kind="message", state=NotificationState.PENDING).exists()
