"""The on-call at 2 AM, on a phone: every page at 390x844 (a touch screen, the mobile viewport), in Debian's
Chromium against the live server. Measured, never timed: no page wider than the screen, action buttons on it
and big enough for a thumb, text readable without zoom, names for every control, and the keyboard's focus
kept where the person acted, through htmx swaps and the fragments' polling. docs/operations.md, "On a phone"."""
from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect, sync_playwright

from controlplane import services as core
from controlplane.choices import Channel
from controlplane.models import Pool
from incidents import playbooks
from incidents.models import Incident
from scaling import services
from scaling.choices import ProposalKind, ShiftPhase
from scaling.drivers.cluster import ReplicaStatus
from scaling.models import PoolStatus, Proposal, TrafficShift

from tests.browser.test_approval_flow import CHROMIUM, FLAGS
from tests.core.conftest import alice, bob, cluster, ml_team, pool  # noqa: F401
from tests.incidents.test_incident_views import incident  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
# The page's width as laid out, and every element that reaches past the screen's right edge without a scrolling
# box of its own around it (on a phone the browser widens the layout to the widest such element and zooms out).
OVERFLOW = """() => {
  const screenWidth = window.screen.width;
  const scrolls = (el) => { for (let box = el.parentElement; box; box = box.parentElement) {
      if (["auto", "scroll"].includes(getComputedStyle(box).overflowX)) return true; } return false; };
  const wide = [...document.body.querySelectorAll("*")].filter(el => {
      const r = el.getBoundingClientRect();
      return r.width > 0 && r.right > screenWidth + 1 && !scrolls(el); })
    .map(el => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className && el.className.baseVal === undefined ? "." + el.className : "")
               + " " + Math.round(el.getBoundingClientRect().right));
  return {scrollWidth: document.documentElement.scrollWidth, screenWidth, wide: wide.slice(0, 8)};
}"""


@pytest.fixture
def phone(live_server, monkeypatch) -> Iterator[Page]:  # noqa: ANN001
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Chromium is not installed at {CHROMIUM} (make system-deps installs it)")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=3)
        page = context.new_page()
        page.base_url = live_server.url
        yield page
        browser.close()


def _sign_in(page: Page, username: str, then: str) -> None:
    page.goto(page.base_url + "/login/?next=" + then)
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill("pw-" + username)
    page.get_by_role("button", name="Log in").tap()
    page.wait_for_url(page.base_url + then)


def _pending(pool: Pool, alice: User) -> Proposal:  # noqa: F811
    evidence = {"forecast_p90": [40, 120, 310], "capacity": [90, 90, 90], "window": "in the next 30 min"}
    return services.propose(pool, 4, ProposalKind.PRESCALE, core.Actor(alice, Channel.API), current=1,
                            reasons=[{"code": "PreScaleProposed", "detail": "forecast 3.4x within 30 min"}],
                            evidence=evidence)


def _playbook_run(incident: Incident, alice: User) -> None:  # noqa: F811
    by_alice = core.Actor(alice, Channel.WEB)
    playbook = playbooks.save(by_alice, incident.team, "surge", severities=[incident.severity], steps=[
        playbooks.StepSpec("Take command", "checklist"),
        playbooks.StepSpec("Pre-scale to warm pool + 50 %", "prescale", {"buffer": 0.5})])
    playbooks.start_run(incident, playbook, by_alice)


def _waiting_shift(pool: Pool, alice: User) -> TrafficShift:  # noqa: F811
    """A shift to a second pool of the team, parked before its gated step: Approve, Pause and Roll back."""
    target = Pool.objects.create(cluster=pool.cluster, team=pool.team, name="chat-1b", namespace="inference",
                                 deployment="vllm-chat-1b", model_name="llama-3.2-1b", gpu_type="L4",
                                 min_replicas=1, max_replicas=4, route_name="chat", route_backend="vllm-chat-1b")
    weights = lambda giving, taking: {"vllm-chat-8b": giving, "vllm-chat-1b": taking}  # noqa: E731
    return TrafficShift.objects.create(
        cluster=pool.cluster, from_pool=pool, to_pool=target, route_namespace="inference", route_name="chat",
        from_backend="vllm-chat-8b", to_backend="vllm-chat-1b", steps=[80, 95, 100], hold_s=60, max_p95_s=1.0,
        max_error_rate=0.01, failure_threshold=3, no_data_deadline_s=120, start_weights=weights(100, 0),
        planned_weights=[weights(20, 80), weights(5, 95), weights(0, 100)], created_by=alice,
        created_channel=Channel.API, phase=ShiftPhase.WAITING_APPROVAL, step=1, good_step=1, gated_steps=[2],
        step_since=timezone.now(), current_weights=weights(20, 80), idempotency_key="phone-waiting")


