"""The README's demo story in a real browser (Debian's Chromium, the live server), step by step, asserting
what the README says the user sees: the fleet page; a pool page mid-surge (readings against objectives,
replicas ready and arriving, a scale-up executing); the approvals inbox with the surge's excess over the
guardrail and the pending pre-scale, which alice approves; the incident the surge opened; a finished
warm-pool report.

The surge goes through the real services: replicas are read from the sandbox's Kubernetes API emulator,
each 15-second tick runs the control loop's `tick_pool` on the surge's signals (as Prometheus would have
read them) and then the alert rules, so the samples, the planner's decision, the scale-ups (approved
by policy and applied to the emulator) and the incident are the ones the product makes. The pre-scale is
proposed through `scaling.services.propose` with the loop's own wording (a forecast needs a day of history).

Its screenshots (readme-*.png) show these pages with fixed, scripted figures, for a reviewer; the README's
come from test_demo_story.py, which plays the live demo's story. They are written to a temporary folder
unless SAVE_SCREENSHOTS=1 is set (then docs/img/, not committed), so a test run leaves the tree clean:

    SAVE_SCREENSHOTS=1 DATABASE_URL=postgres://postgres@127.0.0.1:5432/headroom \
        .venv/bin/pytest -q -p no:cacheprovider tests/browser/test_readme_story.py
"""
from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Cluster, Pool
from incidents.alerts import evaluate_alerts
from incidents.models import Incident
from sandbox.fleet import Fleet
from sandbox.kube.cluster import PoolSpec, SandboxCluster
from scaling import loop, report_service, services
from scaling.choices import ProposalKind, ProposalState, ReportState
from scaling.engine.signals import Reading
from scaling.models import Proposal, SignalSample
from scaling.sim.profiles import get_profile

from tests.browser.test_approval_flow import _log_in, page  # noqa: F401
from tests.core.conftest import alice, cluster, ml_team, pool  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
NS = "inference"
TICK = timedelta(seconds=15)
MAX_REPLICAS = 24
HISTORY_HOURS = 4.0  # traffic before the surge: what the warm-pool report replays


@pytest.fixture
def kube_pool(pool: Pool, cluster: Cluster, settings) -> Iterator[Pool]:  # noqa: ANN001, F811
    """chat-8b in the sandbox's Kubernetes API: 2 replicas ready; replicas added later stay starting (the
    surge is caught mid-way, its scale-up still arriving)."""
    profile = dataclasses.replace(get_profile("llama-3.1-8b-h100"), model="tiny", max_num_seqs=2)
    spec = PoolSpec(name="vllm-chat-8b", profile=profile, namespace=NS, replicas=2, cold_start_s=0.2,
                    max_replicas=MAX_REPLICAS)
    with Fleet() as fleet, SandboxCluster(fleet, route_namespace=NS) as kube:
        kube.add_pool(spec)
        deadline = time.monotonic() + 30
        while len(kube.ready_replicas(NS, spec.name)) < 2:
            assert time.monotonic() < deadline, "the sandbox's first 2 replicas never became ready"
            time.sleep(0.1)
        with kube._lock:  # new pods from now on take an hour of model time to start
            kube.pools[(NS, spec.name)] = dataclasses.replace(spec, cold_start_s=3600)
        settings.KUBERNETES_ENABLED = True
        settings.PROMETHEUS_ENABLED = False  # the surge's signals are given below, as Prometheus would read them
        Cluster.objects.filter(pk=cluster.pk).update(kube_api_url=kube.url)
        # This team keeps the guardrail at the step alone (+4; the default also allows doubling the pool),
        # so the surge's larger steps wait for a person: the story shows the guardrail's share.
        Pool.objects.filter(pk=pool.pk).update(max_replicas=MAX_REPLICAS, replica_capacity_rps=5.0,
                                               approval_policy={"reactive_max_percent": None})
        yield Pool.objects.select_related("cluster", "team").get(pk=pool.pk)


def _quiet_history(pool: Pool, end) -> None:  # noqa: ANN001
    """4 hours of the loop's samples before the surge: 4 to 10 req/s, with a 3-minute burst to about 23 req/s
    every 40 minutes (what a warm pool is for), TTFT inside its SLO. It ends at the surge's 7 req/s: a
    jump from the history's last rate to the surge's first would read as a ramp (the rate term's growth)."""
    ticks = int(HISTORY_HOURS * 240)
    rows = []
    for tick in range(ticks):
        burst = 16.0 if tick % 160 in range(100, 112) else 0.0
        rate = 7 + 3 * math.sin(2 * math.pi * (tick - ticks) / 360) + burst
        rows.append(SignalSample(pool=pool, at=end - TICK * (ticks - tick), request_rate_rps=rate,
                                 queue_depth=burst, ttft_p95_s=0.32 + burst / 20, e2e_p95_s=2.1, ready_replicas=2,
                                 desired_replicas=2, target_replicas=2))
    SignalSample.objects.bulk_create(rows)


