"""Turn every expected failure into a clear 4xx: never a 500 for bad input."""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, IntegrityError
from django.db.models import ProtectedError, RestrictedError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.errors import ServiceError


def exception_handler(exc, context):  # noqa: ANN001, ANN201
    if isinstance(exc, ServiceError):
        return Response(exc.payload(), status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        return Response(as_serializer_error(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, (ProtectedError, RestrictedError)):
        blockers = sorted({str(obj) for obj in list(exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects)[:5]})
        return Response(
            {"detail": f"Cannot delete: still used by {', '.join(blockers)}. Remove or move those first."},
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, DataError):
        return Response(
            {"detail": "The database refused a value: a NUL character, or a number or text out of range."},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, IntegrityError):
        # A constraint caught what validation could not (e.g. two concurrent creates).
        return Response(
            {"detail": "The change conflicts with existing data (a uniqueness or consistency rule). Reload and retry."},
            status=status.HTTP_409_CONFLICT,
        )
    return drf_exception_handler(exc, context)
