"""The pure alert rules (incidents/rules.py), table-driven: verdicts, `for` durations, burn rates,
inhibition and silences, without a database."""
from __future__ import annotations

import pytest

from incidents import rules
from incidents.choices import AlertState, AlertTier
from incidents.rules import FIRING, OK, UNKNOWN

NOW = 1_764_500_000.0


def facts(**overrides) -> rules.PoolFacts:  # noqa: ANN003
    signals = {"ready_replicas": 2.0, "request_rate_rps": 4.0, "queue_depth": 3.0, "ttft_p95_s": 0.4,
               "ttft_p99_s": 0.9, "error_rate": 0.0}
    signals |= overrides.pop("signals", {})
    return rules.PoolFacts(pool_id=7, now_s=NOW, decided_at_s=overrides.pop("decided_at_s", NOW - 5), signals=signals,
                           **overrides)


def verdict(verdicts: list[rules.Verdict], key: str) -> rules.Verdict:
    return next(v for v in verdicts if v.rule.key == key)


def test_it_shares_states_and_tiers_with_the_models() -> None:
    assert {rules.PENDING, rules.FIRING, rules.RESOLVED, rules.CLEARED} == set(AlertState.values)
    assert {rules.P0, rules.P1, rules.P2, rules.P3} == set(AlertTier.values)


@pytest.mark.parametrize(("key", "signals", "status"), [
    ("ttft_p99", {"ttft_p99_s": 5.2}, FIRING),
    ("ttft_p99", {"ttft_p99_s": 5.0}, OK),
    ("ttft_p99", {"ttft_p99_s": None}, UNKNOWN),
    ("error_rate", {"error_rate": 0.06}, FIRING),
    ("error_rate", {"error_rate": 0.01}, OK),
    ("ttft_p95", {"ttft_p95_s": 1.4}, FIRING),
    ("ttft_p95", {"ttft_p95_s": 0.9}, OK),
    ("outage", {"ready_replicas": 0.0, "request_rate_rps": 3.0}, FIRING),
    ("outage", {"ready_replicas": 0.0, "request_rate_rps": 0.0, "queue_depth": 0.0}, OK),
    ("outage", {"ready_replicas": 0.0, "request_rate_rps": None, "queue_depth": None}, UNKNOWN),
    ("outage", {"ready_replicas": None}, UNKNOWN),
    ("outage", {"ready_replicas": 1.0}, OK),
])
def test_it_judges_the_tier_thresholds(key: str, signals: dict, status: str) -> None:
    assert verdict(rules.evaluate_pool(facts(signals=signals)), key).status == status


def test_it_tiers_the_rules_as_the_design_says() -> None:
    tiers = {v.rule.key: v.rule.tier for v in rules.evaluate_pool(facts())}
    assert tiers["outage"] == tiers["ttft_p99"] == tiers["error_rate"] == rules.P0
    assert tiers["ttft_p95"] == tiers["queue_growth"] == rules.P1


def test_it_calls_an_outage_from_the_last_known_rate_when_no_pod_reports() -> None:
    history = [rules.Sample(NOW - 120, 4.0, 6.0), rules.Sample(NOW - 60, None, None)]
    got = verdict(rules.evaluate_pool(facts(signals={"ready_replicas": 0.0, "request_rate_rps": None,
                                                     "queue_depth": None}, history=history)), "outage")
    assert got.status == FIRING
    assert "0 ready replicas while 6.00 req/s arrive" in got.summary


def _queue(depths: list[float | None]) -> list[rules.Sample]:
    """One sample per minute, the last one now."""
    return [rules.Sample(NOW - 60 * (len(depths) - 1 - i), depth) for i, depth in enumerate(depths)]


@pytest.mark.parametrize(("depths", "status"), [
    ([1, 2, 4, 7, 11, 16], FIRING),
    ([1, 2, 4, 4, 11, 16], OK),  # one flat minute: not sustained
    ([16, 11, 7, 4, 2, 1], OK),
    ([1, 2, None, 7, 11, 16], UNKNOWN),
    ([2, 4, 7, 11, 16], UNKNOWN),  # only 5 minutes of history
])
def test_it_fires_on_a_queue_that_grew_every_minute_for_five_minutes(depths: list, status: str) -> None:
    got = verdict(rules.evaluate_pool(facts(history=_queue(depths))), "queue_growth")
    assert got.status == status
    if status == FIRING:
        assert got.summary == "queue grew every minute for 5 min: 1.0 → 16.0 waiting"


def test_it_passes_on_the_planners_staleness_alert() -> None:
    got = verdict(rules.evaluate_pool(facts(staleness_alert=True, signals_unknown_for_s=95.0)), "stale_signals")
    assert got.status == FIRING and "for 95 s" in got.summary
    assert verdict(rules.evaluate_pool(facts()), "stale_signals").status == OK


