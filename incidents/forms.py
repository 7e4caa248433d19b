"""Web forms: a channel (validated by its kind's spec) and a user's Slack link."""
from __future__ import annotations

import json
from typing import Any

from django import forms

from controlplane import jsonlimits
from controlplane import services as core
from controlplane.choices import Role
from controlplane.models import Team
from incidents.choices import ChannelKind
from incidents.transports import transport_class


class ChannelForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none())
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=ChannelKind.choices)
    url = forms.URLField(max_length=500, assume_scheme="https", label="Webhook URL",
                         help_text="Slack: the incoming webhook URL. Generic: the receiver's URL.")
    secret = forms.CharField(required=False, max_length=200, label="Signing secret (generic webhooks)",
                             help_text="Leave empty to generate one.")
    quiet = forms.CharField(required=False, widget=forms.Textarea, label="Quiet rules (JSON)",
                            help_text='e.g. [{"tiers": ["batch"]}, {"tiers": ["standard"], "start": "22:00", "end": "07:00"}]')

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        admin_teams = core.visible_team_ids(user, min_role=Role.ADMIN)
        self.fields["team"].queryset = Team.objects.all() if admin_teams is None else Team.objects.filter(id__in=admin_teams)

    def raw_settings(self) -> dict[str, Any]:
        data = self.cleaned_data
        url_key = "webhook_url" if data["kind"] == ChannelKind.SLACK else "url"
        raw: dict[str, Any] = {url_key: data["url"], "quiet": data.get("quiet_rules", [])}
        if data["kind"] == ChannelKind.WEBHOOK and data.get("secret"):
            raw["secret"] = data["secret"]
        return raw

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        try:
            data["quiet_rules"] = jsonlimits.loads(data.get("quiet") or "[]")
        except ValueError as exc:
            self.add_error("quiet", str(exc))
            return data
        if self.errors:
            return data
        raw = self.raw_settings()
        if data["kind"] == ChannelKind.WEBHOOK and "secret" not in raw:
            raw["secret"] = "x" * 32  # validated here; the service generates the real one
        try:
            transport_class(data["kind"]).spec_class.parse(raw)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


class SlackLinkForm(forms.Form):
    slack_user_id = forms.CharField(
        max_length=32, label="Slack member ID",
        help_text="In Slack: your profile → ⋮ → Copy member ID (looks like U0123ABCD).",
    )


class PlaybookForm(forms.Form):
    """A playbook on one page: its steps are lines of `kind | title | params as JSON` (params optional)."""

    team = forms.ModelChoiceField(queryset=Team.objects.none())
    name = forms.CharField(max_length=100)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    alert_rules = forms.CharField(required=False, help_text="Rule keys, comma-separated, e.g. ttft_p95, queue_growth.")
    severities = forms.CharField(required=False, help_text="Incident kinds that offer it, e.g. P0, P1.")
    steps = forms.CharField(widget=forms.Textarea(attrs={"rows": 8}), help_text=(
        'One step a line: kind | title | params. Kinds: checklist, prescale ({"buffer": 0.5}), '
        'shift ({"to_pool": "chat-warm"}), notify ({"channel": "on-call", "text": "..."}).'))

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        teams = core.visible_team_ids(user, min_role=Role.OPERATOR)
        self.fields["team"].queryset = Team.objects.all() if teams is None else Team.objects.filter(id__in=teams)

    @staticmethod
    def _list(text: str) -> list[str]:
        return [item.strip() for item in text.split(",") if item.strip()]

    def clean_alert_rules(self) -> list[str]:
        return self._list(self.cleaned_data["alert_rules"])

    def clean_severities(self) -> list[str]:
        return self._list(self.cleaned_data["severities"])

    def clean_steps(self) -> list[tuple[str, str, dict]]:
        parsed = []
        for number, line in enumerate((line for line in self.cleaned_data["steps"].splitlines() if line.strip()), 1):
            kind, _, rest = line.partition("|")
            title, _, params = rest.partition("|")
            try:
                values = jsonlimits.loads(params) if params.strip() else {}
            except ValueError as exc:
                raise forms.ValidationError(f"Step {number}: params: {exc}.") from None
            parsed.append((kind.strip(), title.strip(), values))
        return parsed

    @staticmethod
    def initial_for(playbook: Any) -> dict[str, Any]:
        lines = [" | ".join([step.kind, step.title] + ([json.dumps(step.params)] if step.params else []))
                 for step in playbook.steps.all()]
        return {"team": playbook.team, "name": playbook.name, "description": playbook.description,
                "alert_rules": ", ".join(playbook.alert_rules), "severities": ", ".join(playbook.severities),
                "steps": "\n".join(lines)}
