"""The SSRF-checked client: only public addresses (or the admin's allow-list), checked at connect time."""
from __future__ import annotations

import ipaddress
import socket
import time

import pytest

from incidents import outbound

from tests.incidents.conftest import Receiver


def _post(url: str) -> outbound.Answer:
    return outbound.post(url, b"{}", {"Content-Type": "application/json"})


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:{port}/hook",  # loopback (the receiver is really there)
    "http://localhost:{port}/hook",  # a DNS name that resolves to loopback: judged by its address
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata, link-local
    "http://10.0.0.1/hook",
    "http://192.168.1.10/hook",
    "http://[::1]:{port}/hook",
    "http://[::ffff:127.0.0.1]:{port}/hook",  # IPv4-mapped IPv6
    "http://0.0.0.0:{port}/hook",
])
def test_it_refuses_private_loopback_and_link_local_addresses_by_default(receiver: Receiver, url: str) -> None:
    with pytest.raises(outbound.OutboundRefused):
        _post(url.format(port=receiver.port))
    assert receiver.requests == []


@pytest.mark.parametrize("url", ["ftp://example.com/hook", "file:///etc/passwd", "gopher://127.0.0.1/"])
def test_it_refuses_other_schemes(url: str) -> None:
    with pytest.raises(outbound.OutboundRefused, match="only http and https"):
        _post(url)


@pytest.mark.parametrize("url", ["https://hooks.example.com:99999/services/T0/B0/secret",
                                 "https://hooks.example.com:http/services/T0/B0/secret"])
def test_a_port_that_cannot_be_is_refused_when_saved_without_echoing_the_url(url: str) -> None:
    reason = outbound.literal_refusal(url)
    assert reason == "the URL's port is not a number from 0 to 65535"  # and no secret path in it


def test_the_allow_list_lets_an_admin_reach_an_internal_receiver(settings, receiver: Receiver) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    answer = _post(receiver.url("/hook"))
    assert (answer.status, answer.text) == (200, "ok")
    assert [request.path for request in receiver.requests] == ["/hook"]


def test_a_name_is_judged_when_connecting_not_when_saved(settings, receiver: Receiver) -> None:  # noqa: ANN001
    url = receiver.url("/hook", host="localhost")
    assert outbound.literal_refusal(url) is None  # nothing to object to before it resolves
    with pytest.raises(outbound.OutboundRefused, match="localhost: .* is a loopback address"):
        _post(url)
    assert receiver.requests == []


@pytest.mark.parametrize("location", [
    "http://169.254.169.254/latest/meta-data/iam/",
    "http://127.0.0.2:{port}/inside",  # loopback outside the allow-list
    "http://10.1.2.3/inside",
    "ftp://example.com/inside",
])
def test_it_refuses_a_redirect_to_a_forbidden_address(settings, receiver: Receiver, location: str) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    receiver.answers["/hook"] = (307, b"", {"Location": location.format(port=receiver.port)})
    with pytest.raises(outbound.OutboundRefused):
        _post(receiver.url("/hook"))
    assert [request.path for request in receiver.requests] == ["/hook"]


def _resolving(monkeypatch, name: str, addresses: list[str]) -> None:  # noqa: ANN001
    """A name no real resolver here can answer (an internal DNS entry); every other name resolves for real."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if host != name:
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in addresses]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_it_refuses_a_redirect_to_a_name_that_resolves_inside(settings, monkeypatch, receiver: Receiver) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    _resolving(monkeypatch, "grafana.corp.internal", ["10.20.0.7"])
    receiver.answers["/hook"] = (302, b"", {"Location": "http://grafana.corp.internal/api/admin"})
    with pytest.raises(outbound.OutboundRefused, match="redirected to another host"):
        _post(receiver.url("/hook"))


def test_a_name_with_one_inside_address_among_public_ones_is_refused(monkeypatch) -> None:  # noqa: ANN001
    _resolving(monkeypatch, "rebind.example.com", ["93.184.215.14", "169.254.169.254"])
    with pytest.raises(outbound.OutboundRefused, match="169.254.169.254 is a link-local address"):
        _post("http://rebind.example.com/hook")


def test_it_follows_a_bounded_number_of_redirects(settings, receiver: Receiver) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.OUTBOUND_MAX_REDIRECTS = 2
    receiver.answers["/a"] = (308, b"", {"Location": "/b"})
    receiver.answers["/b"] = (307, b"", {"Location": "/c"})
    assert _post(receiver.url("/a")).url == receiver.url("/c")
    receiver.answers["/loop"] = (307, b"", {"Location": "/loop"})
    with pytest.raises(outbound.OutboundRefused, match="more than 2 redirects"):
        _post(receiver.url("/loop"))
    assert len(receiver.at("/loop")) == 3


def test_the_whole_exchange_has_one_deadline(settings, receiver: Receiver) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.OUTBOUND_TIMEOUT_S = 1
    receiver.delay_s = 2.5
    started = time.monotonic()
    with pytest.raises(outbound.OutboundTimeout):
        _post(receiver.url("/slow"))
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("address, allowed", [
    ("8.8.8.8", True), ("2606:4700:4700::1111", True), ("127.0.0.1", False), ("169.254.169.254", False),
    ("100.64.0.1", False), ("fd00::1", False), ("fe80::1", False), ("224.0.0.1", False), ("::ffff:10.0.0.1", False),
])
def test_refusal_table(address: str, allowed: bool) -> None:
    assert (outbound.refusal(ipaddress.ip_address(address)) is None) is allowed
