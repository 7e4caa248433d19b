"""A new team onboards: what the fleet and pool pages tell its admin about what is not set up yet."""
from __future__ import annotations

import html as html_module
import re

from datetime import timedelta

from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane.choices import SloIndicator
from controlplane.models import SLO, Pool
from incidents import services as incident_services
from incidents.choices import ChannelKind
from incidents.models import Channel
from scaling import loop
from scaling.drivers.cluster import DriverError
from scaling.models import PoolStatus

UNHEARD = "nobody is told about this pool"


def _login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _read(pool: Pool) -> None:
    PoolStatus.objects.create(pool=pool, desired_replicas=1, ready_replicas=1, observed_at=timezone.now())


def _text(html: str) -> str:
    return html_module.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def _pages(user: User, pool: Pool) -> tuple[str, str]:
    client = _login(user)
    return _text(client.get("/").content.decode()), _text(client.get(f"/pools/{pool.pk}/").content.decode())


# --- a team with no notification channel -----------------------------------------------------------

def test_the_fleet_and_pool_pages_say_nobody_is_told_when_the_team_has_no_channel(bob: User, pool: Pool) -> None:
    _read(pool)
    fleet, page = _pages(bob, pool)
    for text in (fleet, page):
        assert f"{UNHEARD}: ML Platform has no notification channel" in text, text
        assert "add a Slack or webhook channel" in text


def test_they_say_it_too_when_every_channel_of_the_team_is_disabled(bob: User, pool: Pool) -> None:
    _read(pool)
    channel = Channel.objects.create(team=pool.team, name="oncall", kind=ChannelKind.WEBHOOK,
                                     settings={"url": "https://hooks.example/x", "secret": "s" * 32})
    incident_services.disable_channel(channel, "404 from https://hooks.example")
    fleet, page = _pages(bob, pool)
    for text in (fleet, page):
        assert f"{UNHEARD}: every notification channel of ML Platform is disabled" in text, text


def test_an_enabled_channel_silences_the_warning(bob: User, pool: Pool) -> None:
    _read(pool)
    Channel.objects.create(team=pool.team, name="oncall", kind=ChannelKind.WEBHOOK,
                           settings={"url": "https://hooks.example/x", "secret": "s" * 32})
    fleet, page = _pages(bob, pool)
    assert UNHEARD not in fleet and UNHEARD not in page


# --- a pool with no SLO ----------------------------------------------------------------------------

def test_the_pages_say_a_pool_without_an_slo_is_planned_to_a_default_and_has_no_burn_rate_alert(
        bob: User, pool: Pool) -> None:
    _read(pool)
    Channel.objects.create(team=pool.team, name="oncall", kind=ChannelKind.WEBHOOK,
                           settings={"url": "https://hooks.example/x", "secret": "s" * 32})
    SLO.objects.filter(pool=pool).delete()
    assert loop.pool_plan(pool).slo_latency_s == 1.0  # what the planner silently aims at
    fleet, page = _pages(bob, pool)
    for text in (fleet, page):
        assert "no SLO: the planner aims at a default TTFT p95 of 1 s and no error-budget (burn-rate) alert " \
               "can fire" in text, text
    assert "cannot judge latency" not in page  # it does judge it: against the default


def test_they_say_the_planner_ignores_an_slo_that_is_not_ttft_p95(bob: User, pool: Pool) -> None:
    _read(pool)
    SLO.objects.filter(pool=pool).update(indicator=SloIndicator.E2E_P95, threshold=8000)
    assert loop.pool_plan(pool).slo_latency_s == 1.0
    fleet, page = _pages(bob, pool)
    for text in (fleet, page):
        assert "no TTFT p95 SLO: the planner plans to TTFT p95 only, so it aims at a default 1 s" in text, text


def test_a_ttft_p95_slo_is_what_the_planner_aims_at_and_nothing_is_said(bob: User, pool: Pool) -> None:
    _read(pool)
    assert loop.pool_plan(pool).slo_latency_s == 1.0  # the fixture's SLO: 1000 ms
    SLO.objects.filter(pool=pool).update(threshold=600)
    assert loop.pool_plan(Pool.objects.get(pk=pool.pk)).slo_latency_s == 0.6
    fleet, page = _pages(bob, pool)
    assert "SLO:" not in fleet and "SLO:" not in page



# --- a pool whose Deployment does not exist (a typo) -------------------------------------------------

class _NoSuchDeployment:
    def status(self, workload: object) -> None:
        raise DriverError('deployments.apps "vllm-chat-8b" not found', permanent=True, status=404)


def test_the_pages_say_why_a_pool_whose_deployment_does_not_exist_is_never_read(
        bob: User, pool: Pool, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(loop, "cluster_driver", lambda cluster: _NoSuchDeployment())
    now = timezone.now()
    for i in range(2):
        loop.tick([pool], now=now + timedelta(seconds=15 * i))
    fleet, page = _pages(bob, pool)
    said = 'not read: the last tick could not read it (kubernetes: deployments.apps "vllm-chat-8b" not found)'
    assert said in fleet, fleet  # the fleet's "Inventory only" row
    assert said in page, page
    assert "Headroom has never read it from its cluster" not in fleet + page