# Every control a thumb uses on the page: where it is and how big.
TARGETS = """() => [...document.querySelectorAll(
    "main button, main a.button, main input:not([type=hidden]), main select, main textarea, main summary")]
  .filter(el => el.getClientRects().length)
  .map(el => { const r = el.getBoundingClientRect();
    return {name: (el.innerText || el.getAttribute("aria-label") || el.name || el.type).trim().slice(0, 40),
            checkbox: el.type === "checkbox", left: Math.round(r.left), right: Math.round(r.right),
            height: Math.round(r.height)}; })"""


def _thumb_sized(page: Page, width: int = PHONE["width"]) -> list[dict]:
    """The page's controls, each checked: on the screen, 44 px tall (a checkbox 24 px: WCAG 2.5.8's minimum)."""
    targets = page.evaluate(TARGETS)
    for target in targets:
        assert target["left"] >= 0 and target["right"] <= width, (page.url, target)
        assert target["height"] >= (24 if target["checkbox"] else 44), (page.url, target)
    return targets


def _after_a_poll(page: Page, fragment: str) -> None:
    """Marks the fragment's element, then waits until its poll has swapped in a new one (the mark is gone)."""
    page.locator(fragment).evaluate("el => { el.polledAway = true; }")
    page.wait_for_function(f"() => !document.querySelector({fragment!r}).polledAway", timeout=20_000)


def _focused(page: Page) -> str:
    return page.evaluate("() => { const el = document.activeElement;"
                         " return el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + ' ' + el.innerText; }")


def _fits(page: Page) -> None:
    measured = page.evaluate(OVERFLOW)
    assert measured["scrollWidth"] <= measured["screenWidth"], measured


def test_the_top_bar_fits_a_phone_and_its_links_are_thumb_sized(phone: Page, alice: User) -> None:  # noqa: F811
    _sign_in(phone, "alice", "/settings/")  # a page with nothing wide of its own
    _fits(phone)
    for link in phone.get_by_role("navigation").get_by_role("link").all() + [
            phone.get_by_role("button", name="Log out")]:
        box = link.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (link.inner_text(), box)
        assert box["height"] >= 44, (link.inner_text(), box)


def test_wide_tables_scroll_inside_their_box_not_the_page(phone: Page, pool: Pool, incident: Incident,  # noqa: F811
                                                          alice: User) -> None:  # noqa: F811
    proposal = services.propose(pool, 4, ProposalKind.MANUAL, core.Actor(alice, Channel.API), current=1,
                                reasons=[{"code": "manual", "detail": "more room"}])
    services.reject(proposal.pk, core.Actor(alice, Channel.API), "not now")  # a row in the history
    _sign_in(phone, "alice", "/incidents/")
    for path in ("/incidents/", "/alerts/", "/audit/", "/clusters/"):
        phone.goto(phone.base_url + path)
        _fits(phone)
    table = phone.locator(".table-scroll").first
    assert table.evaluate("box => box.scrollWidth > box.clientWidth")  # the table is wider: its box scrolls


def test_the_incident_and_pool_pages_fit_with_their_charts_scaled_down(phone: Page, pool: Pool,  # noqa: F811
                                                                       incident: Incident, alice: User) -> None:  # noqa: F811
    _sign_in(phone, "alice", f"/incidents/{incident.pk}/")
    _fits(phone)
    charts = phone.locator("#incident-live svg[role=img]")
    expect(charts).to_have_count(8)
    for chart in charts.all():  # whole, scaled to the screen: not cut off, not squashed
        box = chart.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
        assert abs(box["height"] / box["width"] - 190 / 560) < 0.01, box
    phone.goto(phone.base_url + f"/pools/{pool.pk}/")
    _fits(phone)