def test_it_holds_every_signal_rule_when_the_last_decision_is_old() -> None:
    verdicts = rules.evaluate_pool(facts(decided_at_s=NOW - 300, signals={"ttft_p99_s": 9.0}))
    assert verdict(verdicts, "ttft_p99").status == UNKNOWN
    assert verdict(verdicts, "stale_signals").status == UNKNOWN


@pytest.mark.parametrize(("latest", "p95", "status"), [
    (200.0, 90.0, FIRING),
    (130.0, 90.0, OK),  # within 1.5x
    (50.0, 20.0, OK),  # 2.5x, but only 30 s more
    (200.0, None, UNKNOWN),
    (None, 90.0, UNKNOWN),
])
def test_it_flags_cold_start_regressions(latest: float | None, p95: float | None, status: str) -> None:
    got = verdict(rules.evaluate_pool(facts(cold_start_latest_s=latest, cold_start_p95_s=p95)), "cold_start_regression")
    assert got.status == status
    assert got.rule.tier == rules.P2


@pytest.mark.parametrize(("last_tick_ago_s", "status"), [(59.0, OK), (61.0, FIRING), (None, UNKNOWN)])
def test_it_judges_the_loops_heartbeat(last_tick_ago_s: float | None, status: str) -> None:
    got = rules.heartbeat(3, None if last_tick_ago_s is None else NOW - last_tick_ago_s, NOW)
    assert got.status == status
    assert got.labels == {"rule": "heartbeat", "cluster": "3"}


# --- state steps ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "since_ago_s", "status", "for_s", "expected"), [
    (None, None, FIRING, 0.0, rules.FIRING),
    (None, None, FIRING, 60.0, rules.PENDING),
    (None, None, OK, 60.0, None),
    (None, None, UNKNOWN, 0.0, None),
    (rules.PENDING, 30.0, FIRING, 60.0, None),
    (rules.PENDING, 60.0, FIRING, 60.0, rules.FIRING),
    (rules.PENDING, 30.0, OK, 60.0, rules.CLEARED),
    (rules.PENDING, 90.0, UNKNOWN, 60.0, None),
    (rules.FIRING, 90.0, FIRING, 60.0, None),
    (rules.FIRING, 90.0, OK, 60.0, rules.RESOLVED),
    (rules.FIRING, 90.0, UNKNOWN, 60.0, None),  # unknown is not healthy
])
def test_it_steps_alert_states(state: str | None, since_ago_s: float | None, status: str, for_s: float,
                               expected: str | None) -> None:
    since = None if since_ago_s is None else NOW - since_ago_s
    assert rules.advance(state, since, status, for_s, NOW).state == expected


def test_it_fingerprints_by_labels_only() -> None:
    a = rules.fingerprint({"rule": "ttft_p95", "pool": "7"})
    assert a == rules.fingerprint({"pool": "7", "rule": "ttft_p95"})
    assert a != rules.fingerprint({"rule": "ttft_p95", "pool": "8"})


# --- burn rates --------------------------------------------------------------------------------------


def _slo(bad_share_by_window: dict[float, float | None], objective: float = 0.99) -> rules.SloFacts:
    totals = {w: rules.WindowTotals(share * 100, 100.0, 100, w) if share is not None else rules.WindowTotals()
              for w, share in bad_share_by_window.items()}
    return rules.SloFacts(slo_id=11, name="TTFT p95 ≤ 1000 ms", objective=objective, totals=totals)


HOUR, MIN = 3600.0, 60.0


@pytest.mark.parametrize(("shares", "fast", "slow"), [
    # 99 % objective: a 1 % budget. 15 % bad is a 15x burn; 7 % is 7x.
    ({HOUR: 0.15, 5 * MIN: 0.20, 6 * HOUR: 0.03, 30 * MIN: 0.10}, FIRING, OK),
    ({HOUR: 0.15, 5 * MIN: 0.05, 6 * HOUR: 0.03, 30 * MIN: 0.10}, OK, OK),  # the burn stopped: fast resolves soon
    ({HOUR: 0.07, 5 * MIN: 0.07, 6 * HOUR: 0.07, 30 * MIN: 0.07}, OK, FIRING),
    ({HOUR: 0.15, 5 * MIN: None, 6 * HOUR: None, 30 * MIN: 0.07}, UNKNOWN, UNKNOWN),
    ({HOUR: 0.0, 5 * MIN: None, 6 * HOUR: 0.0, 30 * MIN: None}, OK, OK),
])
def test_it_fires_burn_rates_when_both_windows_burn(shares: dict, fast: str, slow: str) -> None:
    verdicts = rules.evaluate_pool(facts(slos=[_slo(shares)]))
    assert verdict(verdicts, "slo_burn_fast").status == fast
    assert verdict(verdicts, "slo_burn_slow").status == slow
    assert verdict(verdicts, "slo_burn_fast").labels == {"rule": "slo_burn_fast", "pool": "7", "slo": "11"}


