"""`--register`: record the running sandbox as a Cluster with its Pools in Headroom's database.

Idempotent: records are found by name and updated in place (the sandbox's ports change on every
start), so the control loop manages the sandbox like a real cluster.
"""
from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction

from sandbox.fleet import replica_capacity_rps
from sandbox.runtime import Sandbox

CLUSTER_NAME = "sandbox"
TEAM_NAME, TEAM_SLUG = "Sandbox", "sandbox"


class RegistrationError(RuntimeError):
    """The records could not be written; the message says why and what to do."""


def sandbox_rate_window(speed: float) -> str:
    """The Prometheus rate window that spans one scenario minute at `speed` (at least 5 s)."""
    return f"{max(5, round(60 / speed))}s"


def retire_previous() -> str:
    """Delete the previous run's sandbox cluster with everything that hangs off it (audited).

    A sandbox is new on every start: its ports, pods and traffic are gone, so the last run's
    proposals, incidents, alerts and signal history describe nothing that exists. Left in place they
    would show up in the new run's inbox and feed its forecasts; the audit log keeps what was deleted.
    A run stopped mid-surge leaves an open incident, a fallback or a shift that would hold its pools:
    they end first, each with why on record, since nothing is left for them to act on.
    """
    from controlplane import services
    from controlplane.choices import Channel
    from controlplane.models import Cluster
    from incidents import incidents
    from incidents.choices import ACTIVE_INCIDENT_STATES
    from scaling import fallbacks, traffic
    from scaling.choices import FALLBACK_OPEN_PHASES, SHIFT_ACTIVE_PHASES
    from scaling.models import FallbackActivation

    cluster = Cluster.objects.filter(name=CLUSTER_NAME).first()
    if cluster is None:
        return "no previous sandbox"
    actor = services.Actor(user=None, channel=Channel.CLI)
    gone = "the sandbox it ran on was stopped and is replaced by a new run"
    try:
        with transaction.atomic():
            for shift_id in cluster.shifts.filter(phase__in=SHIFT_ACTIVE_PHASES).values_list("pk", flat=True):
                traffic.abandon(shift_id, actor, f"{gone}: its route is gone, nothing written")
            for activation_id in FallbackActivation.objects.filter(
                    pool__cluster=cluster, phase__in=FALLBACK_OPEN_PHASES).values_list("pk", flat=True):
                fallbacks.abandon(activation_id, actor, f"{gone}: its route is gone, nothing written")
            for incident_id in cluster.incidents.filter(state__in=ACTIVE_INCIDENT_STATES).values_list("pk", flat=True):
                incidents.close_abandoned(incident_id, f"resolved: {gone}")
            pools = list(cluster.pools.all())
            for pool in pools:  # a pool protects its cluster: pools first
                services.delete_with_audit(actor, pool)
            services.delete_with_audit(actor, cluster)
    except DatabaseError as error:
        raise RegistrationError(f"could not remove the previous sandbox ({error})") from None
    return f"removed the previous sandbox and its {len(pools)} pool(s) with their proposals, incidents and history"


# The fallback policy the sandbox registers for each primary pool when it has a warm fallback pool, in
# scenario seconds (registration divides them by the speed: the loop runs on the wall clock):
# - entry on the first tick that sees the overload (the engine's default waits one more tick, 15 s, while
#   a surge queues on the primary: every request queued there misses a 1 s TTFT);
# - the return after a minute of calm, each step held 30 s, so a finite scenario shows it;
# - at most 90 % diverted: the primary keeps a share, so its latency stays measured and it can be calm
#   (the engine returns only on a known latency below the exit threshold).
FALLBACK_POLICY_S = {"entry_after_s": 0.0, "exit_after_s": 60.0, "return_step_hold_s": 30.0}
FALLBACK_MAX_SHARE = 0.9


