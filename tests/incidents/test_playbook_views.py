"""The playbook pages: list, a new playbook from the one-form editor, edit, and errors that name the step."""
from __future__ import annotations

from django.contrib.auth.models import User

from controlplane.models import Team
from incidents.models import Playbook

from tests.incidents.test_incidents import dave  # noqa: F401

STEPS = "checklist | Take command\nprescale | Pre-scale | {\"buffer\": 0.5}\n"


def test_an_operator_creates_and_edits_a_playbook_on_one_form(client, alice: User, ml_team: Team) -> None:  # noqa: ANN001
    client.force_login(alice)
    assert "not yet available" in client.get("/playbooks/new/").content.decode()
    answer = client.post("/playbooks/new/", {"team": ml_team.pk, "name": "surge", "alert_rules": "ttft_p95, queue_growth",
                                             "severities": "", "steps": STEPS})
    playbook = Playbook.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/playbooks/#playbook-{playbook.pk}"
    assert playbook.alert_rules == ["ttft_p95", "queue_growth"]
    assert list(playbook.steps.values_list("kind", "params")) == [("checklist", {}), ("prescale", {"buffer": 0.5})]
    edit = client.get(f"/playbooks/{playbook.pk}/edit/").content.decode()
    assert "prescale | Pre-scale | {&quot;buffer&quot;: 0.5}" in edit
    client.post(f"/playbooks/{playbook.pk}/edit/", {"team": ml_team.pk, "name": "surge", "alert_rules": "",
                                                    "severities": "P1", "steps": "checklist | Only this"})
    playbook.refresh_from_db()
    assert playbook.severities == ["P1"] and playbook.steps.count() == 1
    assert "Only this" in client.get("/playbooks/").content.decode()


def test_a_bad_step_is_shown_with_its_field_and_nothing_is_saved(client, alice: User, ml_team: Team) -> None:  # noqa: ANN001
    client.force_login(alice)
    answer = client.post("/playbooks/new/", {"team": ml_team.pk, "name": "surge",
                                             "steps": "checklist | ok\nfallback | Use the small model"})
    assert answer.status_code == 200 and "steps[2].kind: fallback: not yet available" in answer.content.decode()
    answer = client.post("/playbooks/new/", {"team": ml_team.pk, "name": "surge", "steps": "prescale | x | {oops"})
    assert "params: not valid JSON" in answer.content.decode()
    assert not Playbook.objects.exists()


def test_a_viewer_cannot_pick_a_team_to_write_to(client, dave: User, ml_team: Team) -> None:  # noqa: ANN001, F811
    client.force_login(dave)
    answer = client.post("/playbooks/new/", {"team": ml_team.pk, "name": "surge", "steps": "checklist | x"})
    assert answer.status_code == 403 and "operator role" in answer.content.decode()
    assert not Playbook.objects.exists()
