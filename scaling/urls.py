from django.urls import path, re_path

from scaling import views

urlpatterns = [
    path("approvals/", views.inbox, name="approvals"),
    path("approvals/pending/", views.pending, name="approvals-pending"),
    path("approvals/history/", views.history, name="approvals-history"),
    path("approvals/bulk/", views.bulk_decide, name="approvals-bulk"),
    path("pools/<int:pk>/decisions/", views.pool_decisions, name="pool-decisions"),
    path("proposals/<int:pk>/card/", views.card, name="proposal-card"),
    re_path(r"^proposals/(?P<pk>[0-9]+)/(?P<verdict>approve|reject)/$", views.decide, name="proposal-decide"),
    re_path(r"^shifts/(?P<pk>[0-9]+)/(?P<verb>pause|resume|rollback|approve)/$", views.shift_act, name="shift-act"),
    re_path(r"^pools/(?P<pk>[0-9]+)/fallback/(?P<verb>restore|approve)/$", views.fallback_act, name="fallback-act"),
    path("pools/<int:pk>/reports/", views.pool_reports, name="pool-reports"),
    path("reports/<int:pk>/", views.report_detail, name="warm-pool-report"),
    path("reports/<int:pk>/body/", views.report_body, name="warm-pool-report-body"),
    re_path(r"^reports/(?P<pk>[0-9]+)/download/(?P<name>curve\.svg|worst-day\.svg|csv|json)$", views.report_file,
            name="warm-pool-report-file"),
]
