"""Circuit breakers live: the engine's state machine (scaling/engine/breakers.py) per endpoint (a pod of a
pool) and per pool, its state in CircuitBreaker rows, each transition a BreakerTransition and an audit record.

An open endpoint breaker ejects its pod from the route: the pod gets the label `headroom.io/ejected=true`
(scaling/drivers/kubernetes.py), which the route's endpoints leave out; a closed one removes the label.
Half-open re-admits the pod so that it takes the probe requests whose outcome closes or re-opens it.
Ejecting every endpoint would turn an error rate into an outage: when all are open, all stay in
(`routable_endpoints`). A person may force a breaker open or closed; the evaluation leaves it alone
until released. Labels are reconciled from the rows on every evaluation, so a worker that died between
the commit and the label write leaves nothing wrong for longer than a tick.

Only the pods the pool's Deployment has now (or that answered requests in the evaluated window) are
evaluated: the row of a pod that is gone is left as it was, so it ages out of the fallback's picture.
Each evaluated endpoint row records the workload its pod was counted under (`last_counts["workload"]`);
once the pool is repointed at another Deployment, namespace or cluster, the rows of the old one's pods
that are not closed are ended: the pod's label removed, the row closed (and released), a transition.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from controlplane import services as core
from controlplane.models import Cluster, Pool
from scaling import traffic
from scaling.choices import BreakerScope, BreakerState
from scaling.drivers.cluster import ClusterDriver, DriverError
from scaling.drivers.registry import cluster_driver, workload_of
from scaling.engine import breakers as engine
from scaling.drivers.signals import PoolSelector
from scaling.models import BreakerTransition, CircuitBreaker

logger = logging.getLogger(__name__)
# Closed breakers judge the failures of this window (the engine's); half-open ones the probes of the last
# beat interval only: ejected at least `open_for_s` (30 s) earlier, the pod's old failures are outside it.
CLOSED_WINDOW, PROBE_WINDOW = "1m", "15s"
# A gone pod's closed row is deleted once it has not been evaluated this long (it left the fallback's picture
# long before): a pod missing from one read of the endpoints keeps its row.
GONE_ENDPOINT_KEPT = timedelta(hours=1)

AUTO = traffic.AUTO


class BreakerConflict(traffic.ShiftConflict):
    pass


def _thresholds(breaker: CircuitBreaker) -> engine.BreakerThresholds:
    return engine.BreakerThresholds(failure_ratio=breaker.failure_ratio, min_requests=breaker.min_requests,
                                    open_for_s=breaker.open_for_s)


def _breaker(scope: str, pool: Pool, endpoint: str, now: datetime) -> CircuitBreaker:
    """The locked row of a breaker, created closed with the scope's default thresholds on first sight."""
    defaults = engine.DEFAULT_THRESHOLDS[scope]
    try:
        with transaction.atomic():
            CircuitBreaker.objects.get_or_create(
                scope=scope, pool=pool, endpoint=endpoint,
                defaults={"since": now, "failure_ratio": defaults.failure_ratio, "min_requests": defaults.min_requests,
                          "open_for_s": defaults.open_for_s})
    except IntegrityError:
        pass  # another worker created it a moment ago
    return CircuitBreaker.objects.select_for_update(of=("self",)).select_related("pool__team").get(
        scope=scope, pool=pool, endpoint=endpoint)


def _move(breaker: CircuitBreaker, target: str, actor: core.Actor, reason: str, now: datetime,
          release: bool = False) -> None:
    before, source = core.snapshot(breaker), breaker.state
    breaker.state, breaker.since, breaker.probe_successes = target, now, 0
    if release:  # the move ends a person's hold too
        breaker.forced = False
    breaker.save()
    BreakerTransition.objects.create(breaker=breaker, at=now, from_state=source, to_state=target,
                                     actor_name=actor.name, channel=actor.channel, reason=reason)
    core.record(actor, f"breaker-{target}", breaker, before=before, team=breaker.pool.team if breaker.pool else None)


