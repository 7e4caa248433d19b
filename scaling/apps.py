from django.apps import AppConfig


class ScalingConfig(AppConfig):
    name = "scaling"

    def ready(self) -> None:
        # Fallbacks and breakers add their events to incidents' timelines (incidents/timeline.py's registry).
        from scaling import timeline_sources  # noqa: F401
