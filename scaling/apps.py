from django.apps import AppConfig
from django.db.models.signals import post_save, pre_delete, pre_save


class ScalingConfig(AppConfig):
    name = "scaling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Fallbacks and breakers add their events to incidents' timelines (incidents/timeline.py's registry).
        from scaling import fallbacks, prescale_shift, services, timeline_sources, traffic  # noqa: F401

        post_save.connect(prescale_shift.on_proposal_event, sender="scaling.ProposalEvent",
                          dispatch_uid="scaling-prescale-shift")
        pre_delete.connect(traffic.refuse_deleting_a_route_writer, sender="controlplane.Pool",
                           dispatch_uid="scaling-refuse-deleting-a-route-writer")
        pre_save.connect(fallbacks.refuse_retargeting_an_open_fallback, sender="controlplane.Pool",
                         dispatch_uid="scaling-refuse-retargeting-an-open-fallback")
        post_save.connect(services.supersede_what_an_edit_changed, sender="controlplane.Pool",
                          dispatch_uid="scaling-supersede-what-an-edit-changed")