def register(sandbox: Sandbox, team_slug: str = TEAM_SLUG) -> str:
    """Create or update the sandbox's Cluster, Pools and their TTFT SLOs (audited); returns a summary.

    With a fallback pool, each primary pool names it as its `fallback_pool` and gets a FallbackPolicy."""
    from controlplane import services
    from controlplane.choices import Channel, ScalingTarget, SloIndicator
    from controlplane.models import SLO, Cluster, Pool, Team

    actor = services.Actor(user=None, channel=Channel.CLI)
    speed = sandbox.config.speed
    try:
        with transaction.atomic():
            team = Team.objects.filter(slug=team_slug).first() or services.upsert_with_audit(
                actor, Team, {"slug": team_slug}, {"name": TEAM_NAME if team_slug == TEAM_SLUG else team_slug})
            existing = Cluster.objects.filter(name=CLUSTER_NAME).first()
            prices = {**(existing.gpu_prices if existing else {}), **{
                # Prices from the simulator's profiles, so cost figures work on the sandbox too.
                spec.profile.gpu_type: {"on_demand": spec.profile.gpu_hour_usd} for spec in sandbox.specs}}
            cluster = services.upsert_with_audit(actor, Cluster, {"name": CLUSTER_NAME}, {
                "team": team, "kube_api_url": sandbox.cluster.url, "region": "local", "gpu_prices": prices,
                "prometheus_url": sandbox.prometheus.url if sandbox.prometheus else "",
                # The control loop runs on the wall clock and the scenario `speed` times faster: a
                # minute of scenario traffic is what a rate over 1m means on a real cluster.
                "prometheus_rate_window": sandbox_rate_window(speed),
            })
            for spec in sandbox.specs:
                cold_p50 = spec.profile.cold_start_p50_s if spec.cold_start_s is None else spec.cold_start_s
                cold_p95 = spec.profile.cold_start_p95_s if spec.cold_start_s is None else spec.cold_start_s
                pool = services.upsert_with_audit(actor, Pool, {"cluster": cluster, "name": spec.name}, {
                    "team": team, "namespace": spec.namespace, "deployment": spec.name,
                    "model_name": spec.served_model, "gpu_type": spec.profile.gpu_type,
                    "gpus_per_replica": spec.profile.gpus_per_replica,
                    "min_replicas": spec.min_replicas, "max_replicas": spec.max_replicas,
                    # The control loop runs on the wall clock: register what a replica really takes.
                    "cold_start_p50_s": round(cold_p50 / speed, 1),
                    "cold_start_p95_s": round(max(cold_p50, cold_p95) / speed, 1),
                    # Latency is in model seconds, so a wall second carries `speed` times the requests.
                    "replica_capacity_rps": replica_capacity_rps(spec.profile) * speed,
                    # What the work share is read against: the prefill throughput; the batch slots are the
                    # Deployment's --max-num-seqs, which the control loop reads off its command line.
                    "prefill_tokens_per_s": spec.profile.prefill_tokens_per_s * speed,
                    "scaling_target": ScalingTarget.DEPLOYMENT,
                    "route_name": sandbox.cluster.route_name, "route_backend": spec.name,
                })
                services.upsert_with_audit(actor, SLO, {"pool": pool, "indicator": SloIndicator.TTFT_P95},
                                           {"threshold": 1000.0, "objective": 0.99})
            if sandbox.fallback_spec is not None:
                _register_fallback(actor, sandbox, cluster)
    except ValidationError as error:
        raise RegistrationError(f"the sandbox's records are invalid: {error.messages}") from None
    except DatabaseError as error:
        raise RegistrationError(f"could not write to the database ({error}); "
                                "run `python manage.py migrate` first") from None
    summary = f"registered cluster {CLUSTER_NAME!r} with pools {', '.join(s.name for s in sandbox.specs)}"
    if sandbox.fallback_spec is not None:
        summary += f" ({sandbox.fallback_spec.name} is the fallback of {', '.join(s.name for s in sandbox.primary_specs)})"
    return summary


def _register_fallback(actor: Any, sandbox: Sandbox, cluster: Any) -> None:
    """Each primary pool falls back to the sandbox's fallback pool under the engine's default policy."""
    from controlplane import services
    from controlplane.models import Pool
    from scaling.models import FallbackPolicy

    assert sandbox.fallback_spec is not None
    speed = sandbox.config.speed
    fallback = Pool.objects.get(cluster=cluster, name=sandbox.fallback_spec.name)
    for spec in sandbox.primary_specs:
        pool = services.upsert_with_audit(actor, Pool, {"cluster": cluster, "name": spec.name},
                                          {"fallback_pool": fallback})
        services.upsert_with_audit(actor, FallbackPolicy, {"pool": pool}, {
            "enabled": True, "requires_approval": False, "max_share": FALLBACK_MAX_SHARE,
            **{name: seconds / speed for name, seconds in FALLBACK_POLICY_S.items()}})