def _step(breaker: CircuitBreaker, counts: engine.WindowCounts, now: datetime, workload: dict | None = None) -> bool:
    """One evaluation of a locked breaker; True when it changed state. `workload`: what the endpoint's pod
    is known to belong to now (None: not known this time; the row keeps what it recorded)."""
    where = workload or (breaker.last_counts or {}).get("workload")
    breaker.last_counts = {"requests": counts.requests, "failures": counts.failures, "at": now.isoformat()}
    if where:
        breaker.last_counts["workload"] = where
    if breaker.forced:
        breaker.last_reasons = [f"forced {breaker.state} by a person"]
        breaker.save()
        return False
    state = engine.BreakerState(breaker.state, breaker.since.timestamp(), breaker.probe_successes)
    decision = engine.decide_breaker(now.timestamp(), counts, _thresholds(breaker), state)
    breaker.last_reasons = list(decision.reasons)
    if decision.transition is not None:
        _move(breaker, decision.state.state, AUTO, "; ".join(decision.reasons), now)
        return True
    breaker.probe_successes = decision.state.probe_successes
    breaker.save()
    return False


def tick_fallbacks(pools: list[Pool], now: datetime) -> list[int]:
    """A breaker that moved changes what the pool can serve: its fallback policy decides at once (the
    fallback service's ordinary tick, under the policy's lock: audited, idempotent), instead of at the
    next `advance-fallbacks` beat. Returns the pools ticked; one failure never stops the others."""
    from scaling import fallbacks  # fallbacks reads the breakers' rows; imported here to keep the graph flat
    from scaling.models import FallbackPolicy

    ticked = []
    for pool_id in FallbackPolicy.objects.filter(pool__in=pools, enabled=True).order_by("pk") \
            .values_list("pk", flat=True):
        try:
            fallbacks.tick(pool_id, now=now)
            ticked.append(pool_id)
        except Exception:  # noqa: BLE001 - logged; the advance-fallbacks beat tries again
            logger.exception("the fallback tick of pool #%s after a breaker transition failed", pool_id)
    return ticked


def _workload_key(pool: Pool) -> dict:
    """What an endpoint row records of the pool's workload: where its pod was counted."""
    return {"cluster": pool.cluster_id, "namespace": pool.namespace, "deployment": pool.deployment}


def evaluate(pool: Pool, counts: dict[str, engine.WindowCounts], now: datetime | None = None,
             driver: ClusterDriver | None = None) -> dict[str, str]:
    """One evaluation of a pool's endpoint breakers and its pool breaker, from each pod's requests and
    failures (over the breaker window while closed; since the last evaluation while half-open).
    Returns pod → breaker state after the labels were reconciled."""
    now = now or timezone.now()
    try:
        driver = driver or cluster_driver(pool.cluster)
        pods: dict[str, bool] | None = driver.endpoints(workload_of(pool))
        live: set[str] | None = set(pods)
    except DriverError as exc:  # unknown is not "gone": every known row steps, as before; reconcile reports it
        logger.warning("breakers of %s: the pool's pods could not be read, every known endpoint steps: %s", pool, exc)
        pods = live = None
    # Every live endpoint steps, with or without requests: an ejected pod gets none, and its cool-down must
    # still end in the probes. The row of a pod that is gone is left as it was and ages out of the fallback's
    # picture; a pod no longer listed that still answered requests in the window is evaluated on them.
    answered = {pod for pod, window in counts.items() if window.requests}
    if live is None:
        stepped = set(counts) | set(CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, pool=pool)
                                     .values_list("endpoint", flat=True))
    else:
        stepped = live | answered
    here = _workload_key(pool)
    moved = False
    with transaction.atomic():
        for endpoint in sorted(stepped):
            known_here = live is not None or endpoint in answered
            moved |= _step(_breaker(BreakerScope.ENDPOINT, pool, endpoint, now),
                           counts.get(endpoint, engine.WindowCounts(0, 0)), now, here if known_here else None)
        total = engine.WindowCounts(sum(c.requests for c in counts.values()), sum(c.failures for c in counts.values()))
        moved |= _step(_breaker(BreakerScope.POOL, pool, "", now), total, now)
    moved |= end_repointed(pool, driver, now)
    states = reconcile(pool, driver, pods)
    if live is not None:
        forget_gone_endpoints(pool, live, now)
    if moved:
        tick_fallbacks([pool], now)
    return states


