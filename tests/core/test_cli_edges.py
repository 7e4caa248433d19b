"""The management commands at their edges: a bad option is one CommandError naming it, refused before anything
is written or started; a database that is down or empty is one line, not 29 frames of traceback."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from controlplane.models import ApiToken, AuditEvent, Cluster, Pool, Team

from tests.isolation import closed_port

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> None:
    call_command(*args, stdout=StringIO(), stderr=StringIO())


# --- manage.py: the database -----------------------------------------------------------------------


def manage(database_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url, "DEBUG": "1", "SECRET_KEY": "x"}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_it_says_in_one_line_that_the_database_cannot_be_reached() -> None:
    done = manage(f"postgres://postgres@127.0.0.1:{closed_port()}/headroom", "tick")
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot reach the database 127.0.0.1:") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_it_says_in_one_line_that_the_database_has_no_tables(tmp_path: Path) -> None:
    done = manage(f"sqlite:///{tmp_path / 'empty.sqlite3'}", "tick")
    assert done.returncode == 1
    assert done.stderr.startswith("error: the database has no tables: run `make migrate`")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_other_database_errors_keep_their_traceback(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert manage(database, "migrate", "-v", "0").returncode == 0
    done = manage(database, "shell", "-c", "from django.db import connection; connection.cursor().execute('SELEC 1')")
    assert done.returncode == 1 and "Traceback" in done.stderr and "cannot reach" not in done.stderr


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("LOG_LEVEL", "loud", "LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got 'LOUD'"),
    ("DATABASE_CONN_MAX_AGE", "abc", "DATABASE_CONN_MAX_AGE must be an integer, got 'abc'"),  # not the URL's fault
    ("SLACK_ENABLED", "maybe", "SLACK_ENABLED must be a boolean (true/false, 1/0, yes/no, on/off), got 'maybe'"),
    ("SITE_URL", "headroom.example.com", "SITE_URL must be a http:// or https:// URL with a host, "
                                         "got 'headroom.example.com'"),
    ("REDIS_URL", "127.0.0.1:6379", "REDIS_URL must be a redis:// or rediss:// URL with a host, got '127.0.0.1:6379'"),
    ("PROPOSAL_RETENTION_DAYS", "3", "PROPOSAL_RETENTION_DAYS must be 0 (keep every proposal) or at least 7, got 3"),
    ("API_TOKEN_MAX_DAYS", "30", "API_TOKEN_DEFAULT_DAYS (90; 0 is until revoked) must be between 1 and "
                                 "API_TOKEN_MAX_DAYS (30)"),
])
def test_a_bad_setting_is_one_line_naming_it(tmp_path: Path, setting: str, value: str, message: str) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "DEBUG": "1", "SECRET_KEY": "x",
           setting: value}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and done.stderr == f"error: {message}\n", done.stderr


def test_a_lowercase_log_level_is_taken(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "DEBUG": "1", "SECRET_KEY": "x",
           "LOG_LEVEL": "debug"}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


# --- issue_token -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "option"), [
    (["alice", "--expires-days", "3000000"], "--expires-days"),
    (["alice", "--name", "x" * 101], "--name"),
    (["", "--create"], "USER"),
    (["   ", "--create"], "USER"),
    (["bad name!", "--create"], "USER"),
    (["alice", "--team", "   ", "--role", "viewer", "--create"], "--team"),
    (["alice", "--team", "!!!", "--create"], "--team"),
])
def test_issue_token_names_the_bad_option_and_writes_nothing(alice: User, args: list[str], option: str) -> None:
    users, teams, events = User.objects.count(), Team.objects.count(), AuditEvent.objects.count()
    with pytest.raises(CommandError, match=option):
        run("issue_token", *args)
    assert (User.objects.count(), Team.objects.count(), AuditEvent.objects.count()) == (users, teams, events)
    assert not ApiToken.objects.exists()


def test_issue_token_keeps_to_the_longest_lifetime_allowed(alice: User, settings) -> None:  # noqa: ANN001
    settings.API_TOKEN_MAX_DAYS = 30
    with pytest.raises(CommandError, match=r"--expires-days must be between 1 and 30 \(API_TOKEN_MAX_DAYS\)"):
        run("issue_token", "alice", "--expires-days", "31")
    assert not ApiToken.objects.exists()


def test_issue_token_refuses_an_inactive_user(alice: User) -> None:
    alice.is_active = False
    alice.save()
    with pytest.raises(CommandError, match="inactive"):
        run("issue_token", "alice")
    assert not ApiToken.objects.exists()


def test_issue_token_finds_a_team_by_the_slug_of_its_name(alice: User, ml_team: Team) -> None:
    run("issue_token", "alice", "--team", "ML  platform", "--role", "viewer", "--create")  # slug ml-platform
    assert Team.objects.count() == 1 and ApiToken.objects.filter(user=alice).exists()


# --- seed_demo ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "message"), [
    ("not a url", "--kube-api-url 'not a url': Enter a valid URL"),
    ("http://10.1.2.3:6443", "Add its network to CLUSTER_ALLOWED_NETWORKS"),
    ("http://127.0.0.1:8081", "or run with DEBUG=1"),
])
def test_seed_demo_names_a_refused_url_and_writes_nothing(db, settings, url: str, message: str) -> None:  # noqa: ANN001
    settings.CLUSTER_ALLOWED_NETWORKS = []
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        run("seed_demo", "--kube-api-url", url)
    assert not Cluster.objects.exists() and not AuditEvent.objects.exists()


def test_seed_demo_names_a_bad_prometheus_url(db) -> None:  # noqa: ANN001
    with pytest.raises(CommandError, match="--prometheus-url"):
        run("seed_demo", "--prometheus-url", "ftp://prometheus.example")


# --- tick ----------------------------------------------------------------------------------------------


def test_tick_refuses_a_blank_pool_name(pool: Pool) -> None:
    with pytest.raises(CommandError, match="--pool needs a pool name"):
        run("tick", "--pool", "  ")


def test_tick_fails_when_a_cluster_failed(pool: Pool, settings) -> None:  # noqa: ANN001
    settings.KUBERNETES_ENABLED = True
    Cluster.objects.filter(pk=pool.cluster_id).update(kube_api_url=f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(CommandError, match=r"1 error\(s\) in this tick") as caught:
        run("tick", "--json")
    assert caught.value.returncode == 1


# --- demo and sandbox: refused before anything starts or is removed -----------------------------------------


@pytest.fixture
def previous_sandbox(ml_team: Team, settings, monkeypatch) -> Cluster:  # noqa: ANN001
    """The last run's sandbox cluster, and a sandbox that must not start (before the checks, it did)."""
    from sandbox.management.commands import demo

    def must_not_start(*args: object, **kwargs: object) -> None:
        raise AssertionError("the sandbox started before the arguments were checked")

    monkeypatch.setattr(demo, "Sandbox", must_not_start)
    monkeypatch.setattr(demo.headless, "run", must_not_start)
    settings.KUBERNETES_ENABLED = True
    return Cluster.objects.create(name="sandbox", team=ml_team, kube_api_url="http://127.0.0.1:1")