def test_every_action_is_on_the_screen_and_thumb_sized(phone: Page, pool: Pool, incident: Incident,  # noqa: F811
                                                      alice: User) -> None:  # noqa: F811
    _pending(pool, alice)
    _playbook_run(incident, alice)
    _waiting_shift(pool, alice)
    _sign_in(phone, "alice", "/approvals/")
    names = {target["name"] for target in _thumb_sized(phone)}
    assert {"Approve", "Reject", "Approve selected", "Planner terms and evidence"} <= names, names
    phone.goto(phone.base_url + f"/incidents/{incident.pk}/")
    names = {target["name"] for target in _thumb_sized(phone)}
    assert {"Acknowledge", "Mark mitigated", "Resolve", "Add note", "Done", "Run", "Skip", "Approve"} <= names, names
    phone.goto(phone.base_url + f"/pools/{pool.pk}/")
    names = {target["name"] for target in _thumb_sized(phone)}
    assert {"Approve step 2", "Pause", "Roll back", "Approve", "Reject"} <= names, names


# Visible text (charts' SVG aside: they scale with the screen) set below 14 px, by element.
SMALL_TEXT = """() => {
  const small = {};
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!node.textContent.trim() || el.closest("svg") || !el.getClientRects().length) continue;
    const size = parseFloat(getComputedStyle(el).fontSize);
    if (size < 14) { const key = el.tagName.toLowerCase() + "." + [...el.classList].join(".") + " " + size + "px";
                     small[key] = (small[key] || 0) + 1; }
  }
  return small;
}"""


def test_text_is_readable_without_zoom(phone: Page, pool: Pool, incident: Incident, alice: User) -> None:  # noqa: F811
    _pending(pool, alice)
    _sign_in(phone, "alice", "/")
    for path in ("/", "/approvals/", f"/incidents/{incident.pk}/", "/incidents/", f"/pools/{pool.pk}/"):
        phone.goto(phone.base_url + path)
        assert phone.evaluate(SMALL_TEXT) == {}, path


def test_the_keyboard_focus_survives_the_fragments_polling(phone: Page, pool: Pool, incident: Incident,  # noqa: F811
                                                           alice: User) -> None:  # noqa: F811
    proposal = _pending(pool, alice)
    _sign_in(phone, "alice", "/approvals/")
    approve = phone.locator(f"#proposal-{proposal.pk}").get_by_role("button", name="Approve")
    approve.focus()
    _after_a_poll(phone, f"#proposal-{proposal.pk}")  # the card polls every 5 s, the list around it too
    assert _focused(phone) == f"button#approve-{proposal.pk} Approve"
    phone.goto(phone.base_url + f"/incidents/{incident.pk}/")
    phone.get_by_role("button", name="Mark mitigated").focus()
    _after_a_poll(phone, "#incident-live")
    assert _focused(phone) == "button#incident-mitigate Mark mitigated"


def test_opened_evidence_stays_open_through_the_cards_polling(phone: Page, pool: Pool, alice: User) -> None:  # noqa: F811
    proposal = _pending(pool, alice)
    _sign_in(phone, "alice", "/approvals/")
    phone.locator(f"#proposal-{proposal.pk}").get_by_text("Planner terms and evidence").tap()
    _after_a_poll(phone, f"#proposal-{proposal.pk}")  # the card refreshes itself every 5 s
    expect(phone.locator(f"#proposal-{proposal.pk} details")).to_have_attribute("open", "")


def test_a_half_typed_bulk_comment_survives_a_new_proposal(phone: Page, pool: Pool, alice: User) -> None:  # noqa: F811
    _pending(pool, alice)
    _sign_in(phone, "alice", "/approvals/")
    phone.get_by_role("textbox", name="comment for all selected").fill("after the surge")
    _pending(_waiting_shift(pool, alice).to_pool, alice)  # meanwhile a second proposal arrives: the list changes
    _after_a_poll(phone, "#approvals-pending")
    expect(phone.get_by_role("textbox", name="comment for all selected")).to_have_value("after the surge")


