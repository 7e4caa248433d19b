"""A `token:NAME` credential trusts the cluster's own CA when it comes beside the token as `NAME.ca.crt`, and an
API server whose certificate is not trusted is a permanent error that says what to do, not a retry every tick."""
from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from urllib3.exceptions import MaxRetryError, NewConnectionError, SSLError

from controlplane.models import Cluster
from sandbox.kube import resources as res
from sandbox.kube.server import KubeApiServer
from sandbox.kube.store import ObjectStore
from scaling.drivers.cluster import DriverError
from scaling.drivers.kubernetes import _driver_error
from scaling.drivers.registry import credentials, route_router
from scaling.drivers.routing import RouteRef

TOKEN = "sandbox-bearer-8f2c"  # noqa: S105 - a test credential for the emulator
UNTRUSTED = "the API server's certificate is not trusted"


def _cluster(url: str = "https://127.0.0.1:6443") -> Cluster:
    return Cluster(name="gpu-us-east", kube_api_url=url, credentials_ref="token:gpu-token")


@pytest.fixture
def credentials_dir(settings, tmp_path: Path) -> Path:  # noqa: ANN001
    settings.KUBE_CREDENTIALS_DIR = str(tmp_path)
    settings.KUBERNETES_ENABLED = True
    (tmp_path / "gpu-token").write_text(TOKEN + "\n")
    return tmp_path


def test_it_uses_the_ca_beside_the_token(credentials_dir: Path) -> None:
    assert credentials(_cluster()).ca_file is None  # none there: the system's trust store
    (credentials_dir / "gpu-token.ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    found = credentials(_cluster())
    assert found.token == TOKEN and found.ca_file == str(credentials_dir / "gpu-token.ca.crt")


def test_a_certificate_that_fails_verification_is_permanent() -> None:
    refused = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    refused.verify_message = "self-signed certificate in certificate chain"
    error = _driver_error("read deployment inference/chat", MaxRetryError(None, "/apis", SSLError(refused)))
    assert error.permanent and UNTRUSTED in str(error) and "self-signed certificate" in str(error)
    assert "NAME.ca.crt" in str(error) and "certificate-authority-data" in str(error)


def test_a_connection_failure_is_still_transient() -> None:
    error = _driver_error("read deployment inference/chat",
                          MaxRetryError(None, "/apis", NewConnectionError(None, "Connection refused")))
    assert not error.permanent and UNTRUSTED not in str(error)


@pytest.fixture
def private_ca(tmp_path: Path) -> Path:
    """A self-signed CA that is also the server's certificate for 127.0.0.1, as a kubeadm cluster's would be."""
    # openssl comes with `make system-deps`, as Prometheus and Chromium do.
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=headroom-test-ca", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(tmp_path / "ca.key"), "-out", str(tmp_path / "ca.crt")],
                   check=True, capture_output=True)
    return tmp_path


@pytest.fixture
def https_api(private_ca: Path) -> Iterator[KubeApiServer]:
    store = ObjectStore()
    store.create(res.HTTPROUTES, {"metadata": {"name": "chat", "namespace": "inference"},
                                  "spec": {"rules": [{"backendRefs": [{"name": "chat-8b", "port": 8000}]}]}})
    server = KubeApiServer(store)
    server.required_token = TOKEN
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(private_ca / "ca.crt", private_ca / "ca.key")
    server._httpd.socket = context.wrap_socket(server._httpd.socket, server_side=True)
    server.start()
    yield server
    server.stop()


def test_it_talks_to_an_api_server_signed_by_the_clusters_ca(https_api: KubeApiServer, credentials_dir: Path,
                                                             private_ca: Path) -> None:
    cluster = _cluster(https_api.url.replace("http://", "https://"))
    with pytest.raises(DriverError, match=UNTRUSTED) as refused:
        route_router(cluster, "httproute").read(RouteRef("inference", "chat"))
    assert refused.value.permanent
    shutil.copy(private_ca / "ca.crt", credentials_dir / "gpu-token.ca.crt")
    assert route_router(cluster, "httproute").read(RouteRef("inference", "chat")).weights == {"chat-8b": 1}
