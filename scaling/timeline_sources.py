"""Timeline sources for incidents: fallback activations and breaker transitions of the incident's pool
(registered with `incidents.timeline.source` from ScalingConfig.ready)."""
from __future__ import annotations

from collections.abc import Iterable

from django.urls import reverse

from incidents.models import Incident
from incidents.timeline import Entry, Window, source
from scaling.models import BreakerTransition, FallbackEvent

# Entry and return move traffic: they belong on the charts' time axis.
FALLBACK_MARKERS = {"entered": "orange", "approved": "orange", "forced": "orange", "return_started": "blue",
                    "route_restored": "green"}


def _actor(name: str) -> str:
    return "Headroom" if name.endswith(":system") else name


@source
def fallback_events(incident: Incident, span: Window) -> Iterable[Entry]:
    if not incident.pool_id:
        return
    rows = FallbackEvent.objects.filter(activation__pool_id=incident.pool_id, at__gte=span.start, at__lte=span.end) \
        .select_related("activation__fallback_pool")
    for event in rows:
        activation = event.activation
        percent = event.data.get("target_percent", activation.route_percent)
        title = f"Fallback #{activation.pk} to {activation.fallback_pool.name}: {event.kind.replace('_', ' ')}"
        if event.kind in ("entered", "forced", "approved", "return_started", "reactivated", "share", "written"):
            title += f" ({percent} % of the route)"
        yield Entry(event.at, "fallback", title, _actor(event.actor_name), event.channel, event.comment,
                    "scaling.fallbackactivation", activation.pk,
                    reverse("pool-live", args=[activation.pool_id]) + "#fallback", FALLBACK_MARKERS.get(event.kind, ""))


@source
def breaker_transitions(incident: Incident, span: Window) -> Iterable[Entry]:
    if not incident.pool_id:
        return
    rows = BreakerTransition.objects.filter(breaker__pool_id=incident.pool_id, at__gte=span.start, at__lte=span.end) \
        .select_related("breaker")
    for row in rows:
        breaker = row.breaker
        where = breaker.endpoint or "the pool"
        yield Entry(row.at, "breaker", f"{breaker.get_scope_display()} breaker of {where}: {row.from_state} → "
                                       f"{row.to_state}", _actor(row.actor_name), row.channel, row.reason,
                    "scaling.circuitbreaker", breaker.pk, reverse("pool-live", args=[breaker.pool_id]) + "#breakers",
                    "red" if row.to_state == "open" else "")