def test_demo_refuses_a_port_out_of_range(previous_sandbox: Cluster) -> None:
    with pytest.raises(CommandError, match="--port must be between 1 and 65535"):
        run("demo", "--port", "99999", "--scenario", "steady", "--pools", "1")
    assert Cluster.objects.filter(pk=previous_sandbox.pk).exists()


def test_demo_refuses_a_port_in_use(previous_sandbox: Cluster) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"--port {port}: 127.0.0.1:{port} is not free"):
            run("demo", "--port", str(port), "--scenario", "steady", "--pools", "1")
    assert Cluster.objects.filter(pk=previous_sandbox.pk).exists() and not AuditEvent.objects.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--history", "nan"], "--history must be 0 or more hours, at most 168"),
    (["--history", "1e400"], "--history must be 0 or more hours"),
    (["--history", "169"], "--history must be 0 or more hours"),
    (["--headless", "--auto-approve-after-s", "nan"], "--auto-approve-after-s must be 0 or more seconds"),
    (["--headless", "--auto-approve-after-s", "1e9"], "--auto-approve-after-s must be 0 or more seconds"),
])
def test_demo_refuses_numbers_that_are_not_finite_or_out_of_range(previous_sandbox: Cluster, args: list[str],
                                                                   message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("demo", *args)
    assert Cluster.objects.filter(pk=previous_sandbox.pk).exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--speed", "nan"], "--speed must be greater than 0"),
    (["--speed", "inf"], "--speed must be greater than 0"),
    (["--speed", "1000"], "--speed must be greater than 0 and at most 100"),
    (["--cold-start", "nan"], "--cold-start must be 0 or more"),
    (["--cold-start", "-1"], "--cold-start must be 0 or more"),
    (["--scrape-interval", "nan"], "--scrape-interval must be greater than 0"),
    (["--scrape-interval", "0"], "--scrape-interval must be greater than 0"),
    (["--history", "nan"], "--history must be 0 or more"),
])
def test_sandbox_refuses_numbers_that_are_not_finite_or_out_of_range(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("sandbox", "--no-prometheus", *args)


def test_tasks_run_in_process_do_not_log_each_success(db, caplog) -> None:  # noqa: ANN001
    """The demo runs Celery's tasks in-process: a line per task success (a dozen a tick) buried its story."""
    import logging

    from incidents import tasks

    with caplog.at_level(logging.INFO):
        tasks.dispatch_events.delay()
    assert not [record for record in caplog.records if record.name == "celery.app.trace"]
