from rest_framework.routers import DefaultRouter

from controlplane.api import views
from scaling.api import urls as scaling_urls

router = DefaultRouter()
router.register("teams", views.TeamViewSet)
router.register("clusters", views.ClusterViewSet)
router.register("pools", views.PoolViewSet)
router.register("slos", views.SLOViewSet)
router.register("schedules", views.ScheduleWindowViewSet)
router.register("audit", views.AuditEventViewSet)
router.register("tokens", views.ApiTokenViewSet, basename="apitoken")

urlpatterns = router.urls + scaling_urls.urlpatterns
