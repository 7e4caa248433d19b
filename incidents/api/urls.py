from rest_framework.routers import SimpleRouter

from incidents.api import views

router = SimpleRouter()
router.register("channels", views.ChannelViewSet)
router.register("notifications", views.NotificationViewSet)

urlpatterns = router.urls
