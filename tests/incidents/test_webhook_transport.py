"""Generic webhooks: every transition as JSON, signed with HMAC-SHA256 over timestamp and body."""
from __future__ import annotations

import hashlib
import hmac

from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.models import Pool
from incidents import services
from incidents.choices import ChannelKind, NotificationState
from incidents.models import Channel
from scaling import services as scaling

from tests.incidents.conftest import Receiver, propose

SECRET = "whsec-0123456789abcdef"


def test_each_transition_is_posted_and_signed(pool: Pool, alice: User, bob: User, receiver: Receiver,
                                              allow_loopback: None) -> None:
    Channel.objects.create(team=pool.team, name="pager", kind=ChannelKind.WEBHOOK,
                           settings={"url": receiver.url("/pager"), "secret": SECRET})
    proposal = propose(pool, alice)
    scaling.reject(proposal.pk, core.Actor(bob, "web"), "not tonight")
    services.fan_out()
    deliveries = [services.deliver(pk) for pk in services.due_notifications()]
    assert [delivery.state for delivery in deliveries] == [NotificationState.DELIVERED] * 2
    created, rejected = receiver.at("/pager")
    for request in (created, rejected):
        timestamp = request.headers["X-Headroom-Timestamp"]
        expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + request.body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(request.headers["X-Headroom-Signature"], f"sha256={expected}")
    assert (created.json()["event"], rejected.json()["event"]) == ("proposal.pending", "proposal.rejected")
    body = rejected.json()
    assert body["transition"] | {"at": None} == {"from": "pending", "to": "rejected", "actor": "bob", "channel": "web",
                                                "comment": "not tonight", "at": None}
    assert body["proposal"]["target_replicas"] == 4 and body["proposal"]["pool"] == "gpu-us-east/chat-8b"
    assert "is rejected (bob via web)" in body["summary"]


def test_a_webhook_channel_gets_a_generated_secret_and_the_audit_log_keeps_neither(pool: Pool, bob: User) -> None:
    channel = services.create_channel(pool.team, "pager", ChannelKind.WEBHOOK, {"url": "https://pager.example/hook"},
                                      core.Actor(bob, "web"))
    assert len(channel.settings["secret"]) >= 32
    audit = core.AuditEvent.objects.get(object_type="incidents.channel")
    assert "secret" not in str(audit.after) and "pager.example" not in str(audit.after)
