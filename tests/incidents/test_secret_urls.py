"""A webhook's path and query are its secret: errors, disable reasons, the audit log, the API, the
channels page and the logs name its scheme and host only (issue 18, finding 1)."""
from __future__ import annotations

import logging
import socket

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from controlplane.choices import Role
from controlplane.models import AuditEvent, Membership, Pool
from incidents import services
from incidents.choices import ChannelKind, NotificationState
from incidents.models import Channel, Notification

from tests.incidents.conftest import Receiver, propose

PATH_SECRET = "T0PATHSECRET/B0PATHSECRET/xoxPATHSECRET"
QUERY_SECRET = "sig=QUERYSECRET"
SECRETS = ("PATHSECRET", "QUERYSECRET", "whsec-0123456789abcdef")


@pytest.fixture
def viewer(pool: Pool) -> User:
    user = User.objects.create_user(username="vera", password="pw-vera")
    Membership.objects.create(user=user, team=pool.team, role=Role.VIEWER)
    return user


def _webhook(pool: Pool, url: str) -> Channel:
    return Channel.objects.create(team=pool.team, name="pager", kind=ChannelKind.WEBHOOK,
                                  settings={"url": url, "secret": "whsec-0123456789abcdef"})


def _deliver(pool: Pool, alice: User) -> list[services.Delivery | None]:
    propose(pool, alice)
    services.fan_out()
    return [services.deliver(pk) for pk in services.due_notifications()]


def _everything_a_viewer_or_auditor_sees(viewer: User, channel: Channel) -> str:
    api = APIClient()
    api.force_authenticate(viewer)
    page = APIClient()
    page.force_login(viewer)
    channel.refresh_from_db()
    return "\n".join([
        channel.last_error, channel.disabled_reason,
        *Notification.objects.values_list("last_error", flat=True),
        *(str(event.after) + str(event.before) for event in AuditEvent.objects.all()),
        api.get("/api/v1/channels/").content.decode(), api.get("/api/v1/notifications/").content.decode(),
        page.get("/integrations/channels/").content.decode(),
    ])


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_it_names_only_scheme_and_host_when_the_receiver_refuses(pool: Pool, alice: User, viewer: User,
                                                                 receiver: Receiver, allow_loopback: None, caplog) -> None:  # noqa: ANN001
    caplog.set_level(logging.DEBUG)
    path = f"/{PATH_SECRET}"
    receiver.answers[f"{path}?{QUERY_SECRET}"] = (404, f"no route for POST {path}?{QUERY_SECRET}".encode(), {})
    channel = _webhook(pool, receiver.url(f"{path}?{QUERY_SECRET}"))
    [delivery] = _deliver(pool, alice)
    assert delivery is not None and delivery.state == NotificationState.FAILED
    seen = _everything_a_viewer_or_auditor_sees(viewer, channel)
    assert f"404 from http://127.0.0.1:{receiver.port}" in channel.last_error and not channel.enabled
    assert AuditEvent.objects.filter(action="disable_channel").exists()
    _assert_no_secret(seen)
    _assert_no_secret(caplog.text)


def test_it_names_only_scheme_and_host_when_the_receiver_is_down(pool: Pool, alice: User, viewer: User,
                                                                 allow_loopback: None, caplog) -> None:  # noqa: ANN001
    caplog.set_level(logging.DEBUG)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    channel = _webhook(pool, f"http://127.0.0.1:{port}/{PATH_SECRET}?{QUERY_SECRET}")
    [delivery] = _deliver(pool, alice)
    assert delivery is not None and delivery.state == NotificationState.PENDING  # retried later
    seen = _everything_a_viewer_or_auditor_sees(viewer, channel)
    assert channel.last_error.startswith(f"http://127.0.0.1:{port}: ConnectionError")
    _assert_no_secret(seen)
    _assert_no_secret(caplog.text)


def test_it_names_only_scheme_and_host_when_policy_refuses(pool: Pool, alice: User, viewer: User, monkeypatch) -> None:  # noqa: ANN001
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if host != "pager.corp.internal":
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.20.0.7", port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    channel = _webhook(pool, f"https://user:pass@pager.corp.internal/{PATH_SECRET}?{QUERY_SECRET}")
    _deliver(pool, alice)
    seen = _everything_a_viewer_or_auditor_sees(viewer, channel)
    assert "pager.corp.internal: 10.20.0.7 is a private address" in channel.disabled_reason
    _assert_no_secret(seen)
    assert "user:pass" not in seen


def test_it_names_only_the_origins_of_a_refused_redirect(pool: Pool, alice: User, viewer: User, receiver: Receiver,
                                                         allow_loopback: None) -> None:
    path = f"/{PATH_SECRET}"
    receiver.answers[path] = (307, b"", {"Location": f"https://elsewhere.example/{PATH_SECRET}?{QUERY_SECRET}"})
    channel = _webhook(pool, receiver.url(path))
    _deliver(pool, alice)
    seen = _everything_a_viewer_or_auditor_sees(viewer, channel)
    assert "redirected to another host (https://elsewhere.example)" in channel.last_error
    _assert_no_secret(seen)


def test_the_channel_target_never_shows_userinfo(pool: Pool, viewer: User) -> None:
    _webhook(pool, f"https://user:pass@pager.example:8443/{PATH_SECRET}")
    api = APIClient()
    api.force_authenticate(viewer)
    [row] = api.get("/api/v1/channels/").json()["results"]
    assert row["target"] == "https://pager.example:8443/…"


@pytest.mark.parametrize("text, expected", [
    ("POST https://hooks.slack.com/services/T1/B2/x?y=z failed", "POST https://hooks.slack.com/… failed"),
    ("Max retries exceeded with url: /services/T1/B2/xyz (Caused by x)", "Max retries exceeded with url: … (Caused by x)"),
    ("see http://u:p@[::1]:8080/a", "see http://[::1]:8080/…"),
])
def test_redact_table(text: str, expected: str) -> None:
    from incidents.outbound import redact

    assert redact(text, "https://hooks.slack.com/services/T1/B2/xyz") == expected
