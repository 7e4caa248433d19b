"""/api/v1/shifts/: start, list, act; 400 naming the field, 409 on a busy route, team and role checks.
The route lives in the sandbox's Kubernetes API emulator."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane.choices import Role
from controlplane.models import Cluster, Membership, Pool, Team
from scaling.choices import ShiftPhase
from scaling.models import TrafficShift

from tests.core.conftest import alice, charlie, cluster, ml_team, search_team, token_client  # noqa: F401
from tests.scaling.test_traffic import GIVING, RECEIVING, pools, sandbox  # noqa: F401

URL = "/api/v1/shifts/"


def _payload(pools: tuple[Pool, Pool], **changes) -> dict:  # noqa: ANN003, F811
    return {"from_pool": pools[0].pk, "to_pool": pools[1].pk, "hold_s": 60} | changes


def test_an_operator_starts_a_shift_and_reads_it_back(alice: User, pools) -> None:  # noqa: ANN001, F811
    client = token_client(alice)
    response = client.post(URL, _payload(pools, idempotency_key="k1"), format="json")
    assert response.status_code == 201, response.data
    body = response.data
    assert (body["phase"], body["step"], body["steps"], body["share_percent"]) == ("pending", 0, [80, 95, 100], 0)
    assert body["planned_weights"] == [{GIVING: 20, RECEIVING: 80}, {GIVING: 5, RECEIVING: 95}, {GIVING: 0, RECEIVING: 100}]
    assert body["start_weights"] == {GIVING: 100, RECEIVING: 0} and body["created_by"] == "alice"
    again = client.post(URL, _payload(pools, idempotency_key="k1"), format="json")
    assert again.status_code == 201 and again.data["id"] == body["id"]  # the same key: the same shift
    assert client.get(f"{URL}?active=true&pool={pools[0].pk}").data["count"] == 1
    assert client.get(f"{URL}?active=false").data["count"] == 0
    assert client.get(f"{URL}{body['id']}/").data["events"][0]["comment"] == "shift started"


@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"steps": [95, 80]}, "steps", "each step must send more"),
    ({"steps": [0, 100]}, "steps", "whole percent in 1..100"),
    ({"steps": []}, "steps", "at least one step"),
    ({"steps": ["many"]}, "steps", "valid integer"),
    ({"gated_steps": [4]}, "gated_steps", "between 1 and 3"),
    ({"max_error_rate": 2}, "max_error_rate", "less than or equal to 1"),
    ({"failure_threshold": 0}, "failure_threshold", "greater than or equal to 1"),
    ({"router_kind": "ingress"}, "router_kind", "not a valid choice"),
    ({"idempotency_key": "x" * 101}, "idempotency_key", "no more than 100"),
])
def test_bad_input_is_a_400_naming_the_field(alice: User, pools, changes: dict, field: str, says: str) -> None:  # noqa: ANN001, F811
    response = token_client(alice).post(URL, _payload(pools, **changes), format="json")
    assert response.status_code == 400 and field in response.data, response.data
    assert says in str(response.data[field])
    assert not TrafficShift.objects.exists()


def test_an_unknown_backend_is_a_400_naming_the_pool(alice: User, pools) -> None:  # noqa: ANN001, F811
    Pool.objects.filter(pk=pools[1].pk).update(route_backend="vllm-chat-70b")
    response = token_client(alice).post(URL, _payload(pools), format="json")
    assert response.status_code == 400 and "no backend 'vllm-chat-70b'" in str(response.data["to_pool"])


def test_pools_on_two_routes_or_the_same_pool_are_refused(alice: User, pools) -> None:  # noqa: ANN001, F811
    client = token_client(alice)
    same = client.post(URL, _payload(pools, to_pool=pools[0].pk), format="json")
    assert same.status_code == 400 and "the same" in str(same.data["to_pool"])
    Pool.objects.filter(pk=pools[1].pk).update(route_name="other-route")
    apart = client.post(URL, _payload(pools), format="json")
    assert apart.status_code == 400 and "on route inference/other-route" in str(apart.data["to_pool"])


def test_a_second_shift_on_the_route_is_a_409(alice: User, pools) -> None:  # noqa: ANN001, F811
    client = token_client(alice)
    first = client.post(URL, _payload(pools), format="json").data
    response = client.post(URL, _payload(pools, steps=[50, 100]), format="json")
    assert response.status_code == 409 and response.data["id"] == first["id"]
    assert "already moving traffic" in str(response.data["to_pool"])


def test_pause_resume_approve_and_rollback(alice: User, pools) -> None:  # noqa: ANN001, F811
    client = token_client(alice)
    shift = client.post(URL, _payload(pools), format="json").data
    paused = client.post(f"{URL}{shift['id']}/pause/", {"comment": "wait for the demo"}, format="json")
    assert paused.status_code == 200 and paused.data["phase"] == ShiftPhase.PAUSED
    assert client.post(f"{URL}{shift['id']}/pause/").status_code == 409
    assert client.post(f"{URL}{shift['id']}/approve/").status_code == 409  # no step waits
    assert client.post(f"{URL}{shift['id']}/resume/").data["phase"] == ShiftPhase.PENDING
    rolled = client.post(f"{URL}{shift['id']}/rollback/", {"comment": "not today"}, format="json")
    assert rolled.status_code == 200 and rolled.data["phase"] == ShiftPhase.ROLLED_BACK
    assert client.post(f"{URL}{shift['id']}/rollback/").status_code == 409
    assert [event["to_phase"] for event in client.get(f"{URL}{shift['id']}/").data["events"]] == [
        "pending", "paused", "pending", "rolled_back"]


def test_outsiders_and_viewers_cannot_move_traffic(alice: User, charlie: User, pools, ml_team: Team) -> None:  # noqa: ANN001, F811
    shift = token_client(alice).post(URL, _payload(pools), format="json").data
    outsider = token_client(charlie)
    assert outsider.get(f"{URL}{shift['id']}/").status_code == 404
    assert outsider.post(f"{URL}{shift['id']}/rollback/").status_code == 404
    refused = outsider.post(URL, _payload(pools), format="json")
    assert refused.status_code == 400 and "from_pool" in refused.data  # it cannot see the pools
    viewer = User.objects.create_user("victor", password="pw-victor")
    Membership.objects.create(user=viewer, team=ml_team, role=Role.VIEWER)
    watching = token_client(viewer)
    assert watching.get(f"{URL}{shift['id']}/").status_code == 200
    assert watching.post(f"{URL}{shift['id']}/rollback/").status_code == 403
    assert watching.post(URL, _payload(pools, steps=[100]), format="json").status_code == 403
    assert TrafficShift.objects.get(pk=shift["id"]).phase == ShiftPhase.PENDING


def test_the_schema_documents_the_shift_actions(alice: User) -> None:
    schema = token_client(alice).get("/api/schema/?format=json").json()
    for verb in ("pause", "resume", "rollback", "approve"):
        assert f"/api/v1/shifts/{{id}}/{verb}/" in schema["paths"]
    assert "post" in schema["paths"]["/api/v1/shifts/"]


def test_pools_in_a_cluster_no_longer_shared_with_their_team_cannot_shift(alice: User, pools,  # noqa: ANN001, F811
                                                                          search_team: Team) -> None:  # noqa: F811
    Cluster.objects.filter(pk=pools[0].cluster_id).update(team=search_team)
    response = token_client(alice).post(URL, _payload(pools), format="json")
    assert response.status_code == 403 and "not shared with team ML Platform" in str(response.data)
    assert not TrafficShift.objects.exists()
