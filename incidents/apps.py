from django.apps import AppConfig
from django.db import transaction
from django.db.models.signals import post_save, pre_delete


def _dispatch_after_commit(sender, instance, created: bool, **kwargs) -> None:  # noqa: ANN001, ANN003
    """A new proposal event is news for the channels: fan it out as soon as it is committed.

    The beat's outbox sweep catches anything this misses (a worker down, a broker outage).
    """
    if created:
        from incidents import tasks

        transaction.on_commit(tasks.dispatch_events.delay, robust=True)


class IncidentsConfig(AppConfig):
    name = "incidents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from incidents import services

        post_save.connect(_dispatch_after_commit, sender="scaling.ProposalEvent", dispatch_uid="incidents-outbox")
        pre_delete.connect(services.refuse_deleting_a_pool_in_trouble, sender="controlplane.Pool",
                           dispatch_uid="incidents-refuse-deleting-a-pool-in-trouble")
        pre_delete.connect(services.keep_the_pool_name_on_its_incidents, sender="controlplane.Pool",
                           dispatch_uid="incidents-keep-the-pool-name-on-its-incidents")
