"""Chaos tiers reuse the personas, the sandbox's Kubernetes emulator and the notification receiver."""
from tests.core.conftest import alice, bob, charlie, cluster, ml_team, pool, search_pool, search_team  # noqa: F401
from tests.incidents.conftest import allow_loopback, integrations_on, receiver, slack_channel  # noqa: F401
from tests.scaling.conftest import kube, kube_pool  # noqa: F401
from tests.integration.conftest import broker, redis_url, start_worker  # noqa: F401
