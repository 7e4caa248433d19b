"""The demos' in-process beat does what the production beat does every 15 s, for the sandbox cluster only."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from controlplane.models import Cluster, Pool, Team
from sandbox import beat
from sandbox.registration import CLUSTER_NAME


@pytest.mark.django_db
def test_a_round_ticks_the_sandbox_pools_and_moves_shifts_fallbacks_and_breakers(monkeypatch) -> None:  # noqa: ANN001
    from scaling import loop, tasks

    team = Team.objects.create(slug="ml", name="ML")
    sandbox = Cluster.objects.create(name=CLUSTER_NAME, team=team, kube_api_url="http://127.0.0.1:1")
    other = Cluster.objects.create(name="inventory", team=team, kube_api_url="http://127.0.0.1:2")
    for cluster in (sandbox, other):
        Pool.objects.create(cluster=cluster, team=team, name=f"chat-{cluster.name}", namespace="ns", deployment="d",
                            model_name="m", gpu_type="H100", min_replicas=1, max_replicas=4)
    calls: list[str] = []
    for name in ("advance_executions", "advance_shifts", "advance_fallbacks", "evaluate_breakers", "expire_proposals",
                 "retake_stalled_reports"):
        monkeypatch.setattr(tasks, name, lambda name=name: calls.append(name))

    def tick(pools):  # noqa: ANN001, ANN202
        calls.append("tick " + ",".join(pool.name for pool in pools))
        return SimpleNamespace(pools=[SimpleNamespace(pool="sandbox/chat-sandbox", did=["proposal #1 reactive 1 → 2"])])

    monkeypatch.setattr(loop, "tick", tick)
    said: list[str] = []
    beat.run_once(said.append)
    assert calls == ["advance_executions", "tick chat-sandbox", "advance_shifts", "advance_fallbacks",
                     "evaluate_breakers", "expire_proposals", "retake_stalled_reports"]
    assert said == ["[loop] sandbox/chat-sandbox: proposal #1 reactive 1 → 2"]