def forget_gone_endpoints(pool: Pool, live: set[str], now: datetime) -> int:
    """Delete the rows of pods that are gone (not listed, not evaluated for GONE_ENDPOINT_KEPT) and never moved:
    closed, not forced, without a transition. A pool's pods change with every scale-up and -down, and every row
    is read by each evaluation, the fallback's picture and the pool page: kept, they grow for good. A row that
    ever moved stays, with its transitions (an incident's timeline shows them)."""
    gone = CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, pool=pool, state=BreakerState.CLOSED, forced=False,
                                         updated_at__lt=now - GONE_ENDPOINT_KEPT) \
        .exclude(endpoint__in=live).exclude(Exists(BreakerTransition.objects.filter(breaker=OuterRef("pk"))))
    return gone.delete()[0]


def end_repointed(pool: Pool, driver: ClusterDriver | None, now: datetime) -> bool:
    """The pool was repointed (another Deployment, namespace or cluster): the endpoint rows its old pods left
    open, half-open or forced end. The pod's label is removed first (a merge patch of one label, idempotent;
    a pod that is gone has none), then the row is closed and released, a transition and an audit record
    with the reason. A label write that fails leaves the row for the next evaluation. True when a row moved."""
    here = _workload_key(pool)
    stale = [row for row in CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, pool=pool,
                                                          last_counts__has_key="workload")
             .exclude(state=BreakerState.CLOSED, forced=False).order_by("endpoint")
             if row.last_counts["workload"] != here]
    moved = False
    for row in stale:
        was = row.last_counts["workload"]
        where = f"{was.get('namespace')}/{was.get('deployment')}"
        if row.state != BreakerState.CLOSED:
            try:
                _unlabel(pool, row.endpoint, was, driver)
            except DriverError as exc:
                logger.warning("breaker #%s: the label of pod %s/%s waits for the next evaluation: %s",
                               row.pk, was.get("namespace"), row.endpoint, exc)
                continue
        reason = (f"the pool no longer runs {where}: it now runs {pool.namespace}/{pool.deployment}"
                  + ("" if was.get("cluster") == pool.cluster_id else " in another cluster")
                  + f"; pod {row.endpoint} is not the pool's")
        with transaction.atomic():
            breaker = CircuitBreaker.objects.select_for_update(of=("self",)).select_related("pool__team") \
                .get(pk=row.pk)
            if (breaker.last_counts or {}).get("workload") != was or (
                    breaker.state == BreakerState.CLOSED and not breaker.forced):
                continue  # another evaluation ended it, or it was evaluated again meanwhile
            if breaker.state != BreakerState.CLOSED:
                _move(breaker, BreakerState.CLOSED, AUTO, reason, now, release=True)
                moved = True
            else:  # held closed by a person: released, nothing to move
                before, breaker.forced = core.snapshot(breaker), False
                breaker.save()
                core.record(AUTO, "breaker-release", breaker, before=before, team=breaker.pool.team)
    return moved


def _unlabel(pool: Pool, pod: str, was: dict, driver: ClusterDriver | None) -> None:
    """Remove the ejection label from a pod of the pool's old workload; a pod (or cluster) that is gone is done.
    Left alone while another pool's open breaker ejects the same pod (a pool that took the Deployment over)."""
    if CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, endpoint=pod, state=BreakerState.OPEN,
                                     pool__cluster_id=was.get("cluster"), pool__namespace=was.get("namespace")) \
            .exclude(pool=pool).exists():
        return
    if was.get("cluster") != pool.cluster_id or driver is None:
        old = Cluster.objects.filter(pk=was.get("cluster")).first()
        if old is None:
            return  # the cluster is gone, and its pods with it
        driver = cluster_driver(old)
    try:
        driver.set_routable(was["namespace"], pod, True)
    except DriverError as exc:
        if exc.status != 404:
            raise


