"""Notifications for traffic moves (incidents/traffic_notify.py): fallback entries and exits, breaker trips and
resets, shift completions and rollbacks reach the teams' channels once each, as plain sentences, through the
outbox (a local receiver stands in for Slack)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import Pool
from incidents import tasks, traffic_notify
from incidents.choices import ChannelKind, NotificationKind, NotificationState
from incidents.models import Channel, Notification
from scaling import breakers, fallbacks, traffic
from scaling.choices import FallbackPhase, ShiftPhase
from scaling.engine.breakers import WindowCounts
from scaling.models import BreakerTransition, FallbackEvent, TrafficShiftEvent

from tests.core.conftest import alice, bob, search_pool, search_team  # noqa: F401
from tests.incidents.conftest import Receiver
from tests.scaling.test_fallbacks import feed, policy  # noqa: F401
from tests.scaling.test_traffic import observe, pools, sandbox  # noqa: F401

HOOK = "/services/T1/B1/hook"


def posted(receiver: Receiver) -> list[str]:
    return [request.json()["text"] for request in receiver.at(HOOK)]


class Pods:
    """A cluster driver with two pods and labels in memory: the breakers' reconcile needs nothing more."""

    def __init__(self) -> None:
        self.routable = {"chat-0": True, "chat-1": True}

    def endpoints(self, workload) -> dict[str, bool]:  # noqa: ANN001
        return dict(self.routable)

    def set_routable(self, namespace: str, pod: str, routable: bool) -> None:
        self.routable[pod] = routable


def test_a_fallback_entry_and_its_return_are_posted_once(sandbox, pools, policy, slack_channel: Channel,  # noqa: ANN001, F811
                                                         receiver: Receiver, search_team) -> None:  # noqa: ANN001, F811
    other = Channel.objects.create(team=search_team, name="theirs", kind=ChannelKind.SLACK,
                                   settings={"webhook_url": receiver.url("/services/T2/B2/other")})
    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    fallbacks.tick(policy.pk, now=now)
    tasks.sweep_outbox()  # the beat's safety net: fans out and delivers
    [entered] = posted(receiver)
    assert entered.startswith("Pool chat-8b fell back: 58 % of its route now goes to its fallback pool chat-8b-warm. "
                              "Why: at its maximum of 1 replicas")
    assert "{" not in entered and "_" not in entered.split("Why")[0]  # a sentence, not a dump
    # Fanned out once: the next sweeps send nothing more, whatever runs them.
    tasks.sweep_outbox()
    tasks.dispatch_traffic_events()
    assert len(posted(receiver)) == 1 and not FallbackEvent.objects.filter(notified_at__isnull=True).exists()
    # Calm and capacity: the return starts and ends; each is one message, the writes in between none.
    for _ in range(20):
        now += timedelta(seconds=15)
        feed(pools, now, primary_rps=30.0, ttft_s=0.2)
        activation = fallbacks.tick(policy.pk, now=now)
        if activation.phase == FallbackPhase.RESTORED:
            break
    tasks.sweep_outbox()
    _, returning, restored = posted(receiver)
    assert returning.startswith("Pool chat-8b is taking its traffic back from its fallback pool chat-8b-warm in "
                                "steps; 29 % still goes there.")
    assert restored == (f"All of pool chat-8b's traffic is back on it: its fallback pool chat-8b-warm carries none "
                        f"(fallback #{activation.pk} ended).")
    assert receiver.at("/services/T2/B2/other") == [] and not other.notifications.exists()  # another team's
    assert set(Notification.objects.values_list("kind", "state")) == {(NotificationKind.MESSAGE,
                                                                      NotificationState.DELIVERED)}


def test_a_fallback_that_stepped_back_from_a_route_edited_by_hand_is_posted(sandbox, pools, policy,  # noqa: ANN001, F811
                                                                           slack_channel: Channel,
                                                                           receiver: Receiver) -> None:
    from sandbox.kube import resources as res
    from tests.scaling.test_traffic import NS, ROUTE

    now = timezone.now()
    feed(pools, now, primary_rps=100.0, ttft_s=2.0)
    fallbacks.tick(policy.pk, now=now)

    def by_hand(route: dict) -> dict:
        route["spec"]["rules"][0]["backendRefs"][0]["weight"] = 70
        route["spec"]["rules"][0]["backendRefs"][1]["weight"] = 30
        return route

    sandbox[0].store.update(res.HTTPROUTES, NS, ROUTE, by_hand)
    feed(pools, now + timedelta(seconds=15), primary_rps=84.0, fallback_rps=116.0, ttft_s=3.0)
    fallbacks.tick(policy.pk, now=now + timedelta(seconds=15))
    tasks.sweep_outbox()

    _, failed = posted(receiver)
    assert failed.startswith("The fallback of pool chat-8b stopped, and its route is left as it is now: check its "
                             "weights between chat-8b and chat-8b-warm. Why: the route changed under the fallback "
                             "(someone else wrote its weights)"), failed


