from rest_framework.routers import SimpleRouter

from scaling.api import views

router = SimpleRouter()
router.register("proposals", views.ProposalViewSet)
router.register("shifts", views.TrafficShiftViewSet)
router.register("reports", views.WarmPoolReportViewSet)
router.register("fallbacks", views.FallbackViewSet)
router.register("breakers", views.CircuitBreakerViewSet)
router.register("fallback-policies", views.FallbackPolicyViewSet)

urlpatterns = router.urls
