from rest_framework.routers import SimpleRouter

from incidents.api import views

router = SimpleRouter()
router.register("channels", views.ChannelViewSet)
router.register("notifications", views.NotificationViewSet)
router.register("alerts", views.AlertViewSet)
router.register("silences", views.SilenceViewSet)
router.register("incidents", views.IncidentViewSet)
router.register("playbooks", views.PlaybookViewSet)
router.register("playbook-runs", views.PlaybookRunViewSet)

urlpatterns = router.urls