def test_breaker_trips_and_resets_are_posted_and_probes_are_not(pool: Pool, slack_channel: Channel,  # noqa: F811
                                                                receiver: Receiver) -> None:
    driver, now = Pods(), timezone.now()
    breakers.evaluate(pool, {"chat-0": WindowCounts(200, 30), "chat-1": WindowCounts(200, 0)}, now, driver)
    now += timedelta(seconds=31)
    breakers.evaluate(pool, {}, now, driver)  # half-open: probing
    now += timedelta(seconds=15)
    breakers.evaluate(pool, {"chat-0": WindowCounts(4, 1)}, now, driver)  # a probe fails: open again
    now += timedelta(seconds=31)
    breakers.evaluate(pool, {}, now, driver)
    now += timedelta(seconds=15)
    breakers.evaluate(pool, {"chat-0": WindowCounts(10, 0), "chat-1": WindowCounts(200, 0)}, now, driver)
    assert BreakerTransition.objects.filter(breaker__endpoint="chat-0").count() == 5
    for notification_id in traffic_notify.fan_out():
        tasks.deliver_notification(notification_id)
    messages = posted(receiver)
    endpoint = [text for text in messages if "endpoint chat-0" in text]
    assert len(endpoint) == 2, messages  # one trip, one reset: the probes and the failed probe say nothing
    assert endpoint[0].startswith(f"The circuit breaker of endpoint chat-0 of pool {pool.name} tripped: "
                                  "30 of 200 requests failed (15.00%)")
    assert endpoint[0].endswith("The endpoint is out of the route until probes succeed.")
    assert endpoint[1] == (f"The circuit breaker of endpoint chat-0 of pool {pool.name} reset: 10 probes succeeded. "
                           "The endpoint is back in the route.")
    assert any(text.startswith(f"The circuit breaker of pool {pool.name} tripped") for text in messages)
    assert traffic_notify.fan_out() == []


def test_a_person_forcing_a_breaker_and_quiet_rules(pool: Pool, slack_channel: Channel, receiver: Receiver,  # noqa: F811
                                                    alice: User) -> None:  # noqa: F811
    Channel.objects.filter(pk=slack_channel.pk).update(settings=slack_channel.settings | {
        "quiet": [{"tiers": [pool.priority]}]})
    breakers.evaluate(pool, {"chat-0": WindowCounts(10, 0)}, timezone.now(), Pods())
    breaker = pool.breakers.get(endpoint="chat-0")
    breakers.force(breaker.pk, "open", core.Actor(alice, ActorChannel.API), "draining the node", Pods())
    assert traffic_notify.fan_out() == []  # the channel's quiet rule holds it back, as it does a new proposal
    held = Notification.objects.get()
    assert held.state == NotificationState.SKIPPED and held.last_error
    assert held.text.startswith(f"The circuit breaker of endpoint chat-0 of pool {pool.name} was opened by alice: "
                                "draining the node.")


def test_the_system_breaker_is_posted_to_every_team(pool: Pool, search_pool: Pool, slack_channel: Channel,  # noqa: F811
                                                    receiver: Receiver) -> None:
    theirs = Channel.objects.create(team=search_pool.team, name="theirs", kind=ChannelKind.WEBHOOK,
                                    settings={"url": receiver.url("/theirs")})
    breakers.evaluate_system(WindowCounts(10_000, 100))
    created = traffic_notify.fan_out()
    assert {Notification.objects.get(pk=pk).channel_id for pk in created} == {slack_channel.pk, theirs.pk}
    assert Notification.objects.first().text.startswith("The system circuit breaker (errors across every pool) "
                                                        "tripped: 100 of 10000 requests failed")


