"""Two API rules the reports and fallback-policy endpoints had escaped: the JSON nesting limit (a deep body
was a 500, RecursionError) and the rule that a pool in a cluster no longer shared with its team cannot be
changed (a fallback policy was still created)."""
from __future__ import annotations

from django.contrib.auth.models import User
from rest_framework.test import APIClient

from controlplane.models import Cluster, Pool, Team
from scaling.models import FallbackPolicy

from tests.core.conftest import token_client


def test_a_deep_body_on_reports_is_a_400(alice: User, pool: Pool) -> None:
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(alice)
    depth = 100_000
    assert client.post("/api/v1/reports/", "[" * depth + "]" * depth, content_type="application/json").status_code == 400
    nested: dict = {}
    for _ in range(40):
        nested = {"a": nested}
    assert client.post("/api/v1/reports/", {"pool": pool.pk, "extra": nested}, format="json").status_code == 400


def test_a_fallback_policy_follows_the_cluster_rule(charlie: User, cluster: Cluster, search_team: Team) -> None:
    cluster.shared_with.add(search_team)
    theirs = Pool.objects.create(cluster=cluster, team=search_team, name="rerank", namespace="search",
                                 deployment="vllm-rerank", model_name="m", gpu_type="L4")
    small = Pool.objects.create(cluster=cluster, team=search_team, name="rerank-small", namespace="search",
                                deployment="vllm-rerank-small", model_name="m", gpu_type="L4")
    Pool.objects.filter(pk=theirs.pk).update(fallback_pool=small)
    cluster.shared_with.remove(search_team)  # the share is revoked
    answer = token_client(charlie).post("/api/v1/fallback-policies/", {"pool": theirs.pk, "enabled": True}, format="json")
    assert answer.status_code == 403 and not FallbackPolicy.objects.exists()  # as an SLO of the pool
