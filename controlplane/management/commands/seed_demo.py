"""`manage.py seed_demo`: the demo fleet (idempotent: running it twice changes nothing)."""
from __future__ import annotations

from datetime import time

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from controlplane import netguard, services
from controlplane.choices import Channel, PriorityTier, Role, SloIndicator, Weekday
from controlplane.models import SLO, Cluster, Pool, ScheduleWindow, Team

DEMO_PASSWORD = "headroom-demo"

# alice is on call for ML Platform, bob approves for the same team, charlie belongs to Search only.
USERS = [
    ("alice", "ml-platform", Role.OPERATOR),
    ("bob", "ml-platform", Role.ADMIN),
    ("charlie", "search", Role.ADMIN),
]

GPU_PRICES = {"H100": {"on_demand": 4.5, "spot": 2.1}, "L4": {"on_demand": 0.8, "spot": 0.35}}

# Search's reranker runs in ML Platform's European cluster, which ML Platform shares with Search.
CLUSTERS = [
    {"name": "gpu-us-east", "team": "ml-platform", "region": "us-east-1", "time_zone": "America/New_York",
     "shared_with": []},
    {"name": "gpu-eu-west", "team": "ml-platform", "region": "eu-west-1", "time_zone": "Europe/Paris",
     "shared_with": ["search"]},
]

POOLS = [
    # name, cluster, team, model, gpu, gpus/replica, min, max, tier
    ("chat-llama-1b", "gpu-us-east", "ml-platform", "llama-3.2-1b-instruct", "L4", 1, 1, 8, PriorityTier.STANDARD),
    ("chat-llama-8b", "gpu-us-east", "ml-platform", "llama-3.1-8b-instruct", "H100", 1, 2, 16, PriorityTier.CRITICAL),
    ("code-qwen-7b", "gpu-us-east", "ml-platform", "qwen2.5-coder-7b-instruct", "H100", 1, 1, 12, PriorityTier.STANDARD),
    ("chat-llama-8b", "gpu-eu-west", "ml-platform", "llama-3.1-8b-instruct", "H100", 1, 2, 12, PriorityTier.CRITICAL),
    ("search-rerank-1b", "gpu-eu-west", "search", "llama-3.2-1b-instruct", "L4", 1, 1, 6, PriorityTier.BATCH),
]


def check_url(option: str, field_name: str, url: str) -> None:
    """Refuse a URL the clusters' model would refuse, before anything is written (not a traceback at the end)."""
    try:
        Cluster._meta.get_field(field_name).clean(url, None)
    except ValidationError as exc:
        raise CommandError(f"{option} {url!r}: {' '.join(exc.messages)}") from None
    reason = netguard.literal_refusal(url, netguard.CLUSTERS)
    if reason is None:
        return
    hint = ""
    if reason.endswith(f"(not in {netguard.CLUSTERS})"):  # the network guard, not the URL's shape
        hint = f" Add its network to {netguard.CLUSTERS}"
        hint += " (or run with DEBUG=1, which allows loopback)." if "loopback" in reason else "."
    raise CommandError(f"{option} {url!r}: Headroom does not connect there: {reason}.{hint}")


class Command(BaseCommand):
    help = "Create or refresh the demo fleet: 2 clusters, 5 pools with SLOs and schedules, users alice/bob/charlie."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--kube-api-url", default="http://127.0.0.1:8081", help="the clusters' API address")
        parser.add_argument("--prometheus-url", default="", help="the clusters' Prometheus address")

    @transaction.atomic
    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        check_url("--kube-api-url", "kube_api_url", options["kube_api_url"])
        if options["prometheus_url"]:
            check_url("--prometheus-url", "prometheus_url", options["prometheus_url"])
        actor = services.Actor(user=None, channel=Channel.CLI)

        def upsert(model, defaults, **lookup):  # noqa: ANN001, ANN003, ANN202
            return services.upsert_with_audit(actor, model, lookup, defaults)

        teams = {
            slug: upsert(Team, {"name": name}, slug=slug)
            for slug, name in (("ml-platform", "ML Platform"), ("search", "Search"))
        }
        user_model = get_user_model()
        for username, team, role in USERS:
            user, created = user_model.objects.get_or_create(username=username, defaults={"email": f"{username}@example.com"})
            if created or not user.has_usable_password():
                user.set_password(DEMO_PASSWORD)
                user.save()
            services.set_membership(user, teams[team], role, actor)
        clusters = {}
        for spec in CLUSTERS:
            clusters[spec["name"]] = upsert(
                Cluster,
                {
                    "team": teams[spec["team"]],
                    "region": spec["region"],
                    "time_zone": spec["time_zone"],
                    "kube_api_url": options["kube_api_url"],
                    "prometheus_url": options["prometheus_url"],
                    "credentials_ref": f"kubeconfig:{spec['name']}",
                    "off_hours": [{"weekdays": [5, 6], "start": "00:00", "end": "23:59"},
                                  {"weekdays": [0, 1, 2, 3, 4], "start": "22:00", "end": "06:00"}],
                    "gpu_prices": GPU_PRICES,
                },
                name=spec["name"],
            )
            services.set_sharing(actor, clusters[spec["name"]], [teams[slug] for slug in spec["shared_with"]])
        pools = {}
        for name, cluster, team, model, gpu, gpus, low, high, tier in POOLS:
            pool = upsert(
                Pool,
                {
                    "team": teams[team], "namespace": "inference", "deployment": f"vllm-{name}",
                    "model_name": model, "gpu_type": gpu, "gpus_per_replica": gpus,
                    "min_replicas": low, "max_replicas": high, "priority": tier,
                    "route_name": f"{name}-route", "route_backend": f"vllm-{name}",
                    "cold_start_p50_s": 60.0, "cold_start_p95_s": 90.0,
                },
                cluster=clusters[cluster],
                name=name,
            )
            pools[(cluster, name)] = pool
            upsert(SLO, {"threshold": 1000, "objective": 0.99}, pool=pool, indicator=SloIndicator.TTFT_P95)
            upsert(SLO, {"threshold": 8000, "objective": 0.99}, pool=pool, indicator=SloIndicator.E2E_P95)
            upsert(SLO, {"threshold": 0.01, "objective": 0.999}, pool=pool, indicator=SloIndicator.ERROR_RATE)
            time_zone = clusters[cluster].time_zone
            for weekday in (Weekday.MONDAY, Weekday.TUESDAY, Weekday.WEDNESDAY, Weekday.THURSDAY, Weekday.FRIDAY):
                upsert(
                    ScheduleWindow,
                    {"weekday": weekday, "start": time(9, 0), "end": time(18, 0), "time_zone": time_zone,
                     "prescale_factor": 1.4, "lead_minutes": 10},
                    pool=pool,
                    name=f"business-hours-{Weekday(weekday).label.lower()}",
                )
        primary = pools[("gpu-us-east", "chat-llama-8b")]
        upsert(Pool, {"fallback_pool": pools[("gpu-us-east", "chat-llama-1b")]}, pk=primary.pk)
        from incidents import playbooks  # the incidents app owns playbooks; seeded here with the fleet

        for team in teams.values():
            playbooks.seed_surge_playbook(team, actor)
        self.stdout.write(
            f"Demo fleet ready: {len(clusters)} clusters, {len(pools)} pools. "
            f"Log in as alice, bob or charlie with password {DEMO_PASSWORD!r}."
        )