def _surge_signals(minute: float) -> dict[str, Reading]:
    """The surge, `minute` minutes in: 7 req/s until minute 6, then 5x within 30 s; queue and TTFT follow."""
    surge = max(0.0, min(1.0, (minute - 6) * 2))
    fresh = lambda value: Reading(value, 5.0)  # noqa: E731 - read 5 s ago
    return {"request_rate_rps": fresh(7 + 28 * surge), "queue_depth": fresh(2 + 38 * surge),
            "ttft_p95_s": fresh(0.32 + 2.2 * surge), "ttft_p99_s": fresh(0.5 + 3.0 * surge),
            "e2e_p95_s": fresh(2.1 + 6 * surge), "running_requests": fresh(8 + 24 * surge),
            "kv_cache_usage": fresh(0.35 + 0.55 * surge), "error_rate": fresh(0.001)}


def _run_the_surge(pool: Pool, start, minutes: int = 10) -> None:  # noqa: ANN001
    """The control loop's ticks through the surge, each followed by the alert rules, like the worker.

    Django's clock is set to each tick's time, so the rows the services stamp themselves (proposals and
    their events, the audit log) carry the tick's time, as they would have live."""
    for number in range(minutes * 4):
        now = start + TICK * number
        with pytest.MonkeyPatch.context() as clock:
            clock.setattr(timezone, "now", lambda now=now: now)
            _tick(pool, now, number / 4)


def _tick(pool: Pool, now, minute: float) -> None:  # noqa: ANN001
    """One tick: replicas from the cluster, load and latency from the surge, the decision, the alert rules."""
    signals, errors = loop.read_cluster(pool.cluster, [pool], now)
    assert not [e for e in errors if "kubernetes" in e], errors
    tick = loop.tick_pool(pool, dataclasses.replace(signals[pool.pk], **_surge_signals(minute)), now)
    evaluate_alerts([pool], now)
    assert not any(line.startswith("no proposal") for line in tick.did), tick.did


def _prescale(pool: Pool) -> Proposal:
    """The pre-scale for the forecast peak, worded as the loop words it; it waits for a person."""
    current = services.current_replicas(pool)
    proposal = services.propose(
        # The protocol's numbers (3x the current rate; warm pool 21 + 50 % is 32, capped by the pool's maximum, 24).
        pool, 24, ProposalKind.PRESCALE, core.Actor(None, Channel.AUTO), current=current,
        reasons=[{"code": "PreScaleProposed", "detail": "forecast peak 105.00 req/s is 3.0x the current 35.00 req/s "
                                                        "within 30 min: warm pool 21 + 50 % buffer"}],
        evidence={"forecast_expected": [50, 80, 105], "forecast_p90": [60, 95, 120], "capacity": [40, 40, 40]})
    assert proposal.state == ProposalState.PENDING
    return proposal


