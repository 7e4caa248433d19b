"""A silence must be able to match one of its team's alerts: a silence that matches nothing is accepted
today, and the on-call believes the page is muted when it is not."""
from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import SLO, Cluster, Pool
from incidents import alerts, rules
from incidents.models import Silence

from tests.core.conftest import token_client

Matchers = Callable[[Pool, Pool], list[dict[str, object]]]


def _m(**labels: object) -> list[dict[str, object]]:
    return [{"label": label, "value": value} for label, value in labels.items()]


@pytest.mark.parametrize(("raw", "says"), [
    (_m(tier="p0"), "tier must be one of P0, P1, P2, P3, got 'p0'"),
    (_m(rule="ttft-p95"), "rule must be one of outage, "),
    (_m(pool=None), "the value of pool must be a string"),
    (_m(pool=12), "the value of pool must be a string"),
    (_m(pool="012"), 'pool must be an id like "12"'),
    (_m(slo="-1"), 'slo must be an id like "12"'),
    ([{"label": "pool", "value": "1"}, {"label": "pool", "value": "2"}], "each label at most once"),
    (_m(rule="outage", tier="P1"), "rule outage is P0, never P1"),
    (_m(rule="heartbeat", pool="1"), "heartbeat alerts are per cluster"),
    (_m(rule="outage", slo="1"), "only the burn-rate rules carry an slo"),
])
def test_it_refuses_matchers_no_alert_can_carry(raw: list, says: str) -> None:
    """Alerts carry string labels from a fixed set of rules and tiers: anything else silences nothing."""
    with pytest.raises(ValueError) as refused:
        rules.validate_matchers(raw)
    assert says in str(refused.value)


@pytest.mark.parametrize("raw", [_m(tier="P3"), _m(rule="slo_burn_fast", slo="4"), _m(rule="heartbeat", cluster="2"),
                                 _m(rule="ttft_p95", tier="P1", pool="7")])
def test_it_accepts_matchers_an_alert_can_carry(raw: list) -> None:
    """The check must not refuse what a real alert's labels match."""
    assert rules.matches(rules.validate_matchers(raw), {m["label"]: m["value"] for m in raw})


@pytest.mark.parametrize(("matchers", "says"), [
    (lambda pool, other: _m(pool=str(other.pk)), "team ml-platform has no pool"),  # another team's pool
    (lambda pool, other: _m(cluster=str(other.cluster_id)), "team ml-platform has no cluster"),
    (lambda pool, other: _m(slo=str(SLO.objects.create(pool=other, indicator="ttft_p95", threshold=900,
                                                       objective=0.99).pk)), "team ml-platform has no slo"),
    (lambda pool, other: _m(pool=str(pool.pk + other.pk + 100)), "team ml-platform has no pool"),  # no such pool
    (lambda pool, other: _m(pool=str(pool.pk), cluster=str(Cluster.objects.create(
        name="gpu-us-west", team=pool.team, kube_api_url="http://127.0.0.1:6445").pk)), "runs in cluster"),
    (lambda pool, other: _m(tier="p0"), "tier must be one of"),
    (lambda pool, other: _m(rule="None"), "rule must be one of"),
    (lambda pool, other: _m(pool=None), "must be a string"),
], ids=["another team's pool", "another team's cluster", "another team's slo", "no such pool", "pool elsewhere",
        "lower-case tier", "unknown rule", "null value"])
def test_the_api_answers_400_naming_matchers_for_a_silence_that_would_match_nothing(
        pool: Pool, search_pool: Pool, alice: User, matchers: Matchers, says: str) -> None:
    """The on-call must hear at once that the page is not muted, not find out at the next page."""
    answer = token_client(alice).post("/api/v1/silences/", {
        "team": "ml-platform", "matchers": matchers(pool, search_pool),
        "ends_at": (timezone.now() + timedelta(hours=2)).isoformat()}, format="json")
    assert answer.status_code == 400 and says in str(answer.json()["matchers"]), answer.content[:300]
    assert not Silence.objects.exists()


@pytest.mark.parametrize("matchers", [
    lambda pool: _m(pool=str(pool.pk)),
    lambda pool: _m(cluster=str(pool.cluster_id), tier="P3"),
    lambda pool: _m(rule="slo_burn_slow", slo=str(pool.slos.get().pk), pool=str(pool.pk)),
    lambda pool: _m(rule="heartbeat", cluster=str(pool.cluster_id)),
], ids=["pool", "cluster and tier", "burn rule, slo and pool", "heartbeat of a cluster"])
def test_the_api_accepts_a_silence_of_the_teams_own_alerts(pool: Pool, alice: User,
                                                           matchers: Callable[[Pool], list]) -> None:
    """Everything a team's alerts carry can still be silenced."""
    ends = (timezone.now() + timedelta(hours=2)).isoformat()
    answer = token_client(alice).post("/api/v1/silences/", {"team": "ml-platform", "matchers": matchers(pool),
                                                            "ends_at": ends}, format="json")
    assert answer.status_code == 201, answer.content[:300]


def test_every_way_of_making_a_silence_goes_through_the_one_check(pool: Pool, search_pool: Pool, alice: User) -> None:
    """The service is where the check lives, so no caller can skip it."""
    with pytest.raises(alerts.InvalidMatchers, match="team ml-platform has no pool"):
        alerts.create_silence(pool.team, _m(pool=str(search_pool.pk)), timezone.now() + timedelta(hours=1),
                              core.Actor(alice, ActorChannel.API))
    assert not Silence.objects.exists()


def test_a_stored_silence_still_matches_as_it_did(pool: Pool) -> None:
    """Silences stored before the check keep their meaning: an id written as a number still matches its pool."""
    now = timezone.now()
    stored = Silence.objects.create(team=pool.team, matchers=[{"label": "pool", "value": pool.pk}],
                                    starts_at=now - timedelta(minutes=1), ends_at=now + timedelta(hours=1))
    [(silence, matchers)] = alerts.active_silences([pool.team_id], now)[pool.team_id]
    assert silence == stored and rules.matches(matchers, {"rule": "outage", "pool": str(pool.pk)})