def test_after_an_action_the_focus_goes_to_the_new_state_not_the_page(phone: Page, pool: Pool,  # noqa: F811
                                                                      incident: Incident, alice: User) -> None:  # noqa: F811
    """Each of these buttons is gone from the fragment that answers it: the keyboard's focus (a screen reader's
    place) lands on what changed instead of falling to <body>, the top of the page. (htmx focuses an answer's
    autofocus element when the swap settles: the checks wait for the focus, they do not time it.)"""
    proposal = _pending(pool, alice)
    _playbook_run(incident, alice)
    shift = _waiting_shift(pool, alice)
    _sign_in(phone, "alice", f"/incidents/{incident.pk}/")
    phone.get_by_role("button", name="Acknowledge").focus()
    phone.keyboard.press("Enter")
    expect(phone.locator("#incident-state")).to_be_focused()
    expect(phone.locator("#incident-state")).to_have_text("Acknowledged")
    run = incident.playbook_runs.get()
    phone.locator(f"#run-{run.pk}-step-1").get_by_role("button", name="Done").focus()
    phone.keyboard.press("Enter")
    expect(phone.locator(f"#run-{run.pk}-step-1-state")).to_be_focused()
    expect(phone.locator(f"#run-{run.pk}-step-1")).to_contain_text("by alice")
    phone.locator(f"#proposal-{proposal.pk}").get_by_role("button", name="Reject").focus()
    phone.keyboard.press("Enter")
    expect(phone.locator(f"#proposal-{proposal.pk}-state")).to_be_focused()
    expect(phone.locator(f"#proposal-{proposal.pk}-state")).to_have_text("Rejected")
    phone.goto(phone.base_url + f"/pools/{pool.pk}/")
    phone.get_by_role("button", name="Roll back").focus()
    phone.keyboard.press("Enter")
    expect(phone.locator(f"#shift-{shift.pk}-phase")).to_be_focused()
    expect(phone.locator(f"#shift-{shift.pk}")).not_to_contain_text("Waiting for approval")


# Live regions (role=alert or status, aria-live) that a swap inserts: a screen reader announces each one.
ANNOUNCED = """() => { window.announced = [];
  new MutationObserver(changes => { for (const change of changes) for (const node of change.addedNodes) {
      if (node.nodeType !== 1) continue;
      for (const el of [node, ...node.querySelectorAll("*")]) {
        if (el.matches("[role=alert], [role=status], [aria-live]:not([aria-live=off])")) window.announced.push(el.innerText); } }
  }).observe(document.body, {childList: true, subtree: true}); }"""


def test_polling_announces_nothing_to_a_screen_reader(phone: Page, pool: Pool, alice: User) -> None:  # noqa: F811
    services.record_status(pool, ReplicaStatus(desired=2, ready=2), timezone.now())
    PoolStatus.objects.filter(pool=pool).update(scale_refusal="deployments.apps/vllm-chat-8b is forbidden",
                                                scale_checked_at=timezone.now())
    _sign_in(phone, "alice", f"/pools/{pool.pk}/")
    expect(phone.locator("#pool-live")).to_contain_text("Headroom cannot scale this pool")
    phone.evaluate(ANNOUNCED)
    _after_a_poll(phone, "#pool-live")  # every 15 s: the refusal is the same, nothing new to say
    assert phone.evaluate("window.announced") == []


NAMED_ROLES = {"button", "textbox", "searchbox", "checkbox", "combobox", "link", "image", "img", "spinbutton"}


