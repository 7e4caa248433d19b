"""The whole story against the Kubernetes API emulator: post, approve from Slack, execute, Ready,
the one message edited in place at each step."""
from __future__ import annotations

from django.contrib.auth.models import User

from controlplane.models import Pool
from sandbox.replica import wait_until
from scaling import tasks as scaling_tasks
from scaling.choices import ProposalState
from scaling.models import Proposal

from tests.incidents.conftest import Receiver, click_payload, link, propose, signed_post
from tests.scaling.conftest import kube, kube_pool  # noqa: F401

RESPONSE = "/actions/T1/story"


def test_approve_in_slack_then_watch_the_message_follow_execution_to_ready(
    client, kube_pool: Pool, alice: User, bob: User, slack_channel, receiver: Receiver,  # noqa: ANN001, F811
    django_capture_on_commit_callbacks,  # noqa: ANN001
) -> None:
    link(bob, "UBOB")
    with django_capture_on_commit_callbacks(execute=True):
        proposal = propose(kube_pool, alice, target=3)
        assert signed_post(client, click_payload(proposal, slack_channel, "UBOB", receiver.url(RESPONSE))).status_code == 200

    def ready() -> bool:
        with django_capture_on_commit_callbacks(execute=True):
            scaling_tasks.advance_executions()
        return Proposal.objects.get(pk=proposal.pk).state == ProposalState.SUCCEEDED

    assert wait_until(ready, timeout=15, interval=0.2)
    edits = [request.json()["blocks"][2]["elements"][0]["text"] for request in receiver.at(RESPONSE)]
    assert edits[0].startswith("✅ Approved by *bob* via slack")
    assert any(edit.startswith("⚙️ Executing") for edit in edits)
    assert edits[-1].startswith("🟢 Ready: 3 replicas after") and "approved by *bob*" in edits[-1]
    assert len(edits) <= 5  # Slack allows five edits per response_url
