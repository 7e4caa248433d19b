"""/api/v1/fallbacks/: list, retrieve, activate, restore, approve; 400 naming the field, 403 by role, 409 on
a busy route or nothing to restore. The route lives in the sandbox's Kubernetes API emulator."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane import services as core
from controlplane.choices import Channel, Role
from controlplane.models import Membership, Pool, Team
from scaling import traffic
from scaling.models import FallbackActivation, FallbackPolicy

from tests.core.conftest import alice, bob, charlie, cluster, ml_team, search_team, token_client  # noqa: F401
from tests.scaling.test_fallbacks import policy  # noqa: F401
from tests.scaling.test_traffic import GIVING, RECEIVING, _weights, pools, sandbox  # noqa: F401

URL = "/api/v1/fallbacks/"


def test_an_operator_activates_and_restores_and_reads_it_back(alice: User, sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    client = token_client(alice)
    response = client.post(f"{URL}activate/", {"pool": pools[0].pk, "share": 0.25, "comment": "drill"}, format="json")
    assert response.status_code == 200, response.data
    body = response.data
    assert (body["phase"], body["forced"], body["route_percent"], body["created_by"]) == ("active", True, 25, "alice")
    assert _weights(sandbox[0]) == {GIVING: 75, RECEIVING: 25}
    assert client.get(f"{URL}?pool={pools[0].pk}&phase=active").data["count"] == 1
    assert client.get(f"{URL}{body['id']}/").data["events"][0]["comment"] == "drill"
    restored = client.post(f"{URL}restore/", {"pool": pools[0].pk}, format="json")
    assert restored.status_code == 200 and restored.data["phase"] == "restored"
    assert _weights(sandbox[0]) == {GIVING: 100, RECEIVING: 0}


@pytest.mark.parametrize(("verb", "payload", "field", "says"), [
    ("activate", {"share": 0.5}, "pool", "required"),
    ("activate", {"pool": 999999}, "pool", "does not exist"),
    ("activate", {"share": 2}, "share", "less than or equal to 1"),
    ("activate", {"share": "most"}, "share", "valid number"),
    ("restore", {"comment": "x" * 2001}, "comment", "no more than 2000"),
])
def test_bad_input_is_a_400_naming_the_field(alice: User, sandbox, pools, policy, verb: str, payload: dict,  # noqa: ANN001, F811
                                             field: str, says: str) -> None:
    body = payload if field == "pool" else {"pool": pools[0].pk} | payload
    response = token_client(alice).post(f"{URL}{verb}/", body, format="json")
    assert response.status_code == 400 and field in response.data, response.data
    assert says in str(response.data[field])
    assert not FallbackActivation.objects.exists() and _weights(sandbox[0]) == {GIVING: 100, RECEIVING: 0}


def test_a_pool_without_a_fallback_is_a_400(alice: User, sandbox, pools) -> None:  # noqa: ANN001, F811
    response = token_client(alice).post(f"{URL}activate/", {"pool": pools[0].pk}, format="json")
    assert response.status_code == 400 and "no fallback pool" in str(response.data["pool"])


def test_viewers_and_outsiders_may_not_act(alice: User, charlie: User, sandbox, pools, policy,  # noqa: ANN001, F811
                                           ml_team: Team) -> None:  # noqa: F811
    outsider = token_client(charlie).post(f"{URL}activate/", {"pool": pools[0].pk}, format="json")
    assert outsider.status_code in (400, 403)  # the pool is invisible to charlie, or his role is too low
    viewer = User.objects.create_user("vera")
    Membership.objects.create(user=viewer, team=ml_team, role=Role.VIEWER)
    response = token_client(viewer).post(f"{URL}activate/", {"pool": pools[0].pk}, format="json")
    assert response.status_code == 403
    assert token_client(viewer).get(URL).status_code == 200
    assert not FallbackActivation.objects.exists()


def test_409_while_a_shift_writes_the_route_and_when_nothing_is_open(alice: User, sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    client = token_client(alice)
    nothing = client.post(f"{URL}restore/", {"pool": pools[0].pk}, format="json")
    assert nothing.status_code == 409 and "nothing to restore" in nothing.data["detail"]
    assert client.post(f"{URL}approve/", {"pool": pools[0].pk}, format="json").status_code == 409
    traffic.start(pools[0], pools[1], core.Actor(alice, Channel.API))
    busy = client.post(f"{URL}activate/", {"pool": pools[0].pk, "share": 0.5}, format="json")
    assert busy.status_code == 409 and "one writer per route" in busy.data["detail"]
    assert not FallbackActivation.objects.exists() and _weights(sandbox[0]) == {GIVING: 100, RECEIVING: 0}
    assert FallbackPolicy.objects.filter(pk=policy.pk).exists() and Pool.objects.get(pk=pools[0].pk).fallback_pool_id


def test_a_team_admin_configures_the_policy(alice: User, bob: User, sandbox, pools) -> None:  # noqa: ANN001, F811
    client = token_client(bob)
    missing = client.post("/api/v1/fallback-policies/", {"pool": pools[0].pk}, format="json")
    assert missing.status_code == 400 and "no fallback_pool" in str(missing.data["pool"])
    Pool.objects.filter(pk=pools[0].pk).update(fallback_pool=pools[1])
    bad = client.post("/api/v1/fallback-policies/", {"pool": pools[0].pk, "max_share": 1.5}, format="json")
    assert bad.status_code == 400 and "max_share" in bad.data
    bad = client.post("/api/v1/fallback-policies/", {"pool": pools[0].pk, "classes": ["gold"]}, format="json")
    assert bad.status_code == 400 and "classes" in bad.data
    created = client.post("/api/v1/fallback-policies/", {"pool": pools[0].pk, "requires_approval": True,
                                                          "exit_after_s": 120}, format="json")
    assert created.status_code == 201, created.data
    assert (created.data["classes"], created.data["exit_after_s"]) == (["standard"], 120.0)
    operator = token_client(alice).patch(f"/api/v1/fallback-policies/{pools[0].pk}/", {"max_share": 0.5}, format="json")
    assert operator.status_code == 403  # thresholds are the team admin's; operators act on activations
    changed = client.patch(f"/api/v1/fallback-policies/{pools[0].pk}/", {"max_share": 0.5}, format="json")
    assert changed.status_code == 200 and FallbackPolicy.objects.get(pk=pools[0].pk).max_share == 0.5