def evaluate_system(counts: engine.WindowCounts, now: datetime | None = None) -> CircuitBreaker:
    """The system breaker over every pool's answers together (0.5 % by default): open means the whole
    fleet is failing; it ejects nothing, its transitions are recorded and audited."""
    now = now or timezone.now()
    defaults = engine.SYSTEM_THRESHOLDS
    with transaction.atomic():
        try:
            with transaction.atomic():
                CircuitBreaker.objects.get_or_create(
                    scope=BreakerScope.SYSTEM, pool=None, endpoint="",
                    defaults={"since": now, "failure_ratio": defaults.failure_ratio,
                              "min_requests": defaults.min_requests, "open_for_s": defaults.open_for_s})
        except IntegrityError:
            pass
        breaker = CircuitBreaker.objects.select_for_update().get(scope=BreakerScope.SYSTEM, pool=None, endpoint="")
        moved = _step(breaker, counts, now)
    if moved:  # open: every pool with a fallback policy may send traffic there; closed: they may return
        tick_fallbacks(list(Pool.objects.filter(fallback_policy__enabled=True)), now)
    return breaker


def reconcile(pool: Pool, driver: ClusterDriver | None = None, pods: dict[str, bool] | None = None) -> dict[str, str]:
    """Label the pool's pods after their breakers: open ones ejected (unless all would be), others routable.
    `pods`: the pool's pods and whether each is routable, as the caller just read them (None: read here)."""
    driver = driver or cluster_driver(pool.cluster)
    pods = driver.endpoints(workload_of(pool)) if pods is None else pods
    states = dict(CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, pool=pool, endpoint__in=list(pods))
                  .values_list("endpoint", "state"))
    engine_states = {pod: engine.BreakerState(states.get(pod, BreakerState.CLOSED)) for pod in pods}
    # Half-open pods take the probes: routable like closed ones, only open ones leave.
    kept = set(engine.routable_endpoints({pod: engine.BreakerState(
        engine.CLOSED if state.state != engine.OPEN else engine.OPEN) for pod, state in engine_states.items()}))
    for pod, routable in sorted(pods.items()):
        if (pod in kept) != routable:
            driver.set_routable(pool.namespace, pod, pod in kept)
    return {pod: states.get(pod, BreakerState.CLOSED) for pod in pods}


def force(breaker_id: int, state: str, actor: core.Actor, comment: str = "", driver: ClusterDriver | None = None,
          now: datetime | None = None) -> CircuitBreaker:
    """A person opens or closes a breaker and holds it there; `release` hands it back to the evaluation."""
    now = now or timezone.now()
    with transaction.atomic():
        breaker = CircuitBreaker.objects.select_for_update(of=("self",)).select_related("pool__team", "pool__cluster") \
            .get(pk=breaker_id)
        if breaker.pool is not None:
            traffic._check_may_act(actor, breaker.pool)
        if state == "release":
            if not breaker.forced:
                raise BreakerConflict(f"Breaker #{breaker.pk} is not forced: nothing to release.")
            breaker.forced = False
            breaker.save()
            core.record(actor, "breaker-release", breaker, team=breaker.pool.team if breaker.pool else None)
        else:
            before, was_forced = core.snapshot(breaker), breaker.forced
            breaker.forced = True
            moved = breaker.state != state
            if moved:
                _move(breaker, state, actor, comment or f"forced {state} by {actor.name}", now)
            elif not was_forced:  # held where it already is: still a person's act, and the evaluation stops
                breaker.save()
                core.record(actor, "breaker-hold", breaker, before=before,
                            team=breaker.pool.team if breaker.pool else None)
    if breaker.pool is not None and breaker.scope == BreakerScope.ENDPOINT:
        try:
            reconcile(breaker.pool, driver)
        except DriverError as exc:  # the breaker is held (committed); the next evaluation labels the pod
            logger.warning("breaker #%s: the pod's label waits for the next evaluation: %s", breaker.pk, exc)
    if state != "release" and moved:
        tick_fallbacks([breaker.pool] if breaker.pool is not None
                       else list(Pool.objects.filter(fallback_policy__enabled=True)), now)
    return breaker



