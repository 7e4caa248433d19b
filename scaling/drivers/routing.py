"""The Router port: read a route's backend weights and change them (design.md §3, §7).

Backends live beside it (`scaling/drivers/routers.py`); `scaling/drivers/registry.py` picks one by
the route's kind. A write names the weights it may start from (`WeightPremise`): a worker that died
after its write finds the target already there and writes nothing, and a route someone else changed
in between is left alone.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from scaling.drivers.cluster import DriverError
from scaling.engine.shifting import WeightScheme


@dataclass(frozen=True)
class RouteRef:
    namespace: str
    name: str


@dataclass(frozen=True)
class RouteWeights:
    """A route's weights (backend → weight, in the route's own units) at one resourceVersion."""

    weights: dict[str, int]
    resource_version: str = ""
    generation: int | None = None  # bumped by every change to the route's spec, whoever makes it


@dataclass(frozen=True)
class WeightPremise:
    """The weights a change was decided from: the backends it changes may hold any of `accepted`.

    `still_wanted`, when given, is asked before each write attempt whether the change is still the
    one to make (the shift may have been rolled back meanwhile); it answers why not, or None.
    """

    accepted: tuple[Mapping[str, int], ...]
    still_wanted: Callable[[], str | None] | None = None
    # On a resumed write: the route's generation that an earlier attempt of the same write read just before
    # it, when that attempt's answer never came (its worker died, the call broke).
    earlier_generation: int | None = None

    def undone(self, generation: int | None) -> str | None:
        """Why a resumed write must not be made onto a route at `generation` that does not hold its target (None:
        it may). Weights the change moved between cannot tell a write that never landed from one that landed
        and was set back by a person; the route's generation can."""
        if self.earlier_generation is None or generation is None or generation == self.earlier_generation:
            return None
        return (f"the route's spec changed since an earlier attempt read it (generation {self.earlier_generation} "
                f"→ {generation}) and it does not hold the target: that attempt's write may have landed and been "
                "undone by someone, so it is not written again")

    def refusal(self, live: Mapping[str, int], target: Mapping[str, int]) -> str | None:
        """Why writing `target` onto `live` would not be the decided change (None: it would)."""
        if self.still_wanted is not None and (reason := self.still_wanted()) is not None:
            return reason
        mine = {backend: live.get(backend) for backend in target}
        allowed = [dict(target)] + [{backend: weights.get(backend) for backend in target} for weights in self.accepted]
        if mine in allowed:
            return None
        return f"the route's weights were changed by someone else: {mine} is none of the weights Headroom moved them between"


@dataclass(frozen=True)
class WeightOutcome:
    previous: dict[str, int]
    weights: dict[str, int]  # as read back after the write
    wrote: bool  # False when the route already had the target (an idempotent re-run)
    conflicts: int = 0  # 409s re-read on the way
    resource_version: str = ""


class RoutePremiseChanged(DriverError):
    """The live weights no longer fit the shift: nothing was written."""

    def __init__(self, live: Mapping[str, int], reason: str) -> None:
        super().__init__(reason, permanent=True)
        self.live = dict(live)


class Router(Protocol):
    scheme: WeightScheme

    def read(self, route: RouteRef, backends: set[str] | None = None) -> RouteWeights:
        """The weights of the route's rule that names one of `backends` (the first weighted rule for None)."""
        ...

    def set_weights(self, route: RouteRef, target: Mapping[str, int], premise: WeightPremise) -> WeightOutcome:
        """Set the named backends' weights (the others keep theirs) after validating the route's full
        weights; re-check the premise on each read (also after each 409); read back what was written."""
        ...

