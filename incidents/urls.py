from django.urls import include, path, re_path

from incidents import views

app_name = "incidents"

urlpatterns = [
    path("integrations/slack/interactions/", views.slack_interactions, name="slack-interactions"),
    path("integrations/channels/", views.channels, name="channels"),
    path("integrations/channels/new/", views.channel_create, name="channel-create"),
    path("integrations/channels/<int:pk>/enable/", views.channel_enable, name="channel-enable"),
    path("alerts/", views.alerts, name="alerts"),
    path("incidents/", views.incident_list, name="incident-index"),
    path("incidents/<int:pk>/", views.incident_detail, name="incident-view"),
    path("incidents/<int:pk>/live/", views.incident_live, name="incident-live"),
    path("incidents/<int:pk>/approvals/", views.incident_approvals, name="incident-approvals"),
    path("incidents/<int:pk>/postmortem.md", views.incident_postmortem, name="incident-postmortem"),
    path("incidents/<int:pk>/note/", views.incident_note, name="incident-note"),
    path("incidents/<int:pk>/what-if/", views.incident_what_if, name="incident-what-if"),
    re_path(r"^incidents/(?P<pk>[0-9]+)/(?P<verb>acknowledge|mitigate|resolve)/$", views.incident_act,
            name="incident-act"),
    path("incidents/<int:pk>/playbooks/", views.incident_playbooks, name="incident-playbooks"),
    path("incidents/<int:pk>/playbooks/<int:playbook_pk>/start/", views.playbook_start, name="playbook-start"),
    re_path(r"^incidents/(?P<pk>[0-9]+)/runs/(?P<run_pk>[0-9]+)/steps/(?P<position>[0-9]+)/(?P<verb>complete|skip|run)/$",
            views.playbook_step, name="playbook-step"),
    path("playbooks/", views.playbook_list, name="playbooks"),
    path("playbooks/new/", views.playbook_edit, name="playbook-create"),
    path("playbooks/<int:pk>/edit/", views.playbook_edit, name="playbook-edit"),
    path("settings/", views.user_settings, name="user-settings"),
    # The app's REST resources sit beside the core ones under /api/v1/ (one router per app), in a namespace of their
    # own: the router's names (incident-what-if, channel-enable) would otherwise shadow the pages' in {% url %}.
    path("api/v1/", include(("incidents.api.urls", "api"))),
]
