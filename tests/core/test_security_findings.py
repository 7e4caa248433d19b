"""Issue 18's findings, one test each: login throttling, the Content-Security-Policy, HTTPS settings,
clean 400s for hostile input, /healthz details, token lifetimes, who may read the schema."""
from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError
from django.test import Client
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from controlplane import views
from controlplane.choices import Role
from controlplane.models import Membership, Pool, Team

from .conftest import token_client

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fast_passwords(settings) -> None:  # noqa: ANN001
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def vera(ml_team: Team) -> User:
    """A viewer of ML Platform."""
    user = User.objects.create_user(username="vera", password="pw-vera")
    Membership.objects.create(user=user, team=ml_team, role=Role.VIEWER)
    return user


def _login(client: Client, username: str, password: str, address: str = "198.51.100.7", path: str = "/login/"):  # noqa: ANN202
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


# --- login throttling ---------------------------------------------------------------------------


def test_it_throttles_wrong_passwords_for_one_user_name(alice: User, bob: User) -> None:
    client = Client()
    answers = [_login(client, "alice", f"guess-{n}").status_code for n in range(25)]
    assert answers[:5] == [200] * 5 and answers[5:] == [429] * 20
    refused = _login(client, "alice", "pw-alice")  # even the right password waits
    assert refused.status_code == 429 and int(refused["Retry-After"]) == 900
    assert "Too many failed logins for this user name or from your address. Try again in 15 minutes" in refused.content.decode()
    assert _login(Client(), "bob", "pw-bob", address="198.51.100.7").status_code == 302  # others still log in


def test_it_throttles_one_address_guessing_many_user_names(alice: User, settings) -> None:  # noqa: ANN001
    settings.LOGIN_FAILURES_PER_ADDRESS = 8
    client = Client()
    answers = [_login(client, f"user{n}", "guess").status_code for n in range(10)]
    assert answers == [200] * 8 + [429] * 2
    assert _login(client, "alice", "pw-alice").status_code == 429
    assert _login(Client(), "alice", "pw-alice", address="203.0.113.9").status_code == 302


def test_a_success_clears_the_user_names_count_not_the_addresss(alice: User, settings) -> None:  # noqa: ANN001
    settings.LOGIN_FAILURES_PER_ADDRESS = 6
    for _ in range(4):
        _login(Client(), "alice", "wrong")
    assert _login(Client(), "alice", "pw-alice").status_code == 302
    assert [_login(Client(), "alice", "wrong").status_code for _ in range(3)] == [200, 200, 429]  # address: 4 + 2


def test_behind_a_proxy_it_counts_the_address_the_proxy_saw(alice: User, settings) -> None:  # noqa: ANN001
    settings.TRUSTED_PROXY_HOPS = 1
    settings.LOGIN_FAILURES_PER_ADDRESS = 3
    for n in range(3):
        Client().post("/login/", {"username": f"u{n}", "password": "x"}, REMOTE_ADDR="10.0.0.2",
                      HTTP_X_FORWARDED_FOR="1.2.3.4, 198.51.100.7")
    blocked = Client().post("/login/", {"username": "alice", "password": "pw-alice"}, REMOTE_ADDR="10.0.0.2",
                            HTTP_X_FORWARDED_FOR="198.51.100.7")
    other = Client().post("/login/", {"username": "alice", "password": "pw-alice"}, REMOTE_ADDR="10.0.0.2",
                          HTTP_X_FORWARDED_FOR="198.51.100.8")
    assert (blocked.status_code, other.status_code) == (429, 302)


def test_the_admin_login_is_throttled_too(alice: User) -> None:
    User.objects.create_superuser("root", password="pw-root")
    for _ in range(5):
        _login(Client(), "root", "wrong", path="/admin/login/")
    page = _login(Client(), "root", "pw-root", path="/admin/login/")
    assert page.status_code == 200 and "Too many failed logins" in page.content.decode()


def test_api_tokens_work_from_a_throttled_address(alice: User, pool: Pool) -> None:
    for _ in range(25):
        _login(Client(), "alice", "wrong", address="127.0.0.1")
    assert token_client(alice).get("/api/v1/pools/", REMOTE_ADDR="127.0.0.1").status_code == 200
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token hr_not-a-token")
    assert bad.get("/api/v1/pools/").status_code == 401


