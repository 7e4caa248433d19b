"""Request ids (a trusted proxy's X-Request-ID when well-formed, otherwise made here), the CSP header, a
clean 503 when the database goes away mid-request, and a whole-page trip to the login page when an htmx
request finds the session gone."""
from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import resolve_url

logger = logging.getLogger(__name__)

from controlplane import logs

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{8,64}$")


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        request.request_id = incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex
        token = logs.request_id.set(request.request_id)  # every log line of this request carries it
        try:
            response = self.get_response(request)
        finally:
            logs.request_id.reset(token)
        response["X-Request-ID"] = request.request_id
        return response


class ContentSecurityPolicyMiddleware:
    """Sends settings.CONTENT_SECURITY_POLICY on every answer that has not set its own.

    One fixed policy, no nonces: no page of ours has an inline script or style.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.CONTENT_SECURITY_POLICY:
            response.headers.setdefault("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY)
        return response


class DatabaseUnavailableMiddleware:
    """A database that went away mid-request is a clean 503, not a 500 page.

    The request's transaction died with its connection, so nothing it wrote was kept: the answer says so,
    and a retry is safe. Django drops the broken connection when the request ends.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        request_id = getattr(request, "request_id", "")
        logger.warning("database unavailable during %s %s (request %s): %s", request.method, request.path,
                       request_id, exception)
        message = "The database could not be reached; nothing was changed. Try again in a few seconds."
        if request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", ""):
            response: HttpResponse = JsonResponse({"detail": message, "request_id": request_id}, status=503)
        else:
            response = HttpResponse(f"{message}\n", content_type="text/plain; charset=utf-8", status=503)
        response["Retry-After"] = "5"
        return response


class HtmxLoginRedirectMiddleware:
    """An htmx request whose session has ended is sent to the login page as a whole page.

    `login_required` answers 302 to the login page; htmx would follow it and swap the login page into the
    polled fragment, and logging in there would land on the bare fragment. Instead: HX-Redirect to the login
    page, with `next` the page the browser shows (HX-Current-URL), not the fragment's URL.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not _is_htmx_swap(request) or not _sends_to_login(response):
            return response
        answer = HttpResponse(status=204)  # nothing to swap: htmx follows HX-Redirect before any swap
        answer["HX-Redirect"] = redirect_to_login(_current_page(request)).url
        return answer


def _is_htmx_swap(request: HttpRequest) -> bool:
    # A history restore wants a whole page, which the plain redirect to the login page gives.
    headers = request.headers
    return headers.get("HX-Request") == "true" and headers.get("HX-History-Restore-Request") != "true"


def _sends_to_login(response: HttpResponse) -> bool:
    login_path = resolve_url(settings.LOGIN_URL)
    return response.status_code == 302 and urlsplit(response.get("Location", "")).path == login_path


def _current_page(request: HttpRequest) -> str:
    """The browser's page as a local path (only the path and query travel: `next` must stay on this site)."""
    current = urlsplit(request.headers.get("HX-Current-URL", ""))
    if not current.path.startswith("/") or current.path.startswith("//"):  # "//host" would leave the site
        return resolve_url(settings.LOGIN_REDIRECT_URL)
    return current.path + (f"?{current.query}" if current.query else "")
