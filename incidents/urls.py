from django.urls import include, path

from incidents import views

app_name = "incidents"

urlpatterns = [
    path("integrations/slack/interactions/", views.slack_interactions, name="slack-interactions"),
    path("integrations/channels/", views.channels, name="channels"),
    path("integrations/channels/new/", views.channel_create, name="channel-create"),
    path("integrations/channels/<int:pk>/enable/", views.channel_enable, name="channel-enable"),
    path("alerts/", views.alerts, name="alerts"),
    path("settings/", views.user_settings, name="user-settings"),
    # The app's REST resources sit beside the core ones under /api/v1/ (one router per app).
    path("api/v1/", include("incidents.api.urls")),
]
