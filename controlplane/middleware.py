"""Request ids (a trusted proxy's X-Request-ID when well-formed, otherwise made here) and the CSP header."""
from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

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