def read_counts(pools: list[Pool], now: datetime) -> dict[int, dict[str, engine.WindowCounts]]:
    """Each pool's pods' requests and failures from the cluster's Prometheus: over the closed window for
    pods whose breaker is closed, over the probe window for half-open ones."""
    from scaling import loop  # the loop builds the cluster's signal source

    source = loop._signal_source(pools[0].cluster)
    if source is None:
        return {}
    selectors = [PoolSelector.of_deployment(str(pool.pk), pool.namespace, pool.deployment) for pool in pools]
    closed = source.endpoint_counts(selectors, CLOSED_WINDOW, now.timestamp())
    probes = source.endpoint_counts(selectors, PROBE_WINDOW, now.timestamp())
    half_open = set(CircuitBreaker.objects.filter(scope=BreakerScope.ENDPOINT, pool__in=pools,
                                                  state=BreakerState.HALF_OPEN).values_list("pool_id", "endpoint"))
    counts: dict[int, dict[str, engine.WindowCounts]] = {}
    for pool in pools:
        pods = {pod: engine.WindowCounts(*pair) for pod, pair in closed[str(pool.pk)].items()}
        for pod, pair in probes[str(pool.pk)].items():
            if (pool.pk, pod) in half_open:
                pods[pod] = engine.WindowCounts(*pair)
        for pod in [pod for pod in pods if (pool.pk, pod) in half_open and pod not in probes[str(pool.pk)]]:
            pods[pod] = engine.WindowCounts(0, 0)  # no probe yet
        counts[pool.pk] = pods
    return counts


def advance(now: datetime | None = None) -> dict[str, int]:
    """Evaluate every pool's breakers from Prometheus, one cluster at a time. A failed read evaluates nothing
    for its cluster (an unknown is no verdict); one pool's failure never stops the others."""
    now = now or timezone.now()
    counts = {"evaluated": 0, "errors": 0}
    system = [0, 0]  # requests and failures over every pool read
    unread: list[str] = []  # clusters whose counts could not be read: the fleet's total is not known
    by_cluster: dict[int, list[Pool]] = {}
    for pool in Pool.objects.select_related("cluster", "team").order_by("pk"):
        by_cluster.setdefault(pool.cluster_id, []).append(pool)
    for pools in by_cluster.values():
        try:
            read = read_counts(pools, now)
        except Exception:  # noqa: BLE001 - logged; the next beat reads again
            counts["errors"] += 1
            logger.exception("reading endpoint counts of cluster %s failed", pools[0].cluster)
            unread.append(pools[0].cluster.name)
            continue
        for pool in pools:
            if pool.pk not in read:
                continue
            for window in read[pool.pk].values():
                system[0] += window.requests
                system[1] += window.failures
            try:
                evaluate(pool, read[pool.pk], now)
                counts["evaluated"] += 1
            except Exception:  # noqa: BLE001
                counts["errors"] += 1
                logger.exception("evaluating the breakers of %s failed", pool)
    if counts["evaluated"] and unread:
        # The system breaker judges the whole fleet: the clusters read are not it (a small cluster's 1 % would
        # open it and send every pool to its fallback). No verdict until every cluster is read.
        logger.warning("the system breaker is not evaluated: the counts of %s could not be read", ", ".join(unread))
    elif counts["evaluated"]:
        evaluate_system(engine.WindowCounts(*system), now)
    return counts