def _unnamed(page: Page) -> list[str]:
    """Controls whose accessible name (Chromium's own, as a screen reader gets it) is empty or only a placeholder:
    a placeholder is gone once the person types, and is no label (WCAG 3.3.2)."""
    cdp = page.context.new_cdp_session(page)
    found = []
    for node in cdp.send("Accessibility.getFullAXTree")["nodes"]:
        role = node.get("role", {}).get("value")
        if node.get("ignored") or role not in NAMED_ROLES:
            continue
        name = node.get("name", {})
        used = [source for source in name.get("sources", []) if source.get("value")]
        if not name.get("value", "").strip():
            found.append(f"{role} without a name")
        elif used and used[0].get("attribute") == "placeholder":
            found.append(f"{role} named only by its placeholder: {name['value']}")
    return found


def test_every_control_has_a_name_a_screen_reader_can_say(phone: Page, pool: Pool, incident: Incident,  # noqa: F811
                                                         alice: User) -> None:  # noqa: F811
    _pending(pool, alice)
    _playbook_run(incident, alice)
    _sign_in(phone, "alice", "/approvals/")
    for path in ("/approvals/", f"/incidents/{incident.pk}/", f"/pools/{pool.pk}/", "/"):
        phone.goto(phone.base_url + path)
        phone.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
        assert _unnamed(phone) == [], path


def test_a_stale_pools_warnings_wrap_on_a_phone(phone: Page, pool: Pool, alice: User) -> None:  # noqa: F811
    services.record_status(pool, ReplicaStatus(desired=2, ready=2), timezone.now() - timedelta(hours=1))
    _sign_in(phone, "alice", f"/pools/{pool.pk}/")
    expect(phone.locator("#pool-live p.reading.bad")).not_to_have_count(0)
    _fits(phone)


def test_a_pages_title_keeps_its_row_beside_its_buttons(phone: Page, pool: Pool, bob: User) -> None:  # noqa: F811
    _sign_in(phone, "bob", f"/pools/{pool.pk}/")  # an admin: Warm-pool reports, Edit and Delete beside the title
    title = phone.get_by_role("heading", level=1).bounding_box()
    assert title["width"] >= PHONE["width"] - 2 * 12 - 1, title  # the whole row inside main's padding
    _thumb_sized(phone)


def _contrast(foreground: str, background: str) -> float:
    """WCAG's contrast ratio of two computed colours, "rgb(r, g, b)"."""
    def luminance(colour: str) -> float:
        channels = [int(part) / 255 for part in colour[colour.index("(") + 1:-1].split(",")[:3]]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    light, dark = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_the_signed_in_name_is_readable_on_the_top_bar(phone: Page, alice: User) -> None:  # noqa: F811
    _sign_in(phone, "alice", "/settings/")
    name = phone.locator(".topbar .who span")
    expect(name).to_have_text("alice")
    colour = name.evaluate("el => getComputedStyle(el).color")
    bar = phone.locator(".topbar").evaluate("el => getComputedStyle(el).backgroundColor")
    assert _contrast(colour, bar) >= 4.5, (colour, bar)  # WCAG 1.4.3


def test_the_pool_pages_decide_buttons_are_on_a_360_px_screen(phone: Page, pool: Pool, alice: User) -> None:  # noqa: F811
    """The smallest phone the pages are made for (docs/operations.md): the Decisions table's Approve and Reject,
    in its fifth column, are on the screen without scrolling the table sideways."""
    _pending(pool, alice)
    phone.set_viewport_size({"width": 360, "height": 780})
    _sign_in(phone, "alice", f"/pools/{pool.pk}/")
    _fits(phone)
    names = {target["name"] for target in _thumb_sized(phone, width=360)}
    assert {"Approve", "Reject"} <= names, names


def test_after_deciding_in_the_pools_decisions_the_focus_goes_to_that_row(phone: Page, pool: Pool,  # noqa: F811
                                                                          alice: User) -> None:  # noqa: F811
    proposal = _pending(pool, alice)
    _sign_in(phone, "alice", f"/pools/{pool.pk}/")
    phone.locator(f"#decision-{proposal.pk}").get_by_role("button", name="Reject").focus()
    phone.keyboard.press("Enter")
    expect(phone.locator(f"#decision-{proposal.pk}-state")).to_be_focused()  # the table is swapped whole
    expect(phone.locator(f"#decision-{proposal.pk}-state")).to_have_text("rejected")
