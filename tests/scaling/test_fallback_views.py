"""The pool page's fallback card: an operator restores a fallback (or approves or rejects an entry waiting for a
person) from the page, as through the API; a viewer sees the state without the buttons and is refused a POST.
The route lives in the sandbox's Kubernetes API emulator."""
from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel, Role
from controlplane.models import AuditEvent, Membership, Team
from scaling import fallbacks
from scaling.choices import FallbackPhase
from scaling.models import FallbackActivation, FallbackPolicy

from tests.core.conftest import alice, bob, charlie, cluster, ml_team, search_team  # noqa: F401
from tests.scaling.test_fallbacks import feed, policy  # noqa: F401
from tests.scaling.test_traffic import GIVING, RECEIVING, _weights, pools, sandbox  # noqa: F401


def _signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_operator_restores_a_forced_fallback_from_the_pool_page(alice: User, sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    fallbacks.activate(pools[0], 0.25, core.Actor(alice, Channel.API), "drill")
    assert _weights(sandbox[0]) == {GIVING: 75, RECEIVING: 25}
    client = _signed_in(alice)
    page = client.get(f"/pools/{pools[0].pk}/").content.decode()
    assert "held until a person restores it" in page and 'id="fallback-restore"' in page
    answer = client.post(f"/pools/{pools[0].pk}/fallback/restore/", {"comment": "surge over"}, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200 and 'id="fallback-phase"' not in answer.content.decode()  # no longer open
    assert "Not active" in answer.content.decode()
    assert _weights(sandbox[0]) == {GIVING: 100, RECEIVING: 0}
    activation = FallbackActivation.objects.get()
    assert activation.phase == FallbackPhase.RESTORED and activation.events.get(kind="restore").comment == "surge over"
    assert AuditEvent.objects.filter(action="fallback-restore", actor_name="alice", channel=Channel.WEB).exists()
    again = client.post(f"/pools/{pools[0].pk}/fallback/restore/", HTTP_HX_REQUEST="true")
    assert again.status_code == 409 and "nothing to restore" in again.content.decode()


def test_an_entry_waiting_for_a_person_is_approved_or_rejected_there(alice: User, sandbox, pools, policy) -> None:  # noqa: ANN001, F811
    FallbackPolicy.objects.filter(pk=policy.pk).update(requires_approval=True)
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    waiting = fallbacks.tick(policy.pk, now=now)
    assert waiting.phase == FallbackPhase.WAITING_APPROVAL
    client = _signed_in(alice)
    page = client.get(f"/pools/{pools[0].pk}/").content.decode()
    assert 'id="fallback-approve"' in page and ">Reject</button>" in page
    answer = client.post(f"/pools/{pools[0].pk}/fallback/approve/", HTTP_HX_REQUEST="true")
    assert answer.status_code == 200 and 'autofocus' in answer.content.decode()
    waiting.refresh_from_db()
    assert waiting.phase == FallbackPhase.ACTIVE and _weights(sandbox[0])[RECEIVING] > 0


def test_a_viewer_sees_no_buttons_and_is_refused(alice: User, sandbox, pools, policy, ml_team: Team) -> None:  # noqa: ANN001, F811
    fallbacks.activate(pools[0], 0.25, core.Actor(alice, Channel.API), "drill")
    viewer = User.objects.create_user("vera")
    Membership.objects.create(user=viewer, team=ml_team, role=Role.VIEWER)
    client = _signed_in(viewer)
    page = client.get(f"/pools/{pools[0].pk}/").content.decode()
    assert "held until a person restores it" in page and 'id="fallback-restore"' not in page
    refused = client.post(f"/pools/{pools[0].pk}/fallback/restore/", HTTP_HX_REQUEST="true")
    assert refused.status_code == 403
    assert FallbackActivation.objects.get().phase == FallbackPhase.ACTIVE and _weights(sandbox[0])[RECEIVING] == 25
