"""Input that used to be a 500, a silent no-op or a change nobody could see, on the API and the web forms:
each is now a 400 (or 403) naming the field, with nothing saved, or an audited act."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.choices import Role
from controlplane.models import AuditEvent, Cluster, Membership, Pool, Team
from incidents.models import Channel, PlaybookRunStep
from scaling.choices import BreakerScope, BreakerState
from scaling.models import CircuitBreaker, WarmPoolReport

from tests.core.conftest import token_client
from tests.incidents.test_incidents import fire_ttft_p95

DEEP = "[" * 50_000 + "]" * 50_000


def _cluster_form(cluster: Cluster, **changes: str) -> dict:
    return {"name": cluster.name, "team": cluster.team_id, "region": "", "kube_api_url": cluster.kube_api_url,
            "credentials_ref": "", "prometheus_url": "", "prometheus_rate_window": "1m", "time_zone": "UTC",
            "off_hours": "[]", "gpu_prices": "{}"} | changes


@pytest.mark.parametrize(("field", "value"), [
    ("gpu_prices", {"H100": {"on_demand": 10**400}}),
    ("gpu_prices", {"H100": {"on_demand": 4.0, "spot": 1e6}}),
    ("off_hours", [{"weekdays": [5], "start": "00:00+00:00", "end": "23:00"}]),
])
def test_cluster_settings_out_of_range_are_a_400_naming_the_field(bob: User, cluster: Cluster, field: str,
                                                                   value: object) -> None:
    answer = token_client(bob).patch(f"/api/v1/clusters/{cluster.pk}/", {field: value}, format="json")
    assert answer.status_code == 400 and field in answer.json()
    cluster.refresh_from_db()
    assert getattr(cluster, field) in ({}, [])


def test_a_huge_planner_constant_is_a_400(bob: User, pool: Pool) -> None:
    answer = token_client(bob).patch(f"/api/v1/pools/{pool.pk}/", {"planner_constants": {"request_rate_margin": 10**400}},
                                     format="json")
    assert answer.status_code == 400 and "request_rate_margin must be between" in str(answer.json()["planner_constants"])


@pytest.mark.parametrize(("field", "text", "message"), [
    ("gpu_prices", '{"H100": {"on_demand": 1e400}}', "on_demand must be a number from 0 to 1000"),
    ("gpu_prices", '{"H\\u0000": {"on_demand": 1}}', "NUL character"),
    ("off_hours", DEEP, "nests deeper than 32 levels"),
    ("off_hours", '[{"weekdays": [5], "start": "00:00+02:00", "end": "06:00"}]', "without a UTC offset"),
])
def test_the_web_cluster_form_shows_the_error_and_saves_nothing(client, bob: User, cluster: Cluster, field: str,  # noqa: ANN001
                                                                text: str, message: str) -> None:
    client.force_login(bob)
    answer = client.post(f"/cluster/{cluster.pk}/edit/", _cluster_form(cluster, **{field: text}))
    assert answer.status_code == 200 and message in answer.content.decode()
    cluster.refresh_from_db()
    assert (cluster.gpu_prices, cluster.off_hours) == ({}, [])


def test_deep_json_in_a_channel_or_a_playbook_is_a_form_error(client, alice: User, bob: User, ml_team: Team) -> None:  # noqa: ANN001
    client.force_login(bob)
    answer = client.post("/integrations/channels/new/", {"team": ml_team.pk, "name": "pager", "kind": "webhook",
                                                         "url": "https://hooks.example/x", "quiet": DEEP})
    assert answer.status_code == 200 and "nests deeper than 32 levels" in answer.content.decode()
    assert not Channel.objects.exists()
    client.force_login(alice)
    answer = client.post("/playbooks/new/", {"team": ml_team.pk, "name": "surge", "steps": f"prescale | x | {DEEP}"})
    assert answer.status_code == 200 and "Step 1: params: nests deeper than 32 levels" in answer.content.decode()


def test_a_nul_in_a_web_skip_reason_is_dropped_not_a_500(client, alice: User, pool: Pool) -> None:  # noqa: ANN001
    fire_ttft_p95(pool)
    api = token_client(alice)
    playbook = api.post("/api/v1/playbooks/", {"team": "ml-platform", "name": "p",
                                               "steps": [{"title": "Look", "kind": "checklist"}]}, format="json").json()
    incident_id = pool.incidents.get().pk
    run = api.post("/api/v1/playbook-runs/", {"incident": incident_id, "playbook": playbook["id"]}, format="json").json()
    client.force_login(alice)
    answer = client.post(f"/incidents/{incident_id}/runs/{run['id']}/steps/1/skip/", {"reason": "not\x00 needed"})
    assert answer.status_code == 302  # back to the incident's playbooks
    assert PlaybookRunStep.objects.get(run_id=run["id"], position=1).reason == "not needed"


def test_the_web_report_form_caps_the_sizes_as_the_api_does(client, alice: User, pool: Pool) -> None:  # noqa: ANN001
    client.force_login(alice)
    answer = client.post(f"/pools/{pool.pk}/reports/", {"sizes": ",".join(["5"] * 22), "days": "1"})
    assert answer.status_code == 400 and "at most 21 sizes" in answer.content.decode()
    assert not WarmPoolReport.objects.exists()


def test_holding_a_breaker_where_it_is_is_audited_once(alice: User, pool: Pool) -> None:
    breaker = CircuitBreaker.objects.create(scope=BreakerScope.POOL, pool=pool, state=BreakerState.CLOSED,
                                            since=timezone.now(), failure_ratio=0.5, min_requests=10, open_for_s=30)
    client = token_client(alice)
    for _ in range(2):
        assert client.post(f"/api/v1/breakers/{breaker.pk}/close/", {}, format="json").json()["forced"] is True
    held = AuditEvent.objects.filter(object_type="scaling.circuitbreaker", action="breaker-hold")
    assert held.count() == 1 and held.get().before["forced"] is False and held.get().after["forced"] is True


def test_a_fallback_pool_cannot_move_away_from_its_primary(bob: User, pool: Pool, ml_team: Team) -> None:
    small = Pool.objects.create(cluster=pool.cluster, team=ml_team, name="chat-1b", namespace="inference",
                                deployment="vllm-chat-1b", model_name="m", gpu_type="L4")
    Pool.objects.filter(pk=pool.pk).update(fallback_pool=small)
    other = Cluster.objects.create(name="gpu-eu-west", team=ml_team, kube_api_url="http://127.0.0.1:6445")
    answer = token_client(bob).patch(f"/api/v1/pools/{small.pk}/", {"cluster": other.pk}, format="json")
    assert answer.status_code == 400 and "gpu-us-east/chat-8b" in str(answer.json()["cluster"])
    small.refresh_from_db()
    assert small.cluster_id == pool.cluster_id


def test_naming_another_teams_pool_as_fallback_needs_its_operator_role(bob: User, pool: Pool, search_team: Team,
                                                                        charlie: User) -> None:
    pool.cluster.shared_with.add(search_team)
    theirs = Pool.objects.create(cluster=pool.cluster, team=search_team, name="rerank", namespace="search",
                                 deployment="vllm-rerank", model_name="m", gpu_type="L4")
    Membership.objects.create(user=bob, team=search_team, role=Role.VIEWER)
    client = token_client(bob)
    answer = client.patch(f"/api/v1/pools/{pool.pk}/", {"fallback_pool": theirs.pk}, format="json")
    assert answer.status_code == 403 and "operator role" in str(answer.json())
    pool.refresh_from_db()
    assert pool.fallback_pool_id is None
    Membership.objects.filter(user=bob, team=search_team).update(role=Role.OPERATOR)
    assert client.patch(f"/api/v1/pools/{pool.pk}/", {"fallback_pool": theirs.pk}, format="json").status_code == 200
    # Once named, an edit of something else by a person without that role is not refused for it.
    Membership.objects.filter(user=bob, team=search_team).delete()
    assert client.patch(f"/api/v1/pools/{pool.pk}/", {"max_replicas": 6}, format="json").status_code == 200


@pytest.mark.parametrize("query", [
    "/api/v1/shifts/?active=yes",
    "/api/v1/incidents/?active=maybe",
    "/api/v1/breakers/?forced=perhaps",
    "/api/v1/fallback-policies/?enabled=on",
    "/api/v1/fallbacks/?phase=",
    "/api/v1/breakers/?state=",
    "/api/v1/breakers/?pool=abc",
])
def test_a_filter_value_it_cannot_read_is_a_400_naming_it(alice: User, query: str) -> None:
    answer = token_client(alice).get(query)
    name = query.split("?")[1].split("=")[0]
    assert answer.status_code == 400 and name in answer.json()


def test_another_teams_id_and_an_unknown_id_filter_alike(alice: User, pool: Pool, search_pool: Pool) -> None:
    client = token_client(alice)
    for path in ("/api/v1/breakers/", "/api/v1/fallbacks/", "/api/v1/slos/", "/api/v1/incidents/"):
        theirs, unknown = client.get(f"{path}?pool={search_pool.pk}"), client.get(f"{path}?pool=999999")
        assert (theirs.status_code, unknown.status_code) == (200, 200), path
        assert theirs.json()["results"] == unknown.json()["results"] == [], path
    assert len(client.get(f"/api/v1/slos/?pool={pool.pk}").json()["results"]) == 1


def test_a_deployment_name_its_pods_cannot_be_read_from_is_a_400(bob: User, pool: Pool) -> None:
    """Kubernetes cuts a longer Deployment's pod names, and the pool's metrics are found by the Deployment in them."""
    client = token_client(bob)
    too_long = "d" * 47
    response = client.patch(f"/api/v1/pools/{pool.pk}/", {"deployment": too_long}, format="json")
    assert response.status_code == 400 and "At most 46 characters" in response.json()["deployment"][0]
    assert Pool.objects.get(pk=pool.pk).deployment == "vllm-chat-8b"
    assert client.patch(f"/api/v1/pools/{pool.pk}/", {"deployment": too_long[:46]}, format="json").status_code == 200
