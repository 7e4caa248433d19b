"""Headroom settings. The environment is read here and nowhere else.

Every value comes through a small typed helper that fails loudly at start-up on a bad value, so a
typo in a deployment manifest stops the process instead of silently running with a default.
"""
from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value


# deploy/kubernetes/config.yaml ships secrets as `REPLACE-…` placeholders: published, so never a secret.
PLACEHOLDER_PREFIX = "REPLACE-"


def env_secret(name: str, default: str | None = None) -> str | None:
    """A secret: refused while it still holds the shipped placeholder (anyone can read it in the repository)."""
    value = env_str(name, default)
    if value and value.strip().upper().startswith(PLACEHOLDER_PREFIX):
        raise ImproperlyConfigured(f"{name} still holds the placeholder from deploy/kubernetes/config.yaml "
                                   f"({value[:len(PLACEHOLDER_PREFIX)]}…); set a random value of your own.")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false, 1/0, yes/no, on/off), got {raw!r}")


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_url(name: str, default: str, schemes: tuple[str, ...]) -> str:
    """A URL with one of `schemes` and a host, checked at start-up rather than at its first use (a link in a
    page, a task sent to the broker), where the mistake would surface far from its cause."""
    raw = env_str(name, default)
    parsed = urlsplit(raw)
    if parsed.scheme not in schemes or not parsed.hostname:
        raise ImproperlyConfigured(f"{name} must be a {' or '.join(s + '://' for s in schemes)} URL with a host, "
                                   f"got {raw!r}")
    return raw


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str, default: list[str]) -> list[str]:
    """Comma-separated IP networks (`10.0.8.0/24,fd00::/8`); a malformed one stops start-up."""
    networks = env_list(name, default)
    for network in networks:
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {network!r} is not a network (e.g. 10.0.8.0/24)") from None
    return networks


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_secret("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off (the demo and the tests set DEBUG=1 or a key)."
        )
    SECRET_KEY = "insecure-development-key-only-for-debug"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto` or `X-Forwarded-Proto: https` → Django's ("HTTP_X_FORWARDED_PROTO", "https")."""
    raw = env_str(name)
    if raw is None:
        return None
    header, _, value = (part.strip() for part in raw.partition(":"))
    if not header.replace("-", "").isalnum() or not header.isascii():
        raise ImproperlyConfigured(f"{name} must be a header name like X-Forwarded-Proto (optionally ': https'), got {raw!r}")
    return "HTTP_" + header.upper().replace("-", "_"), value or "https"


# Production is served over HTTPS only, behind a TLS proxy; the demo (DEBUG=1) over plain http on 127.0.0.1.
HTTPS_ONLY = env_bool("HTTPS_ONLY", not DEBUG)
SECURE_SSL_REDIRECT = HTTPS_ONLY
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^livez$", r"^metrics$"]  # the kubelet and Prometheus reach the pod itself, over plain http
SESSION_COOKIE_SECURE = HTTPS_ONLY
CSRF_COOKIE_SECURE = HTTPS_ONLY
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS_ONLY else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
# The header a TLS-terminating proxy sets, and that it strips from what clients send (else anyone can claim https).
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER")
# How many proxies in front append to X-Forwarded-For: the client address (login throttling) is the one
# the outermost trusted proxy saw. 0: REMOTE_ADDR, the peer of this process.
TRUSTED_PROXY_HOPS = env_int("TRUSTED_PROXY_HOPS", 0, minimum=0)
# No inline script or style anywhere (htmx and Swagger UI are served from /static/).
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "font-src 'self'",
    "connect-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
])

# Failed logins, counted per user name and per client address in the cache, within one window.
LOGIN_THROTTLE_WINDOW_S = env_int("LOGIN_THROTTLE_WINDOW_S", 900, minimum=1)
LOGIN_FAILURES_PER_USER = env_int("LOGIN_FAILURES_PER_USER", 5, minimum=1)
LOGIN_FAILURES_PER_ADDRESS = env_int("LOGIN_FAILURES_PER_ADDRESS", 20, minimum=1)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from /static/, not from a CDN
    "django_htmx",
    "controlplane",
    "scaling",
    "incidents",
    "sandbox",
]

MIDDLEWARE = [
    "controlplane.middleware.RequestIdMiddleware",  # first: every later log line of the request carries its id
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # /static/ with DEBUG off (gunicorn serves nothing by itself)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "controlplane.middleware.ContentSecurityPolicyMiddleware",
    "controlplane.middleware.HtmxLoginRedirectMiddleware",  # inside the CSP one: its answers carry the header too
    "controlplane.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# SQLite is the embedded default (the demo); production and the tests set a PostgreSQL URL.
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'var' / 'headroom.sqlite3'}")
CONN_MAX_AGE = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)
try:
    # Health checks: a kept connection that PostgreSQL dropped while idle (a failover, pg_terminate_backend, a
    # proxy's idle timeout) is replaced before a task's or request's first query, instead of failing it.
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=CONN_MAX_AGE, conn_health_checks=True)}
except Exception as exc:  # dj_database_url raises several types; all mean the same thing here
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # The demo's web server and control loop write at once: wait for the lock, take it up front.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # One breaker per scope is a NULLS NOT DISTINCT constraint, PostgreSQL's; SQLite skips it and would say so
    # on every start of the embedded demo, which runs one process (get-or-create keeps it to one there).
    SILENCED_SYSTEM_CHECKS = ["models.W047"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# No STATIC_ROOT and no collectstatic: WhiteNoise serves the files where the finders find them (static/, the
# apps', drf-spectacular-sidecar's), so the image needs no build step and its root filesystem stays read-only.
# A few hundred files, indexed once per process at start-up.
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.permissions.RolePermission"],
    "DEFAULT_PAGINATION_CLASS": "controlplane.api.pagination.LimitOffsetPagination",
    "DEFAULT_PARSER_CLASSES": [
        "controlplane.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["controlplane.api.filters.ApiFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.api.exceptions.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Headroom API",
    "DESCRIPTION": "Control plane for bursty vLLM inference: pools, SLOs, proposals, approvals.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema maps every endpoint and filter: signed-in users (session or token) only.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # One name per choice set: the proposal's requested and decided channels share one, and several
    # models' fields of the same name (state, tier, kind) would otherwise collide.
    "ENUM_NAME_OVERRIDES": {
        "ActorChannelEnum": "controlplane.choices.Channel",
        "AlertTierEnum": "incidents.choices.AlertTier",
        "AlertStateEnum": "incidents.choices.AlertState",
        "IncidentStateEnum": "incidents.choices.IncidentState",
        "NotificationStateEnum": "incidents.choices.NotificationState",
        "ProposalStateEnum": "scaling.choices.ProposalState",
        "ProposalKindEnum": "scaling.choices.ProposalKind",
        "BreakerStateEnum": "scaling.choices.BreakerState",
        "ReportStateEnum": "scaling.choices.ReportState",
        "PlaybookRunStepStateEnum": "incidents.choices.RunStepState",
        "PlaybookStepKindEnum": "incidents.choices.PlaybookStepKind",
        "ChannelKindEnum": "incidents.choices.ChannelKind",
    },
    "COMPONENT_SPLIT_REQUEST": True,
    # The documented API speaks JSON (form bodies are still read, for the browsable API, but not promised).
    "PARSER_WHITELIST": ["controlplane.api.parsers.JSONParser"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "controlplane.api.schema.document_errors",  # 400/401/403/404/409 as every endpoint can answer them
    ],
}

# The cache holds login-failure counters. Empty: memory of each process (the demo, the tests); production
# names a Redis database so that every web worker counts the same failures.
CACHE_URL = env_str("CACHE_URL", "")
if CACHE_URL and not CACHE_URL.startswith(("redis://", "rediss://")):
    raise ImproperlyConfigured(f"CACHE_URL must be a redis:// URL or empty, got {CACHE_URL!r}")
# A Redis that hangs (accepts, never answers) costs a call about 2 s instead of the whole request; 2 s of
# socket timeout stays above the 1 s BRPOP a Celery worker waits on its queue.
REDIS_TIMEOUTS = {"socket_connect_timeout": 1.0, "socket_timeout": 2.0}
# A hung cache costs a sign-in 2 s, not the request (login_throttle then skips the count).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL,
                      "OPTIONS": REDIS_TIMEOUTS} if CACHE_URL
          else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Redis is the Celery broker in production; the embedded demo runs tasks without it.
REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", ("redis", "rediss"))
CELERY_ENABLED = env_bool("CELERY_ENABLED", False)
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_ALWAYS_EAGER = not CELERY_ENABLED  # the embedded demo runs tasks in-process
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # workers log through LOGGING below (JSON in production)
# A broker that hangs must not hang the request that enqueues: an approval in the browser or a Slack click
# (answered within 3 s) publishes on commit. Without these a publish waited for ever; with them it fails in
# about 2 s, the change stays recorded, and the beat's sweeps run it once Redis answers.
CELERY_BROKER_CONNECTION_TIMEOUT = REDIS_TIMEOUTS["socket_connect_timeout"]
CELERY_BROKER_TRANSPORT_OPTIONS = dict(REDIS_TIMEOUTS)
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}

# Integrations: each has an explicit switch so a half-configured one never runs by accident.
PROMETHEUS_ENABLED = env_bool("PROMETHEUS_ENABLED", False)
PROMETHEUS_TIMEOUT_S = env_int("PROMETHEUS_TIMEOUT_S", 5, minimum=1)
# All of one tick's queries to a cluster's Prometheus together; must leave room in the 15-s tick.
PROMETHEUS_DEADLINE_S = env_int("PROMETHEUS_DEADLINE_S", 10, minimum=1)
if PROMETHEUS_DEADLINE_S > 12:
    raise ImproperlyConfigured("PROMETHEUS_DEADLINE_S must be at most 12 (the tick runs every 15 s).")
KUBERNETES_ENABLED = env_bool("KUBERNETES_ENABLED", False)
KUBERNETES_TIMEOUT_S = env_int("KUBERNETES_TIMEOUT_S", 10, minimum=1)
# An execution not finished by then is resumed by the next tick (the worker is presumed dead).
EXECUTION_LEASE_S = env_int("EXECUTION_LEASE_S", 120, minimum=10)
# Give up tracking replicas to Ready after this long (the proposal fails with the reason).
READY_TIMEOUT_S = env_int("READY_TIMEOUT_S", 900, minimum=60)
# A warm-pool report flags a size costing more than this many percent above no warm pool (docs/reports.md).
WARM_POOL_REPORT_FLAG_ABOVE_PCT = env_int("WARM_POOL_REPORT_FLAG_ABOVE_PCT", 25, minimum=0)
# Transient failures (timeouts, 5xx, 409s past the retries) are retried with a doubling backoff
# from 5 s, capped at 2 minutes, jittered; 8 attempts ride out about 5 minutes of API trouble.
EXECUTION_MAX_ATTEMPTS = env_int("EXECUTION_MAX_ATTEMPTS", 8, minimum=1)
# Multiplies every alert rule's hold (how long its condition must last before it fires). Not read from the
# environment: 1 in production; the live sandbox demo sets 1/speed in its own process, so that at K times
# the clock a rule still holds one scenario minute (as it registers cold starts and fallback holds / K).
ALERT_HOLD_SCALE = 1.0
# One tick per cluster at a time: a worker holds the cluster's tick lease this long at most.
TICK_LEASE_S = env_int("TICK_LEASE_S", 60, minimum=15)
# Per-tick samples (SignalSample) older than this are deleted by the tick. At least 8 days: a forecaster
# rebuilt from the history (a new pool, a changed cold start) reads 8 days for its daily and weekly seasons.
SIGNAL_SAMPLE_RETENTION_DAYS = env_int("SIGNAL_SAMPLE_RETENTION_DAYS", 9, minimum=8)
# Finished proposals (with their events and notifications) older than this are deleted by the tick; 0 keeps them
# all. At least 7 when set: the loop reads none past a day, people review the last week's decisions.
PROPOSAL_RETENTION_DAYS = env_int("PROPOSAL_RETENTION_DAYS", 0, minimum=0)
if 0 < PROPOSAL_RETENTION_DAYS < 7:
    raise ImproperlyConfigured(f"PROPOSAL_RETENTION_DAYS must be 0 (keep every proposal) or at least 7, "
                               f"got {PROPOSAL_RETENTION_DAYS}")
# Where the files named by a cluster's credentials_ref (token:NAME, kubeconfig:NAME) are mounted.
KUBE_CREDENTIALS_DIR = env_str("KUBE_CREDENTIALS_DIR", "/var/run/headroom/credentials")
SLACK_ENABLED = env_bool("SLACK_ENABLED", False)
SLACK_SIGNING_SECRET = env_secret("SLACK_SIGNING_SECRET", "")
if SLACK_ENABLED and not SLACK_SIGNING_SECRET:
    raise ImproperlyConfigured("SLACK_ENABLED is on but SLACK_SIGNING_SECRET is empty.")
WEBHOOKS_ENABLED = env_bool("WEBHOOKS_ENABLED", False)
# Where people reach Headroom: links in Slack messages and webhook payloads.
SITE_URL = env_url("SITE_URL", "http://127.0.0.1:8000", ("http", "https"))
# Outbound notifications (Slack, webhooks) may reach only public addresses; these networks are the
# admin's exceptions (e.g. an internal PagerDuty relay). Checked when each connection is made.
OUTBOUND_ALLOWED_NETWORKS = env_networks("OUTBOUND_ALLOWED_NETWORKS", [])
# Cluster APIs and Prometheus servers usually sit on internal networks: the admin names them here, and
# nothing else internal (loopback, link-local metadata services, other private ranges) is ever reached
# through a cluster's URLs. Empty in production; the demo (DEBUG) runs its sandbox on loopback.
CLUSTER_ALLOWED_NETWORKS = env_networks("CLUSTER_ALLOWED_NETWORKS", ["127.0.0.0/8", "::1/128"] if DEBUG else [])
OUTBOUND_TIMEOUT_S = env_int("OUTBOUND_TIMEOUT_S", 10, minimum=1)  # one send, redirects included
OUTBOUND_MAX_REDIRECTS = env_int("OUTBOUND_MAX_REDIRECTS", 3, minimum=0)
# Failed deliveries retry after 30 s, 1 min, 2 min, … up to NOTIFY_RETRY_MAX_S, at most NOTIFY_MAX_ATTEMPTS times.
NOTIFY_MAX_ATTEMPTS = env_int("NOTIFY_MAX_ATTEMPTS", 10, minimum=1)
NOTIFY_RETRY_BASE_S = env_int("NOTIFY_RETRY_BASE_S", 30, minimum=1)
NOTIFY_RETRY_MAX_S = env_int("NOTIFY_RETRY_MAX_S", 3600, minimum=1)
# A pending proposal's message gets one reminder this long before it expires.
NOTIFY_REMINDER_BEFORE_S = env_int("NOTIFY_REMINDER_BEFORE_S", 180, minimum=30)

# Where the shared request traces live (simulator, benchmarks, demo traffic).
TRACES_DIR = Path(env_str("HEADROOM_TRACES_DIR", str(BASE_DIR.parent / "shared" / "traces")))

API_TOKEN_PREFIX = "hr_"
# A token issued without an expiry lives this many days (0: until revoked). Rotation bounds a leak.
API_TOKEN_DEFAULT_DAYS = env_int("API_TOKEN_DEFAULT_DAYS", 90, minimum=0)
# The longest a token may be asked to live (0: no cap). A stolen token may mint others: this bounds how long any
# of them outlives the theft.
API_TOKEN_MAX_DAYS = env_int("API_TOKEN_MAX_DAYS", 0, minimum=0)
if API_TOKEN_MAX_DAYS and not 0 < API_TOKEN_DEFAULT_DAYS <= API_TOKEN_MAX_DAYS:
    raise ImproperlyConfigured(f"API_TOKEN_DEFAULT_DAYS ({API_TOKEN_DEFAULT_DAYS}; 0 is until revoked) must be "
                               f"between 1 and API_TOKEN_MAX_DAYS ({API_TOKEN_MAX_DAYS})")

# Who may read /metrics besides signed-in staff: Prometheus, with `Authorization: Bearer <METRICS_TOKEN>`
# (a ServiceMonitor's authorization from a Secret). Empty: staff only.
METRICS_TOKEN = env_secret("METRICS_TOKEN", "")
if METRICS_TOKEN and len(METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("METRICS_TOKEN must be at least 16 characters (or empty: staff only).")

# `json`: one object per line with the request id (production, for a log pipeline); `text`: for people.
LOG_FORMAT = env_str("LOG_FORMAT", "text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be text or json, got {LOG_FORMAT!r}")
LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
if LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
    raise ImproperlyConfigured(f"LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {LOG_LEVEL!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "controlplane.logs.RequestIdFilter"}},
    "formatters": {
        "json": {"()": "controlplane.logs.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["request_id"], "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # urllib3 logs each request line at DEBUG, and a webhook's path and query are its secret.
    "loggers": {"urllib3": {"level": "WARNING"},
                # Tasks run in-process (the demo, no workers): Celery would log each one's success, a dozen
                # lines a tick, between the lines that tell what happens. A worker's log keeps them.
                **({"celery.app.trace": {"level": "WARNING"}} if CELERY_TASK_ALWAYS_EAGER else {})},
}
