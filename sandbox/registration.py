"""`--register`: record the running sandbox as a Cluster with its Pools in Headroom's database.

Idempotent: records are found by name and updated in place (the sandbox's ports change on every
start), so the control loop manages the sandbox like a real cluster.
"""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction

from sandbox.runtime import Sandbox

CLUSTER_NAME = "sandbox"
TEAM_NAME, TEAM_SLUG = "Sandbox", "sandbox"


class RegistrationError(RuntimeError):
    """The records could not be written; the message says why and what to do."""


def register(sandbox: Sandbox) -> str:
    """Create or update the sandbox's Cluster and Pool rows; returns a one-line summary."""
    from controlplane.choices import ScalingTarget
    from controlplane.models import Cluster, Pool, Team

    speed = sandbox.config.speed
    try:
        with transaction.atomic():
            team, _ = Team.objects.get_or_create(slug=TEAM_SLUG, defaults={"name": TEAM_NAME})
            cluster, _ = Cluster.objects.get_or_create(name=CLUSTER_NAME, defaults={"team": team})
            cluster.kube_api_url = sandbox.cluster.url
            cluster.prometheus_url = sandbox.prometheus.url if sandbox.prometheus else ""
            cluster.region = "local"
            # Prices from the simulator's profiles, so cost reports work on the sandbox too.
            cluster.gpu_prices = {**cluster.gpu_prices, **{
                spec.profile.gpu_type: {"on_demand": spec.profile.gpu_hour_usd} for spec in sandbox.specs}}
            cluster.full_clean()
            cluster.save()
            for spec in sandbox.specs:
                pool = Pool.objects.filter(cluster=cluster, name=spec.name).first() or Pool(
                    cluster=cluster, team=cluster.team, name=spec.name)
                cold_p50 = spec.profile.cold_start_p50_s if spec.cold_start_s is None else spec.cold_start_s
                cold_p95 = spec.profile.cold_start_p95_s if spec.cold_start_s is None else spec.cold_start_s
                pool.namespace = spec.namespace
                pool.deployment = spec.name
                pool.model_name = spec.served_model
                pool.gpu_type = spec.profile.gpu_type
                pool.gpus_per_replica = spec.profile.gpus_per_replica
                pool.min_replicas = spec.min_replicas
                pool.max_replicas = spec.max_replicas
                # The control loop runs on the wall clock: register what a replica really takes.
                pool.cold_start_p50_s = cold_p50 / speed
                pool.cold_start_p95_s = max(cold_p50, cold_p95) / speed
                pool.scaling_target = ScalingTarget.DEPLOYMENT
                pool.route_name = sandbox.cluster.route_name
                pool.route_backend = spec.name
                pool.full_clean()
                pool.save()
    except ValidationError as error:
        raise RegistrationError(f"the sandbox's records are invalid: {error.messages}") from None
    except DatabaseError as error:
        raise RegistrationError(f"could not write to the database ({error}); "
                                "run `python manage.py migrate` first") from None
    return f"registered cluster {CLUSTER_NAME!r} with pools {', '.join(s.name for s in sandbox.specs)}"
