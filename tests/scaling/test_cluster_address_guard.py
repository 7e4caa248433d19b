"""A cluster's Kubernetes API and Prometheus URLs go through the same connect-time address guard as
webhooks, with the admin's CLUSTER_ALLOWED_NETWORKS (issue 18: "cluster addresses have no guard")."""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.auth.models import User

from controlplane.models import Cluster, Pool
from sandbox.kube.cluster import SandboxCluster
from scaling.drivers.cluster import DriverError, Workload
from scaling.drivers.kubernetes import KubernetesDriver
from scaling.drivers.prometheus import HistoryUnavailable, PrometheusConfig, PrometheusSignalSource
from scaling.drivers.signals import PoolSelector

from tests.core.conftest import token_client

WORKLOAD = Workload(namespace="inference", deployment="vllm-chat-8b")


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # one read sends its ~20 queries at once
    daemon_threads = True


class Listener:
    """An HTTP server on 127.0.0.1 that counts the requests reaching it (and can redirect them)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.redirect_to = ""
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                listener.paths.append(self.path)
                if listener.redirect_to:
                    self.send_response(302)
                    self.send_header("Location", listener.redirect_to)
                    self.end_headers()
                    return
                body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    running = Listener()
    yield running
    running.close()


def test_the_kubernetes_driver_refuses_loopback_unless_allow_listed(settings, kube: SandboxCluster) -> None:  # noqa: ANN001
    settings.CLUSTER_ALLOWED_NETWORKS = []
    with pytest.raises(DriverError, match="127.0.0.1 is a loopback address, refused \\(not in CLUSTER_ALLOWED_NETWORKS\\)") as refused:
        KubernetesDriver(kube.url).status(WORKLOAD)
    assert refused.value.permanent  # retrying cannot help
    settings.CLUSTER_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    assert KubernetesDriver(kube.url).status(WORKLOAD).desired == 1


def test_a_host_name_is_judged_by_what_it_resolves_to_at_connect_time(settings, kube: SandboxCluster) -> None:  # noqa: ANN001
    settings.CLUSTER_ALLOWED_NETWORKS = []
    by_name = kube.url.replace("127.0.0.1", "localhost")  # a name passes the save-time check; its address does not
    with pytest.raises(DriverError, match="localhost: .* is a loopback address"):
        KubernetesDriver(by_name).scale(WORKLOAD, 3)
    settings.CLUSTER_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    assert KubernetesDriver(kube.url).status(WORKLOAD).desired == 1  # nothing was written while refused


def test_a_dns_answer_that_changes_after_saving_is_caught(settings, kube: SandboxCluster, monkeypatch) -> None:  # noqa: ANN001
    """DNS rebinding: the name looked public when saved; at connect time it points at the metadata service."""
    settings.CLUSTER_ALLOWED_NETWORKS = []
    real = socket.getaddrinfo

    def rebound(host, port, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if host == "api.gpu.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebound)
    with pytest.raises(DriverError, match="169.254.169.254 is a link-local address"):
        KubernetesDriver("http://api.gpu.example:6443").status(WORKLOAD)


def test_prometheus_on_a_forbidden_address_reads_unknown_and_is_never_called(settings, listener: Listener) -> None:  # noqa: ANN001
    settings.CLUSTER_ALLOWED_NETWORKS = []
    source = PrometheusSignalSource(PrometheusConfig(f"http://127.0.0.1:{listener.port}", timeout_s=5.0))
    read = source.read([PoolSelector(name="chat", labels={"model_name": "llama"})])
    assert read.errors and all("loopback address, refused" in error for error in read.errors.values())
    assert read["chat"].queue_depth.value is None  # unknown, never zero
    with pytest.raises(HistoryUnavailable, match="CLUSTER_ALLOWED_NETWORKS"):
        source.rate_history([PoolSelector(name="chat", labels={"model_name": "llama"})], 0, 60, 15)
    assert listener.paths == []
    settings.CLUSTER_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    assert source.read([PoolSelector(name="chat", labels={"model_name": "llama"})]).errors == {}
    assert listener.paths


def test_a_prometheus_redirect_to_a_forbidden_address_is_refused(settings, listener: Listener) -> None:  # noqa: ANN001
    settings.CLUSTER_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    listener.redirect_to = "http://169.254.169.254/latest/meta-data/"
    read = PrometheusSignalSource(PrometheusConfig(f"http://127.0.0.1:{listener.port}", timeout_s=5.0)).read(
        [PoolSelector(name="chat", labels={"model_name": "llama"})])
    assert read.errors and all("169.254.169.254 is a link-local address" in error for error in read.errors.values())


@pytest.mark.parametrize("field, url, reason", [
    ("kube_api_url", "http://169.254.169.254/", "169.254.169.254 is a link-local address"),
    ("kube_api_url", "https://[::ffff:127.0.0.1]:6443", "127.0.0.1 is a loopback address"),
    ("prometheus_url", "http://10.0.0.7:9090", "10.0.0.7 is a private address"),
    ("prometheus_url", "ftp://prometheus.example/", "only http and https URLs are allowed"),
])
def test_saving_a_cluster_with_a_forbidden_literal_is_a_400_naming_the_field(
        settings, bob: User, field: str, url: str, reason: str) -> None:  # noqa: ANN001
    settings.CLUSTER_ALLOWED_NETWORKS = []
    body = {"name": "gpu-2", "team": "ml-platform", "kube_api_url": "https://api.gpu.example", field: url}
    response = token_client(bob).post("/api/v1/clusters/", body, format="json")
    assert response.status_code == 400, response.content
    assert reason in str(response.json()[field])
    assert not Cluster.objects.filter(name="gpu-2").exists()


def test_an_allow_listed_internal_cluster_is_saved(settings, bob: User) -> None:  # noqa: ANN001
    settings.CLUSTER_ALLOWED_NETWORKS = ["10.0.0.0/16"]
    body = {"name": "gpu-2", "team": "ml-platform", "kube_api_url": "https://10.0.0.1:6443",
            "prometheus_url": "http://10.0.3.4:9090"}
    assert token_client(bob).post("/api/v1/clusters/", body, format="json").status_code == 201


def test_the_loop_reports_a_refused_cluster_and_holds(settings, kube_pool: Pool) -> None:  # noqa: ANN001
    from scaling import loop

    settings.CLUSTER_ALLOWED_NETWORKS = []
    report = loop.tick([Pool.objects.select_related("cluster", "team").prefetch_related("slos", "schedules")
                        .get(pk=kube_pool.pk)])
    assert "loopback address, refused" in report.errors[f"{kube_pool}: kubernetes"]
    assert report.pools[0].decided["current_replicas"] is None
