"""Generic webhooks: every proposal transition, and alerts firing and resolving, as signed JSON
(PagerDuty-style or custom receivers).

The receiver checks `X-Headroom-Signature: sha256=<hex>`, an HMAC-SHA256 with the channel's secret
over `{X-Headroom-Timestamp}.{raw body}`, and may refuse old timestamps to stop replays.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import time
from typing import Any

from incidents.choices import NotificationKind
from incidents.messages import alert_facts, proposal_facts
from incidents.models import Notification
from incidents.specs import WebhookSpec
from incidents.transports.base import NothingToSend, Transport, render

SIGNATURE_HEADER = "X-Headroom-Signature"
TIMESTAMP_HEADER = "X-Headroom-Timestamp"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class WebhookTransport(Transport):
    spec_class = WebhookSpec

    def event_name(self, notification: Notification) -> str:
        if notification.alert is not None:
            return "alert.resolved" if notification.kind == NotificationKind.ALERT_RESOLVED else "alert.firing"
        if notification.kind == NotificationKind.MESSAGE:
            return "playbook.message"
        return f"proposal.{notification.event.to_state}"  # type: ignore[union-attr]

    def alert_payload(self, notification: Notification) -> dict[str, Any]:
        facts = alert_facts(notification.alert, notification.kind)  # type: ignore[arg-type]
        times = {name: value.isoformat() if value else None
                 for name, value in (("started_at", facts.started_at), ("fired_at", facts.fired_at),
                                     ("resolved_at", facts.resolved_at))}
        return {
            "event": self.event_name(notification),
            "delivery": notification.pk,
            "alert": dataclasses.asdict(facts) | times | {"fingerprint": notification.alert.fingerprint},  # type: ignore[union-attr]
            "summary": render("webhook/alert_summary.txt", facts=facts),
        }

    def payload(self, notification: Notification) -> dict[str, Any]:
        if notification.alert is not None:
            return self.alert_payload(notification)
        if notification.kind == NotificationKind.MESSAGE:
            return {"event": "playbook.message", "delivery": notification.pk, "summary": notification.text}
        event = notification.event
        if event is None or notification.proposal is None:
            raise NothingToSend("webhooks carry proposal transitions only")
        facts = proposal_facts(notification.proposal)
        return {
            "event": f"proposal.{event.to_state}",
            "delivery": notification.pk,
            "transition": {
                "from": event.from_state or None, "to": event.to_state, "actor": event.actor_name,
                "channel": event.channel, "comment": event.comment, "at": event.at.isoformat(),
            },
            "proposal": dataclasses.asdict(facts) | {"expires_at": facts.expires_at.isoformat()},
            "summary": render("webhook/summary.txt", facts=facts, event=event),
        }

    def notify(self, notification: Notification) -> None:
        spec = self.spec
        assert isinstance(spec, WebhookSpec)
        body = json.dumps(self.payload(notification), sort_keys=True).encode()
        timestamp = str(int(time.time()))
        headers = {
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: signature(spec.secret, timestamp, body),
            "X-Headroom-Event": self.event_name(notification),
        }
        self.post_json(spec.url, {}, headers, body=body)
