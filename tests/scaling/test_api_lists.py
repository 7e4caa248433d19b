"""The proposals list is compact (issue 18, load): no signal snapshot, evidence or events per row; the
proposal itself carries them all. Both answers match the OpenAPI schema's two serializers."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from scaling import services
from scaling.api.serializers import ProposalListSerializer, ProposalSerializer
from scaling.choices import ProposalKind
from scaling.models import Proposal
from tests.core.conftest import token_client

HEAVY = {"signals", "evidence", "events"}


def _proposal(pool: Pool, user: User) -> Proposal:
    proposal = services.propose(pool, 4, ProposalKind.PRESCALE, core.Actor(user, Channel.API), current=1,
                                reasons=[{"code": "forecast", "detail": "peak in 30 min"}])
    Proposal.objects.filter(pk=proposal.pk).update(signals={"queue_depth": 12.0},
                                                   evidence={"recent_rps": [1.0] * 60})
    return proposal


def test_the_list_leaves_out_signals_evidence_and_events_and_the_proposal_has_them(pool: Pool, alice: User) -> None:
    proposal = _proposal(pool, alice)
    client = token_client(alice)
    row = client.get("/api/v1/proposals/").data["results"][0]
    assert row["id"] == proposal.pk and not HEAVY & set(row)
    assert row["reasons"] == [{"code": "forecast", "detail": "peak in 30 min"}] and row["state"] == "pending"
    assert set(row) == set(ProposalSerializer.Meta.fields) - HEAVY
    full = client.get(f"/api/v1/proposals/{proposal.pk}/").data
    assert full["signals"] == {"queue_depth": 12.0} and len(full["evidence"]["recent_rps"]) == 60
    assert [event["to_state"] for event in full["events"]] == ["pending"]


def test_the_list_neither_reads_the_json_snapshots_nor_the_events(pool: Pool, alice: User) -> None:
    _proposal(pool, alice)
    services.propose(pool, 5, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1)
    client = token_client(alice)
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/api/v1/proposals/").data["count"] == 2
    reads = " ".join(query["sql"] for query in captured.captured_queries)
    assert '"evidence"' not in reads and '"signals"' not in reads and "scaling_proposalevent" not in reads


def test_the_schema_names_the_compact_serializer_for_the_list() -> None:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    listed = schema["paths"]["/api/v1/proposals/"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    page = schema["components"]["schemas"][listed["$ref"].rsplit("/", 1)[1]]
    item = schema["components"]["schemas"][page["properties"]["results"]["items"]["$ref"].rsplit("/", 1)[1]]
    assert not HEAVY & set(item["properties"]) and set(item["properties"]) == set(ProposalListSerializer.Meta.fields)
    one = schema["paths"]["/api/v1/proposals/{id}/"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert HEAVY <= set(schema["components"]["schemas"][one["$ref"].rsplit("/", 1)[1]]["properties"])