def test_a_worker_dying_mid_fan_out_leaves_every_event_to_the_next_sweep(pool: Pool, slack_channel: Channel,  # noqa: F811
                                                                         monkeypatch) -> None:  # noqa: ANN001
    breakers.evaluate(pool, {"chat-0": WindowCounts(200, 30), "chat-1": WindowCounts(200, 30)}, timezone.now(), Pods())
    calls = []
    real = traffic_notify._enqueue

    def dies_on_the_second(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == 2:
            raise SystemExit("worker killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(traffic_notify, "_enqueue", dies_on_the_second)
    with pytest.raises(SystemExit):
        traffic_notify.fan_out()
    # The transaction died with it: no message half-written, no event marked.
    assert not Notification.objects.exists() and not BreakerTransition.objects.filter(notified_at__isnull=False).exists()
    monkeypatch.setattr(traffic_notify, "_enqueue", real)
    assert len(traffic_notify.fan_out()) == 3  # two endpoints and the pool: each once
    assert traffic_notify.fan_out() == [] and Notification.objects.count() == 3


def test_a_shift_completing_and_one_rolled_back_are_posted(sandbox, pools, slack_channel: Channel,  # noqa: ANN001, F811
                                                           receiver: Receiver, alice: User) -> None:  # noqa: F811
    kube, gateway = sandbox
    person = core.Actor(alice, ActorChannel.API)
    undone = traffic.start(pools[0], pools[1], person)
    traffic.rollback(undone.pk, person, "wrong pool")
    shift = traffic.start(pools[0], pools[1], person, hold_s=15, max_p95_s=2.0)
    now = timezone.now()
    for _ in range(12):
        observe(kube, gateway, pools, now)
        shift = traffic.tick(shift.pk, now=now)
        if shift.phase == ShiftPhase.COMPLETED:
            break
        now += timedelta(seconds=15)
    assert shift.phase == ShiftPhase.COMPLETED
    for notification_id in traffic_notify.fan_out():
        tasks.deliver_notification(notification_id)
    assert posted(receiver) == [
        f"Traffic shift #{undone.pk} from pool chat-8b to pool chat-8b-warm (route sandbox-route) was rolled back by "
        "alice: wrong pool.",
        f"Traffic shift #{shift.pk} from pool chat-8b to pool chat-8b-warm (route sandbox-route) completed: pool "
        "chat-8b-warm carries 100 % of the pair's traffic.",
    ]
    assert not TrafficShiftEvent.objects.filter(notified_at__isnull=True).exists()


def test_the_channels_page_shows_the_sentence(pool: Pool, slack_channel: Channel, bob: User, client) -> None:  # noqa: ANN001, F811
    breakers.evaluate(pool, {"chat-0": WindowCounts(200, 30), "chat-1": WindowCounts(200, 0)}, timezone.now(), Pods())
    traffic_notify.fan_out()
    client.force_login(bob)
    page = client.get(reverse("incidents:channels")).content.decode()
    assert "The circuit breaker of endpoint chat-0 of pool" in page and "Message from a playbook step" not in page


def test_the_sentences_for_a_gate_and_a_failure() -> None:
    from scaling.models import TrafficShift

    giving, receiving = Pool(name="chat-8b"), Pool(name="chat-8b-warm")
    shift = TrafficShift(pk=9, from_pool=giving, to_pool=receiving, route_name="r", steps=[80, 95, 100],
                         current_weights={"chat-8b": 20, "chat-8b-warm": 80})
    gate = TrafficShiftEvent(shift=shift, from_phase=ShiftPhase.HOLDING, to_phase=ShiftPhase.WAITING_APPROVAL, step=1)
    assert traffic_notify.shift_text(gate) == ("Traffic shift #9 from pool chat-8b to pool chat-8b-warm (route r) waits "
                                               "for an operator's approval before step 2 (95 % to chat-8b-warm).")
    failed = TrafficShiftEvent(shift=shift, from_phase=ShiftPhase.STEPPING, to_phase=ShiftPhase.FAILED, step=2,
                               comment="the route changed under the shift: nothing written")
    assert traffic_notify.shift_text(failed).endswith("failed and moves no more traffic: the route changed under the "
                                                      "shift: nothing written. Headroom last confirmed the route at "
                                                      "chat-8b 20, chat-8b-warm 80: check its weights.")
    holding = TrafficShiftEvent(shift=shift, from_phase=ShiftPhase.STEPPING, to_phase=ShiftPhase.HOLDING, step=2)
    assert traffic_notify.shift_text(holding) is None  # each step is on the shift's card, not in the channel


def test_a_persons_comment_cannot_ping_the_channel_or_hide_a_link(pool: Pool, slack_channel: Channel,  # noqa: F811
                                                                  receiver: Receiver, alice: User) -> None:  # noqa: F811
    # The sentence is plain text: mrkdwn's control characters in a comment reach Slack escaped, so
    # `<!channel>` pings nobody and `<https://…|click>` shows as typed, not as a link named "click".
    breakers.evaluate(pool, {"chat-0": WindowCounts(10, 0)}, timezone.now(), Pods())
    breaker = pool.breakers.get(endpoint="chat-0")
    breakers.force(breaker.pk, "open", core.Actor(alice, ActorChannel.API),
                   "<!channel> see <https://evil.example/login|the runbook> & co", Pods())
    for notification_id in traffic_notify.fan_out():
        tasks.deliver_notification(notification_id)
    [text] = posted(receiver)
    assert "<" not in text and ">" not in text
    assert "&lt;!channel&gt; see &lt;https://evil.example/login|the runbook&gt; &amp; co" in text
    assert Notification.objects.get().text.endswith("& co. The endpoint is out of the route until probes succeed.")
