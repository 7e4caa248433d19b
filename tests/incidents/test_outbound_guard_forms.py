"""The outbound guard sees through IPv6 forms that carry an IPv4 address, and a redirect never takes
the signed body to another host (issue 18, finding 4)."""
from __future__ import annotations

import ipaddress

import pytest

from incidents import outbound

from tests.incidents.conftest import Receiver


@pytest.mark.parametrize("address, inside", [
    ("64:ff9b::7f00:1", "127.0.0.1"),  # NAT64 (RFC 6052)
    ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
    ("64:ff9b::a00:1", "10.0.0.1"),
    ("2002:7f00:1::", "127.0.0.1"),  # 6to4
    ("2002:a9fe:a9fe::1", "169.254.169.254"),
    ("2002:c0a8:10a::", "192.168.1.10"),
    ("::7f00:1", "127.0.0.1"),  # IPv4-compatible
    ("::a9fe:a9fe", "169.254.169.254"),
    ("::ffff:a9fe:a9fe", "169.254.169.254"),  # IPv4-mapped (already refused before)
    ("::ffff:0:7f00:1", "127.0.0.1"),  # IPv4-translated (SIIT)
])
def test_it_refuses_ipv6_forms_of_internal_ipv4_addresses(address: str, inside: str) -> None:
    reason = outbound.refusal(ipaddress.ip_address(address))
    assert reason is not None and reason.startswith(inside)


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "::808:808", "::ffff:0:808:808"])
def test_it_allows_ipv6_forms_of_public_ipv4_addresses(address: str) -> None:
    assert outbound.refusal(ipaddress.ip_address(address)) is None


def test_it_refuses_the_local_use_nat64_prefix() -> None:
    assert outbound.refusal(ipaddress.ip_address("64:ff9b:1::a00:1")) == "64:ff9b:1::a00:1 is a local-use NAT64 address"


def test_the_allow_list_applies_to_the_embedded_address(settings) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = ["10.0.8.0/24"]
    assert outbound.refusal(ipaddress.ip_address("64:ff9b::a00:807")) is None
    assert outbound.refusal(ipaddress.ip_address("64:ff9b::a00:907")) is not None


def test_an_allow_listed_ipv6_network_is_the_admins_choice(settings) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = ["64:ff9b::a00:800/120"]  # an internal receiver reached through NAT64
    assert outbound.refusal(ipaddress.ip_address("64:ff9b::a00:807")) is None
    assert outbound.refusal(ipaddress.ip_address("64:ff9b::a00:907")) is not None


@pytest.mark.parametrize("url", ["http://[64:ff9b::7f00:1]/hook", "http://[2002:7f00:1::]/hook", "http://[::7f00:1]/hook"])
def test_it_refuses_such_literals_before_sending(url: str) -> None:
    with pytest.raises(outbound.OutboundRefused, match="127.0.0.1 is a loopback address"):
        outbound.post(url, b"{}", {})


def test_a_cross_host_redirect_is_refused_and_the_body_goes_nowhere_else(settings, receiver: Receiver) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    other = f"http://127.0.0.2:{receiver.port}/stolen"  # the same receiver under another host name
    receiver.answers["/hook"] = (307, b"", {"Location": other})
    with pytest.raises(outbound.OutboundRefused, match=f"redirected to another host \\(http://127.0.0.2:{receiver.port}\\)"):
        outbound.post(receiver.url("/hook"), b'{"signed": true}', {"X-Headroom-Signature": "sha256=abc"})
    assert [request.path for request in receiver.requests] == ["/hook"]


def test_a_same_host_redirect_keeps_the_post(settings, receiver: Receiver) -> None:  # noqa: ANN001
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    receiver.answers["/old"] = (308, b"", {"Location": "/new"})
    answer = outbound.post(receiver.url("/old"), b'{"signed": true}', {"X-Headroom-Signature": "sha256=abc"})
    assert answer.status == 200
    [_, moved] = receiver.requests
    assert (moved.path, moved.body, moved.headers["X-Headroom-Signature"]) == ("/new", b'{"signed": true}', "sha256=abc")


@pytest.mark.parametrize("here, there, same", [
    ("http://a.example/x", "https://a.example/y", True),  # an upgrade to https
    ("https://a.example/x", "http://a.example/y", False),  # a downgrade
    ("https://a.example/x", "https://A.EXAMPLE:443/y", True),
    ("https://a.example/x", "https://a.example:8443/y", False),
    ("https://a.example/x", "https://b.example/x", False),
])
def test_same_host_table(here: str, there: str, same: bool) -> None:
    assert outbound.same_host(here, there) is same
