"""An incident's what-if through Django: asked for in the page or the API, replayed by a worker over the
incident's window of stored samples (with the fallback model), shown in the incident view and the
postmortem. The arithmetic itself is tested in tests/sim/test_incident_what_if.py."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane import services as core
from controlplane.choices import Channel as ActorChannel
from controlplane.models import AuditEvent, Pool
from incidents import postmortem
from incidents.models import Incident
from scaling import report_service
from scaling.choices import ReportState
from scaling.models import FallbackPolicy, SignalSample, WarmPoolReport

from tests.incidents.test_incidents import dave, fire_ttft_p95  # noqa: F401

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def incident(pool: Pool) -> Incident:
    """A surge: 40 quiet minutes at 3 req/s stored, then 12 minutes at 30 req/s while the incident runs
    (as yesterday);
    the pool has a fallback pool (a 1B model) and an enabled FallbackPolicy."""
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=13)
    fallback = Pool.objects.create(cluster=pool.cluster, team=pool.team, name="chat-1b", namespace="inference",
                                   deployment="vllm-chat-1b", model_name="meta-llama/Llama-3.2-1B-Instruct",
                                   gpu_type="L4", min_replicas=2, max_replicas=4)
    Pool.objects.filter(pk=pool.pk).update(fallback_pool=fallback, cold_start_p50_s=120, cold_start_p95_s=150)
    FallbackPolicy.objects.create(pool=pool)
    # Yesterday's peak was the same surge (10 minutes at 30 req/s, 20 hours earlier): a day-peak warm pool
    # holds replicas for it, so the alternatives differ from what ran by more than chance.
    rows = [SignalSample(pool=pool, at=start - timedelta(hours=20) + timedelta(seconds=15 * tick), request_rate_rps=30.0,
                         ttft_p95_s=0.4, ready_replicas=3) for tick in range(10 * 4)]
    for tick in range(52 * 4):
        at = start - timedelta(minutes=40) + timedelta(seconds=15 * tick)
        surging = at >= start
        rows.append(SignalSample(pool=pool, at=at, request_rate_rps=30.0 if surging else 3.0,
                                 ttft_p95_s=2.5 if surging else 0.3, ready_replicas=1))
    SignalSample.objects.bulk_create(rows)
    fire_ttft_p95(pool, start)
    return Incident.objects.get(pool=pool)


def test_the_what_if_runs_and_lands_in_the_view_and_the_postmortem(client, incident: Incident,
                                                                    alice: User) -> None:  # noqa: ANN001
    client.force_login(alice)
    page = client.get(f"/incidents/{incident.pk}/").content.decode()
    assert 'id="what-if"' in page and "Replay at other settings" in page and "and with the fallback model" in page
    assert "## What if\n\nNot replayed" in postmortem.render(incident)

    with pytest.MonkeyPatch.context() as patch:  # the worker runs below, in this test's transaction
        patch.setattr(report_service, "_enqueue", lambda report_id: None)
        answer = client.post(f"/incidents/{incident.pk}/what-if/", **HTMX)
    assert answer.status_code == 200
    incident.refresh_from_db()
    report = incident.what_if
    assert report.state == ReportState.PENDING and report.window_start <= incident.opened_at
    assert report.window_end > incident.opened_at and report.pool_id == incident.pool_id
    fragment = answer.content.decode()
    assert 'hx-trigger="every 2s"' in fragment and "% done" in fragment  # htmx polls while it runs
    assert AuditEvent.objects.filter(object_type="incidents.incident", object_id=str(incident.pk),
                                     after__what_if=report.pk).exists()

    report = report_service.run(report.pk)
    assert report.state == ReportState.SUCCEEDED, report.error
    what_if = report.result["what_if"]
    ran = what_if["ran"]
    assert ran["with_fallback"] is True and ran["warm_pool_pct"] == 0.0  # the pool's live policy: it ran with it
    assert ran["missed"] > 0 and ran["requests"] > 10_000
    assert report.result["fallback"]["replayed"] and report.result["fallback"]["replicas"] == 2
    assert any(row["with_fallback"] for row in report.result["rows"])
    saving = [alternative for alternative in what_if["alternatives"] if alternative["would_have_met"]]
    assert saving, what_if["summary"]
    best = what_if["best"]
    assert ("Best alternative: " + best["line"] in what_if["summary"]) == (best["would_have_met"] > best["newly_missed"])

    fragment = client.get(f"/incidents/{incident.pk}/what-if/").content.decode()
    assert "every 2s" not in fragment and what_if["summary"].split(",")[0] in fragment
    assert saving[0]["line"].replace("$", "") in fragment.replace("$", "")
    assert f'href="/reports/{report.pk}/"' in fragment

    page = client.get(f"/reports/{report.pk}/").content.decode()  # the report itself, with its fallback column
    assert "With the fallback: SLO met" in page and "Fallback model: meta-llama/Llama-3.2-1B-Instruct" in page

    markdown = postmortem.render(Incident.objects.get(pk=incident.pk))
    section = markdown.split("## What if")[1].split("## Notes")[0]
    assert what_if["summary"] in section and f"warm-pool report #{report.pk}" in section
    assert f"| {saving[0]['would_have_met']:,} of {ran['missed']:,} |" in section


def test_the_api_asks_for_a_what_if_and_names_the_bad_field(incident: Incident, alice: User, dave: User) -> None:  # noqa: F811
    api = APIClient()
    api.force_authenticate(alice)
    url = f"/api/v1/incidents/{incident.pk}/what-if/"
    for body, field in (({"sizes_pct": [0, 120]}, "sizes_pct"), ({"sizes_pct": "ten"}, "sizes_pct"),
                        ({"sizes_pct": []}, "sizes_pct"), ({"peak_basis": "week"}, "peak_basis")):
        answer = api.post(url, body, format="json")
        assert answer.status_code == 400 and field in answer.json(), (body, answer.content)
    assert not WarmPoolReport.objects.exists()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_service, "_enqueue", lambda report_id: None)
        answer = api.post(url, {"sizes_pct": [0, 50], "peak_basis": "forecast"}, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["state"] == "pending" and body["sizes_pct"] == [0.0, 50.0] and body["window_start"]
    assert Incident.objects.get(pk=incident.pk).what_if_id == body["id"]
    again = api.post(url, {}, format="json")  # asked again while it waits: the same replay
    assert again.status_code == 200 and again.json()["id"] == body["id"] and WarmPoolReport.objects.count() == 1
    assert api.get(f"/api/v1/reports/{body['id']}/").json()["peak_basis"] == "forecast"

    viewer = APIClient()
    viewer.force_authenticate(dave)
    assert viewer.post(url, {}, format="json").status_code == 403


def test_a_system_incident_has_nothing_to_replay(incident: Incident, alice: User) -> None:
    Incident.objects.filter(pk=incident.pk).update(pool=None, pool_name="")  # no pool, and never had one
    system = Incident.objects.get(pk=incident.pk)
    with pytest.raises(report_service.ReportRequestError) as error:
        report_service.request_what_if(system, core.Actor(alice, ActorChannel.API), enqueue=False)
    assert error.value.field == "incident"
    api = APIClient()
    api.force_authenticate(alice)
    answer = api.post(f"/api/v1/incidents/{incident.pk}/what-if/", {}, format="json")
    assert answer.status_code == 400 and "incident" in answer.json()
    assert "## What if\n\nNone: a system incident" in postmortem.render(system)


def test_a_window_without_history_fails_with_a_sentence(incident: Incident, alice: User) -> None:
    SignalSample.objects.filter(pool=incident.pool).delete()
    report = report_service.request_what_if(incident, core.Actor(alice, ActorChannel.API), enqueue=False)
    report = report_service.run(report.pk)
    assert report.state == ReportState.FAILED and "no stored request history" in report.error
    assert "could not be made: the pool" in postmortem.render(Incident.objects.get(pk=incident.pk))