# --- Content-Security-Policy --------------------------------------------------------------------


def test_every_page_has_a_csp_and_no_inline_script_or_style(alice: User, pool: Pool) -> None:
    client = Client()
    assert "default-src 'self'" in client.get("/login/")["Content-Security-Policy"]
    client.force_login(alice)
    for path in ["/", f"/pools/{pool.pk}/", "/clusters/", "/audit/", "/approvals/", "/integrations/channels/",
                 "/api/docs/", f"/slo/{pool.slos.get().pk}/delete/"]:
        page = client.get(path)
        policy = page["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "style-src 'self'" in policy and "unsafe" not in policy, path
        html = page.content.decode()
        assert "<style" not in html and " style=" not in html and "javascript:" not in html, path
        assert all('src="' in tag.split(">")[0] for tag in html.split("<script")[1:]), path
        # Scripts and stylesheets come from this origin only (a CSRF token may spell "cdn" by chance).
        assets = re.findall(r'<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]*)"', html)
        assert all(url.startswith("/") and not url.startswith("//") for url in assets), (path, assets)


# --- HTTPS and check --deploy -------------------------------------------------------------------


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("DEBUG", "HTTPS_ONLY")}
    environment |= {"SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "headroom.example.com"} | env
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=120)


def test_production_settings_pass_check_deploy_without_a_warning() -> None:
    result = _manage("check", "--deploy", "--fail-level", "WARNING", SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_the_demo_keeps_plain_http_on_127_0_0_1() -> None:
    script = ("from django.conf import settings as s; print(s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, "
              "s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS)")
    result = _manage("shell", "-v", "0", "-c", script, DEBUG="1")
    assert result.stdout.split() == ["False", "False", "False", "0"], result.stderr


def test_behind_a_tls_proxy_it_redirects_http_and_trusts_the_proxys_header(settings, alice: User) -> None:  # noqa: ANN001
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    client = Client()
    assert client.get("/login/")["Location"] == "https://testserver/login/"
    page = client.get("/login/", HTTP_X_FORWARDED_PROTO="https")
    assert page.status_code == 200 and "max-age=31536000" in page["Strict-Transport-Security"]
    assert client.get("/healthz").status_code == 200  # the kubelet's probe speaks plain http


@pytest.mark.parametrize("raw, expected", [
    ("X-Forwarded-Proto", ("HTTP_X_FORWARDED_PROTO", "https")),
    ("X-Forwarded-Ssl: on", ("HTTP_X_FORWARDED_SSL", "on")),
    ("", None),
])
def test_secure_proxy_ssl_header_table(monkeypatch, raw: str, expected) -> None:  # noqa: ANN001
    from controlplane.settings import env_proxy_ssl_header

    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", raw)
    assert env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER") == expected


def test_a_bad_secure_proxy_ssl_header_stops_start_up() -> None:
    result = _manage("check", SECURE_PROXY_SSL_HEADER="X Forwarded Proto")
    assert result.returncode != 0 and "SECURE_PROXY_SSL_HEADER must be a header name" in result.stderr


# --- hostile input: clean 400s ------------------------------------------------------------------


@pytest.mark.parametrize("depth", [100_000, 40])
def test_a_deeply_nested_body_is_a_clean_400(vera: User, depth: int) -> None:
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(vera)
    answer = client.post("/api/v1/tokens/", "[" * depth + "]" * depth, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json() == {"detail": "JSON parse error - the body nests deeper than 32 levels."}


def test_a_body_of_ordinary_depth_still_parses(vera: User) -> None:
    client = APIClient()
    client.force_authenticate(vera)
    nested: dict = {}
    for _ in range(30):
        nested = {"a": nested}
    assert client.post("/api/v1/tokens/", {"name": "ci", "extra": nested}, format="json").status_code == 201


@pytest.mark.parametrize("query, field", [
    ("limit=99999999999999999999", "limit"), ("limit=9223372036854775808", "limit"), ("limit=501", "limit"),
    ("limit=0", "limit"), ("limit=abc", "limit"), ("limit=٣", "limit"), ("offset=99999999999999999999", "offset"),
    ("offset=-1", "offset"),
])
def test_an_out_of_range_page_is_a_clean_400_naming_the_parameter(vera: User, pool: Pool, query: str, field: str) -> None:
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(vera)
    answer = client.get(f"/api/v1/pools/?{query}")
    assert answer.status_code == 400 and list(answer.json()) == [field]


def test_the_largest_page_is_500(vera: User, pool: Pool) -> None:
    client = APIClient()
    client.force_authenticate(vera)
    assert client.get("/api/v1/pools/?limit=500&offset=0").json()["count"] == 1


# --- /healthz -----------------------------------------------------------------------------------


class _DownDatabase:
    def cursor(self):  # noqa: ANN201
        raise OperationalError('connection to server at "db.internal" (10.1.2.3), port 5432 failed: password '
                               'authentication failed for user "headroom"')


def test_healthz_keeps_the_database_error_for_staff_and_the_log(monkeypatch, alice: User, caplog) -> None:  # noqa: ANN001
    monkeypatch.setattr(views, "connection", _DownDatabase())
    anonymous = Client().get("/healthz")
    assert anonymous.status_code == 503 and anonymous.json() == {"status": "error", "database": "unreachable"}
    member = Client()
    member.force_login(alice)
    assert "db.internal" not in member.get("/healthz").content.decode()
    staff = Client()
    staff.force_login(User.objects.create_superuser("root", password="pw-root"))
    assert "db.internal" in staff.get("/healthz").json()["detail"]
    assert "db.internal" in caplog.text


# --- API tokens and the schema ------------------------------------------------------------------


def test_a_token_cannot_be_created_already_expired(vera: User) -> None:
    client = APIClient()
    client.force_authenticate(vera)
    past = (timezone.now() - timedelta(minutes=1)).isoformat()
    answer = client.post("/api/v1/tokens/", {"name": "ci", "expires_at": past}, format="json")
    assert answer.status_code == 400 and list(answer.json()) == ["expires_at"]


def test_a_token_expires_after_the_default_lifetime(vera: User, settings) -> None:  # noqa: ANN001
    client = APIClient()
    client.force_authenticate(vera)
    expires_at = parse_datetime(client.post("/api/v1/tokens/", {"name": "ci"}, format="json").json()["expires_at"])
    assert abs(expires_at - (timezone.now() + timedelta(days=90))) < timedelta(minutes=1)
    settings.API_TOKEN_DEFAULT_DAYS = 0
    assert client.post("/api/v1/tokens/", {"name": "forever"}, format="json").json()["expires_at"] is None


def test_no_token_outlives_the_longest_lifetime_allowed(vera: User, settings) -> None:  # noqa: ANN001
    """A stolen token may mint others; API_TOKEN_MAX_DAYS bounds how long any of them outlives the theft."""
    settings.API_TOKEN_MAX_DAYS, settings.API_TOKEN_DEFAULT_DAYS = 30, 30
    client = APIClient()
    client.force_authenticate(vera)
    far = (timezone.now() + timedelta(days=31)).isoformat()
    refused = client.post("/api/v1/tokens/", {"name": "forever", "expires_at": far}, format="json")
    assert refused.status_code == 400 and "At most 30 days from now (API_TOKEN_MAX_DAYS)" in refused.json()["expires_at"][0]
    near = (timezone.now() + timedelta(days=29)).isoformat()
    assert client.post("/api/v1/tokens/", {"name": "ci", "expires_at": near}, format="json").status_code == 201


def test_the_schema_and_docs_need_a_signed_in_user(vera: User) -> None:
    anonymous = APIClient()
    assert anonymous.get("/api/schema/").status_code == 401
    docs = Client().get("/api/docs/")
    assert docs.status_code == 302 and docs["Location"].startswith("/login/")
    assert token_client(vera).get("/api/schema/").status_code == 200
    browser = Client()
    browser.force_login(vera)
    assert browser.get("/api/docs/").status_code == 200
    script = browser.get("/api/docs/?script=")
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
    assert json.loads(json.dumps(browser.get("/api/schema/?format=json").json()))["info"]["title"] == "Headroom API"
