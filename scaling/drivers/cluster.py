"""The ClusterDriver port: read a pool's replicas and change them. Backends live beside it."""
from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

# vLLM's flag for the requests one replica runs at once; its parser takes the underscore spelling too.
MAX_NUM_SEQS_FLAGS = ("--max-num-seqs", "--max_num_seqs")
MAX_PLAUSIBLE_BATCH_SLOTS = 1_000_000  # more sequences than any replica batches: a typo, never a count


@dataclass(frozen=True)
class Workload:
    """What a driver needs to know about a pool, as plain data."""

    namespace: str
    deployment: str
    scaled_object: str = ""  # set when KEDA owns the Deployment's replica range
    hpa: bool = False  # a HorizontalPodAutoscaler owns it: its minReplicas is what Headroom raises


@dataclass(frozen=True)
class ReplicaStatus:
    desired: int  # what the cluster is asked to run (spec.replicas)
    ready: int  # Ready pods: model loaded, serving
    updated_at_resource_version: str = ""
    # The serving container's --max-num-seqs where the pod template's command line states it (None: it does
    # not, and vLLM's default depends on the GPU): the batch slots the work share is read against.
    batch_slots: int | None = None

    @property
    def arriving(self) -> int:
        return max(0, self.desired - self.ready)


@dataclass(frozen=True)
class ScaleOutcome:
    previous: int
    target: int
    wrote: bool  # False when the cluster already had the target (an idempotent re-run)
    conflicts: int = 0  # 409s retried on the way


@dataclass(frozen=True)
class ScalePremise:
    """What a change was decided against: `decided_from` replicas, to become `target`.

    A write is made only while the live count still lets the change go the approved way:
    a scale-up is written while the workload runs fewer than the target (never onto more, which
    would scale it down); a scale-down only while the workload runs more than the target and no
    more than it did when the change was approved (never removing more replicas than approved).
    """

    decided_from: int
    target: int
    # On a resumed attempt: the generation of the written object (Deployment, HPA or ScaledObject) that an
    # earlier attempt read just before a write whose answer never came (its worker died, the call broke).
    earlier_generation: int | None = None

    def undone(self, generation: int | None, holds: int) -> str | None:
        """Why a resumed attempt must not write onto an object that `holds` this count at `generation` (None: it
        may). A replica count cannot tell a write that never landed from one that landed and was undone by
        someone; the object's generation, which every change to its spec bumps, can."""
        if self.earlier_generation is None or generation is None or holds == self.target:
            return None
        if generation == self.earlier_generation:
            return None  # nothing changed its spec since: the earlier write did not land
        return (f"its spec changed since an earlier attempt read it (generation {self.earlier_generation} → "
                f"{generation}) and it holds {holds}, not {self.target}: that attempt's write may have landed "
                "and been undone by someone, so it is not written again")

    def refusal(self, live: int) -> str | None:
        """Why writing the target onto `live` replicas would not be the approved change (None: it would)."""
        if live == self.target:
            return None  # nothing to write
        change = f"{self.decided_from} → {self.target}"
        if self.target > self.decided_from:
            if live > self.target:
                return (f"approved as a scale-up {change}, but it runs {live} now: "
                        f"writing {self.target} would remove {live - self.target}")
            return None
        if self.target < self.decided_from:
            if live < self.target:
                return (f"approved as a scale-down {change}, but it runs {live} now: "
                        f"writing {self.target} would add {self.target - live}")
            if live > self.decided_from:
                return (f"approved to remove {self.decided_from - self.target} ({change}), but it runs {live} now: "
                        f"writing {self.target} would remove {live - self.target}")
            return None
        return f"decided against {self.decided_from} replicas, but it runs {live} now"


def stated_max_num_seqs(command_lines: Iterable[Sequence[str]]) -> int | None:
    """The `--max-num-seqs` the first container that states one runs with; None where none does.

    Each command line is a container's command followed by its args. An element with spaces is a shell
    line (`sh -c "vllm serve m --max-num-seqs 64"`) and is split as the shell would. Within a line the
    last value wins, as in vLLM's own parser; a value that is not a whole number of at least 1 states
    nothing (vLLM would refuse to start on it), and neither does one past any replica's batch."""
    for line in command_lines:
        tokens: list[str] = []
        for element in line:
            try:
                tokens += shlex.split(element) if any(c.isspace() for c in element) else [element]
            except ValueError:  # an unbalanced quote: read it word by word
                tokens += element.split()
        stated: str | None = None
        for i, token in enumerate(tokens):
            flag, equals, value = token.partition("=")
            if flag in MAX_NUM_SEQS_FLAGS:
                stated = value if equals else (tokens[i + 1] if i + 1 < len(tokens) else None)
        if stated is not None:
            return int(stated) if stated.isdigit() and 1 <= int(stated) <= MAX_PLAUSIBLE_BATCH_SLOTS else None
    return None


class DriverError(Exception):
    """A failed call. `permanent` failures are not retried (not found, forbidden, invalid)."""

    def __init__(self, message: str, *, permanent: bool, status: int | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.status = status
        self.retry_after_s = retry_after_s  # the API server's Retry-After (a 429 or 503): no retry before it


class PremiseChanged(DriverError):
    """The live replicas no longer fit the approved change: nothing was written."""

    def __init__(self, live: int, reason: str) -> None:
        super().__init__(reason, permanent=True)
        self.live = live


class ClusterDriver(Protocol):
    def status(self, workload: Workload) -> ReplicaStatus: ...

    def check_writable(self, workload: Workload) -> None:
        """Raise the permanent DriverError a write of the workload's replicas would meet before it is made (an HPA
        owning a Deployment written directly, a missing or foreign HPA or ScaledObject, a paused ScaledObject);
        a read that fails raises as any read does. Writes nothing."""
        ...

    def generation(self, workload: Workload) -> int | None:
        """The metadata.generation of the object `scale` writes (the Deployment, its HPA or its ScaledObject),
        read before a write's intent is recorded: every change to that object's spec bumps it."""
        ...

    def scale(self, workload: Workload, replicas: int, premise: ScalePremise | None = None) -> ScaleOutcome:
        """Set the replicas; with a premise, re-check it on every read (also after each 409) and raise
        PremiseChanged instead of writing when the live count no longer fits it, or when a resumed attempt
        finds the object changed since an earlier attempt's write (`ScalePremise.undone`)."""
        ...

    def added_pods_ready_at(self, workload: Workload, since: datetime, count: int) -> datetime | None:
        """When the `count` first pods created at or after `since` were all Ready (None: not yet, or fewer pods)."""
        ...

    def endpoints(self, workload: Workload) -> dict[str, bool]:
        """The workload's pods: pod name → routable (not ejected by a circuit breaker)."""
        ...

    def set_routable(self, namespace: str, pod: str, routable: bool) -> None:
        """Eject a pod from the route's endpoints, or re-admit it. Idempotent."""
        ...
