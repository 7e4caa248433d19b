from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from controlplane import views

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("clusters/", views.clusters, name="clusters"),
    path("pools/<int:pk>/", views.pool_detail, name="pool-detail"),
    path("pools/<int:pk>/live/", views.pool_live, name="pool-live"),
    re_path(r"^(?P<kind>cluster|pool|slo|schedule)/new/$", views.edit_object, name="object-create"),
    re_path(r"^(?P<kind>cluster|pool|slo|schedule)/(?P<pk>[0-9]+)/edit/$", views.edit_object, name="object-edit"),
    re_path(r"^(?P<kind>cluster|pool|slo|schedule)/(?P<pk>[0-9]+)/delete/$", views.delete_object, name="object-delete"),
    path("audit/", views.audit_log, name="audit"),
    path("", include("scaling.urls")),
    path("", include("incidents.urls")),
    path("healthz", views.healthz, name="healthz"),
    path("livez", views.livez, name="livez"),
    # Pages without an icon link (the admin) make browsers ask for /favicon.ico: the same icon.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("metrics", views.metrics, name="metrics"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(("controlplane.api.urls", "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI is for people: a login page first. The schema also takes an API token.
    path("api/docs/", login_required(SpectacularSwaggerSplitView.as_view(
        url_name="schema", template_name="controlplane/swagger_ui.html")), name="api-docs"),
    # Any other address under /api/ (an id that is not a number, a typo) answers JSON like the API does.
    re_path(r"^api/", views.api_not_found),
]