def test_the_readme_story(page, kube_pool: Pool, alice: User, screenshots: Path) -> None:  # noqa: ANN001, F811
    pool = kube_pool
    _quiet_history(pool, timezone.now().replace(microsecond=0) - timedelta(minutes=10))
    # A report on the traffic before the surge (a few seconds): run first, so that the pages below are
    # opened right after the surge's last tick and read it as fresh.
    report = report_service.request_report(pool, core.Actor(alice, Channel.WEB), days=HISTORY_HOURS / 24 - 0.01,
                                           sizes_pct=(0, 40, 80), peak_basis="day-peak", enqueue=False)
    report = report_service.run(report.pk)
    assert report.state == ReportState.SUCCEEDED, report.error
    _run_the_surge(pool, timezone.now().replace(microsecond=0) - timedelta(minutes=10))  # the last tick 15 s ago
    # The loop's scale-ups (reactive, or predictive: the next cold start's forecast). Inside the guardrail
    # (+4 replicas) policy approves them and they are written to the cluster, their replicas still starting;
    # a larger one runs the guardrail's share at once and the rest waits for a person.
    scale_ups = list(Proposal.objects.filter(pool=pool).order_by("created_at"))
    assert scale_ups and {p.kind for p in scale_ups} <= {ProposalKind.REACTIVE, ProposalKind.PREDICTIVE}
    assert all(p.target_replicas > p.current_replicas for p in scale_ups)
    executing = [p for p in scale_ups if p.state == ProposalState.EXECUTING]
    assert executing and all(p.decided_channel == Channel.AUTO and p.delta <= 4 for p in executing)
    scale_up = executing[-1]
    # The surge grows 5x in 30 s: the rate term plans for its growth over a cold start, past the guardrail.
    excess = Proposal.objects.get(pool=pool, state=ProposalState.PENDING)
    assert excess.target_replicas > scale_up.target_replicas == excess.current_replicas + 4
    assert any(r["code"] == "guardrail_share" and r.get("share") == scale_up.pk for r in excess.reasons)
    pool.status.refresh_from_db()
    assert pool.status.ready_replicas == 2 and pool.status.arriving_replicas > 0
    incident = Incident.objects.get(pool=pool)
    prescale = _prescale(pool)

    page.set_viewport_size({"width": 1280, "height": 800})
    _log_in(page, "alice")
    page.wait_for_url(page.base_url + "/")

    # 1. The fleet: each pool with its readings against the objective and what waits for a person.
    row = page.locator("#fleet-table tbody tr", has_text="chat-8b")
    expect(row).to_contain_text("TTFT p95")
    expect(row.locator(".reading.bad").first).to_be_visible()  # 2.5 s against ≤ 1 s
    expect(row).to_contain_text("↑ worse")
    expect(row).to_contain_text(re.compile(r"2 / \d+ / \d+"))  # ready / arriving / desired
    expect(row).to_contain_text("waiting for approval since")
    page.screenshot(path=str(screenshots / "readme-fleet.png"), full_page=True)

    # 2. The pool mid-surge: readings, replicas ready and arriving, the scale-up executing, the pre-scale waiting.
    row.get_by_role("link", name="chat-8b").click()
    page.wait_for_url(page.base_url + f"/pools/{pool.pk}/")
    live = page.locator("#pool-live")
    expect(live.locator(".replicas")).to_contain_text("2 ready")
    expect(live.locator(".replicas")).to_contain_text(f"{pool.status.arriving_replicas} arriving")
    expect(live).to_contain_text("TTFT p95")
    expect(live).to_contain_text("Planner: target")
    expect(live.locator("svg")).to_have_count(2)  # demand against capacity, the queue
    expect(page.locator(f"#decision-{scale_up.pk} .badge")).to_have_text("executing")
    expect(page.locator(f"#decision-{excess.pk} .badge")).to_have_text("pending")
    expect(page.locator(f"#decision-{prescale.pk} .badge")).to_have_text("pending")
    page.screenshot(path=str(screenshots / "readme-pool-surge.png"), full_page=True)

    # 3. The approvals inbox: the surge's excess over the guardrail and the pre-scale, each with its reason;
    # alice approves both, one click each.
    page.goto(page.base_url + "/approvals/")
    card = page.locator(f"#proposal-{excess.pk}")
    expect(card).to_contain_text("Pending approval")
    expect(card).to_contain_text(f"waits for a person (proposal #{scale_up.pk})")
    expect(card).to_contain_text("35 now, grown as over the last minute until new replicas are ready")
    card.locator("input[name=comment]").fill("the surge is real")
    card = page.locator(f"#proposal-{prescale.pk}")
    expect(card).to_contain_text("Pending approval")
    expect(card).to_contain_text("warm pool 21 + 50 % buffer")
    page.screenshot(path=str(screenshots / "readme-inbox.png"), full_page=True)
    page.locator(f"#proposal-{excess.pk}").get_by_role("button", name="Approve").click()
    expect(page.locator(f"#proposal-{excess.pk}")).to_contain_text("the surge is real")
    card = page.locator(f"#proposal-{prescale.pk}")
    card.locator("input[name=comment]").fill("pre-scale for the peak")
    card.get_by_role("button", name="Approve").click()
    expect(page.locator(f"#proposal-{prescale.pk}")).to_contain_text("pre-scale for the peak")
    for proposal in (excess, prescale):
        proposal.refresh_from_db()
        assert (proposal.decided_by, proposal.decided_channel) == (alice, Channel.WEB)
        # Written to the cluster at once, its replicas starting (the pre-scale supersedes nothing: another track).
        assert proposal.state == ProposalState.EXECUTING, (proposal.kind, proposal.state)

    # 4. The surge's incident: is it getting better or worse, and what Headroom did, on one timeline.
    page.goto(page.base_url + f"/incidents/{incident.pk}/")
    view = page.locator("#incident-live")
    expect(view).to_contain_text("Getting worse")
    expect(view).to_contain_text("P1")
    expect(view.locator("svg")).to_have_count(8)  # TTFT, e2e, queue, replicas, errors, KV cache, fallback, ...
    expect(view).to_contain_text(f"Proposal #{excess.pk} approved")
    expect(view).to_contain_text(f"Proposal #{prescale.pk} approved")
    page.screenshot(path=str(screenshots / "readme-incident.png"), full_page=True)

    # 5. The warm-pool report: cost against latency per size, a recommendation, the charts.
    page.goto(page.base_url + f"/pools/{pool.pk}/reports/")
    page.get_by_role("link", name=str(report.pk), exact=True).click()
    page.wait_for_url(page.base_url + f"/reports/{report.pk}/")
    expect(page.locator("body")).to_contain_text(report.result["recommendation"][:40])
    expect(page.locator("body")).to_contain_text("Assumptions")
    expect(page.locator("main svg")).to_have_count(2)
    page.screenshot(path=str(screenshots / "readme-report.png"), full_page=True)
