"""The API's list filters: each takes exactly what the schema says, and anything else is a 400 naming it.

django-filter's defaults read a value they do not understand (`?active=yes`, `?state=`) as "no filter" and
answer the whole list, and check a related object's id against every row of its table, so an id of another
team's object and an unknown one answered differently. `ApiFilterBackend` builds every viewset's filters,
declared or generated from `filterset_fields`, on `ApiFilterSet`, and refuses a query parameter a list does not
have (a typo in a filter's name would otherwise answer everything).
"""
from __future__ import annotations

import django_filters
from django import forms
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError


class _StrictChoiceField(forms.ChoiceField):
    def clean(self, value):  # noqa: ANN001, ANN201
        if value == "":  # given but empty: not one of the choices the schema lists (left out, it is None)
            raise forms.ValidationError("Select one of the choices, or leave the filter out.", code="invalid_choice")
        return super().clean(value)


class StrictChoiceFilter(django_filters.ChoiceFilter):
    """A choice, or left out; `?state=` is a 400 naming the filter."""

    field_class = _StrictChoiceField


class IdFilter(django_filters.NumberFilter):
    """An object's id: a whole number (NumberFilter alone would take 0.5 and answer an empty list). Any
    whole number is taken: an id the caller cannot see lists nothing, as one that does not exist."""

    field_class = forms.IntegerField


class _TrueOrFalse(forms.NullBooleanField):
    widget = forms.TextInput  # NullBooleanSelect would read any unknown word as "no filter" before us

    def to_python(self, value):  # noqa: ANN001, ANN201
        if value in (None, ""):
            return None
        if value in (True, "true", "True", "1"):
            return True
        if value in (False, "false", "False", "0"):
            return False
        raise forms.ValidationError("Must be true or false.", code="invalid")


class TrueOrFalseFilter(django_filters.BooleanFilter):
    """`true` or `false` (or left out); anything else is a 400 naming the filter."""

    field_class = _TrueOrFalse


class ApiFilterSet(django_filters.FilterSet):
    """Every API filter set: choices, booleans and related ids generated from model fields are strict."""

    @classmethod
    def filter_for_lookup(cls, field, lookup_type):  # noqa: ANN001, ANN206
        filter_class, params = super().filter_for_lookup(field, lookup_type)
        if filter_class is django_filters.ChoiceFilter:
            return StrictChoiceFilter, params
        if issubclass(filter_class, django_filters.BooleanFilter):
            return TrueOrFalseFilter, {}
        if filter_class is django_filters.ModelChoiceFilter and lookup_type == "exact":
            return IdFilter, {}
        return filter_class, params


class ApiFilterBackend(DjangoFilterBackend):
    """Also refuses a list query parameter it does not know: `?nmae=chat-8b` or `?cluster_id=3` would otherwise
    answer the whole list, and a reconciling script would act on every object as if it had been asked for."""

    filterset_base = ApiFilterSet
    not_filters = frozenset({"limit", "offset", "format"})  # pagination, and the browsable API's `?format=api`

    def filter_queryset(self, request, queryset, view):  # noqa: ANN001, ANN201
        if getattr(view, "action", None) == "list":
            filterset_class = self.get_filterset_class(view, queryset)
            known = set(filterset_class.base_filters) if filterset_class else set()
            unknown = sorted(set(request.query_params) - known - self.not_filters)
            if unknown:
                offered = ", ".join(sorted(known)) or "none"
                raise ValidationError({name: [f"Not a filter of this list (its filters: {offered})."] for name in unknown})
        return super().filter_queryset(request, queryset, view)
