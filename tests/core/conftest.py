"""Personas and a small fleet, built inline: alice (operator) and bob (admin) of ML Platform,
charlie (admin of Search) the outsider."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from controlplane import services
from controlplane.choices import Channel, Role, SloIndicator
from controlplane.models import SLO, Cluster, Membership, Pool, Team

CLI = services.Actor(user=None, channel=Channel.CLI)


@pytest.fixture
def ml_team(db) -> Team:  # noqa: ANN001
    return Team.objects.create(name="ML Platform", slug="ml-platform")


@pytest.fixture
def search_team(db) -> Team:  # noqa: ANN001
    return Team.objects.create(name="Search", slug="search")


def _member(username: str, team: Team, role: str) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    Membership.objects.create(user=user, team=team, role=role)
    return user


@pytest.fixture
def alice(ml_team: Team) -> User:
    return _member("alice", ml_team, Role.OPERATOR)


@pytest.fixture
def bob(ml_team: Team) -> User:
    return _member("bob", ml_team, Role.ADMIN)


@pytest.fixture
def charlie(search_team: Team) -> User:
    return _member("charlie", search_team, Role.ADMIN)


@pytest.fixture
def cluster(ml_team: Team) -> Cluster:
    return Cluster.objects.create(name="gpu-us-east", team=ml_team, kube_api_url="http://127.0.0.1:6443")


@pytest.fixture
def pool(cluster: Cluster, ml_team: Team) -> Pool:
    pool = Pool.objects.create(
        cluster=cluster, team=ml_team, name="chat-8b", namespace="inference", deployment="vllm-chat-8b",
        model_name="llama-3.1-8b", gpu_type="H100", min_replicas=1, max_replicas=8,
    )
    SLO.objects.create(pool=pool, indicator=SloIndicator.TTFT_P95, threshold=1000, objective=0.99)
    return pool


@pytest.fixture
def search_pool(search_team: Team) -> Pool:
    cluster = Cluster.objects.create(name="gpu-eu", team=search_team, kube_api_url="http://127.0.0.1:6444")
    return Pool.objects.create(
        cluster=cluster, team=search_team, name="rerank", namespace="search", deployment="vllm-rerank",
        model_name="llama-3.2-1b", gpu_type="L4", min_replicas=1, max_replicas=4,
    )


def token_client(user: User) -> APIClient:
    """An API client authenticated the way automation is: with a hashed API token."""
    _, raw = services.issue_token(user, CLI)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client
