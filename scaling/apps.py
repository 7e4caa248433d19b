from django.apps import AppConfig
from django.db.models.signals import post_save


class ScalingConfig(AppConfig):
    name = "scaling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Fallbacks and breakers add their events to incidents' timelines (incidents/timeline.py's registry).
        from scaling import prescale_shift, timeline_sources  # noqa: F401

        post_save.connect(prescale_shift.on_proposal_event, sender="scaling.ProposalEvent",
                          dispatch_uid="scaling-prescale-shift")
