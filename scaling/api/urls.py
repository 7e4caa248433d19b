from rest_framework.routers import SimpleRouter

from scaling.api import views

router = SimpleRouter()
router.register("proposals", views.ProposalViewSet)

urlpatterns = router.urls
