"""`Authorization: Token hr_…` authentication for the REST API (hashed tokens, see services)."""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from controlplane import services


class TokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):  # noqa: ANN001, ANN201
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: use 'Authorization: Token <token>'.")
        try:
            raw = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token header: the token is not valid text.") from None
        found = services.user_for_token(raw)
        if found is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return found

    def authenticate_header(self, request) -> str:  # noqa: ANN001
        # Makes DRF answer 401 (not 403) to unauthenticated requests.
        return self.keyword


class TokenAuthenticationScheme(OpenApiAuthenticationExtension):
    """Describes the token header in the OpenAPI schema."""

    target_class = "controlplane.auth.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):  # noqa: ANN001, ANN201
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token hr_…`, issued by `manage.py issue_token` or `POST /api/v1/tokens/`.",
        }