def test_it_says_the_burn_rate_with_its_numbers() -> None:
    got = verdict(rules.evaluate_pool(facts(slos=[_slo({HOUR: 0.15, 5 * MIN: 0.2, 6 * HOUR: 0.0, 30 * MIN: 0.0})])),
                  "slo_burn_fast")
    assert got.summary == ("TTFT p95 ≤ 1000 ms (99.00%): error budget burning 15.0x over 1 h and 20.0x over 5 min "
                           "(alert at 14.4x)")
    assert got.rule.tier == rules.P0


@pytest.mark.parametrize(("indicator", "threshold", "signals", "expected"), [
    ("ttft_p95", 1000.0, {"ttft_p95_s": 1.2}, (1.0, 1.0)),
    ("ttft_p95", 1000.0, {"ttft_p95_s": 0.8}, (0.0, 1.0)),
    ("ttft_p95", 1000.0, {"ttft_p95_s": None}, None),
    ("e2e_p99", 8000.0, {"e2e_p99_s": 9.0}, (1.0, 1.0)),
    ("error_rate", 0.01, {"error_rate": 0.02, "request_rate_rps": 50.0}, (1.0, 50.0)),
    ("error_rate", 0.01, {"error_rate": 0.02, "request_rate_rps": 0.0}, None),
])
def test_it_observes_one_tick_of_an_slo(indicator: str, threshold: float, signals: dict, expected: tuple | None) -> None:
    assert rules.slo_observation(indicator, threshold, signals) == expected


def test_it_sums_a_window_of_observations() -> None:
    observations = [(NOW - 400, 1.0, 1.0), (NOW - 200, 1.0, 1.0), (NOW - 100, 0.0, 1.0), (NOW, 0.0, 1.0)]
    assert rules.window_totals(observations, NOW, 300) == rules.WindowTotals(1.0, 3.0, 3, 200.0)
    assert rules.WindowTotals(1.0, 3.0, 3, 200.0).bad_share(300) == pytest.approx(1 / 3)
    assert rules.WindowTotals(1.0, 3.0, 2, 200.0).bad_share(300) is None  # too few ticks to judge
    assert rules.WindowTotals(1.0, 3.0, 3, 100.0).bad_share(300) is None  # too short a history for the window


# --- inhibition and silences ------------------------------------------------------------------------------


def test_it_holds_back_capacity_alerts_while_a_scale_up_warms() -> None:
    warming = [rules.Warming(proposal_id=5, current_replicas=2, target_replicas=6, since_s=NOW - 40, ready_by_s=NOW + 50)]
    held = rules.inhibitor(rules.TTFT_P95, warming, NOW)
    assert held == (5, "held back: approved scale-up #5 (2 → 6 replicas) has been warming for 40 s and is expected "
                       "ready within 50 s")
    assert rules.inhibitor(rules.ERRORS, warming, NOW) is None  # more replicas do not cure errors
    assert rules.inhibitor(rules.OUTAGE, warming, NOW) is None  # a total outage always pages
    assert rules.inhibitor(rules.TTFT_P95, warming, NOW + 50) is None  # overdue: no longer held
    down = [rules.Warming(6, 6, 2, NOW - 40, NOW + 50)]
    assert rules.inhibitor(rules.TTFT_P95, down, NOW) is None


@pytest.mark.parametrize(("raw", "labels", "expected"), [
    ([{"label": "pool", "value": "7"}], {"rule": "ttft_p95", "pool": "7"}, True),
    ([{"label": "pool", "value": "7"}, {"label": "rule", "value": "outage"}], {"rule": "ttft_p95", "pool": "7"}, False),
    ([{"label": "tier", "value": "P1"}], {"rule": "ttft_p95", "pool": "7", "tier": "P1"}, True),
])
def test_it_matches_silences_on_every_matcher(raw: list, labels: dict, expected: bool) -> None:
    assert rules.matches(rules.parse_matchers(raw), labels) is expected


@pytest.mark.parametrize("raw", [[], "pool=7", [{"label": "team", "value": "x"}], [{"label": "pool"}]])
def test_it_refuses_bad_matchers(raw: object) -> None:
    with pytest.raises(ValueError):
        rules.parse_matchers(raw)
