"""An emulated vLLM engine core: continuous batching in model time.

At most `max_num_seqs` requests run (and only while their tokens fit the KV cache); the rest wait,
which is what `vllm:num_requests_waiting` counts; they are admitted oldest first, or with
`scheduling_policy="priority"` (vLLM's `--scheduling-policy priority`) by their `priority` (lower
first), then age. Each engine step emits one token for every
running request and lasts `inter_token_seconds(batch)`, plus the prefill of the requests admitted
in that step (`prefill_seconds`), both from the simulator's pool profile. The engine thread runs
lazily: it wakes every few milliseconds and replays every step that has ended since, so a fast
clock costs no more CPU than a slow one.
"""
from __future__ import annotations

import itertools
import math
import queue
import threading
from collections import deque
from dataclasses import dataclass, field

from scaling.sim.profiles import SCHEDULING_POLICIES, PoolProfile, inter_token_seconds, prefill_seconds

from sandbox.clock import Clock
from sandbox.vllm_metrics import FinishedRequest, VllmMetrics

MIN_TICK_S = 0.005  # wall seconds; below this the thread would only burn CPU
MAX_TICK_S = 0.25

_request_ids = itertools.count(1)


@dataclass(eq=False)
class EngineRequest:
    prompt_tokens: int
    max_tokens: int
    arrival: float  # model seconds
    priority: int = 0  # vLLM's request priority: lower is admitted first under priority scheduling
    request_id: int = field(default_factory=lambda: next(_request_ids))
    admitted: float | None = None
    first_token: float | None = None
    finished: float | None = None
    generated: int = 0
    finished_reason: str | None = None
    # The engine puts the running token count after each step, then None when finished.
    updates: queue.SimpleQueue[int | None] = field(default_factory=queue.SimpleQueue)

    @property
    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.generated


@dataclass
class _Step:
    start: float
    duration: float
    new_prompt_tokens: int
    decoding: int  # requests that already had their first token
    steps: int = 1  # engine iterations merged into this one (decode only, see _quiet_steps)

    @property
    def end(self) -> float:
        return self.start + self.duration


class Engine:
    def __init__(self, profile: PoolProfile, metrics: VllmMetrics, clock: Clock,
                 scheduling_policy: str = "fcfs") -> None:
        if scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(f"--scheduling-policy must be one of {', '.join(SCHEDULING_POLICIES)}")
        self.profile = profile
        self.scheduling_policy = scheduling_policy
        self.metrics = metrics
        self.clock = clock
        self.slowdown = 1.0  # fault knob: every step takes this many times longer
        self._cond = threading.Condition()
        self._waiting: deque[EngineRequest] = deque()
        self._running: list[EngineRequest] = []
        self._step: _Step | None = None
        self._time = clock.now()  # the engine's own model time, up to which it has replayed
        self._paused = False
        self._paused_at = 0.0
        self._stopped = False
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="vllm-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the engine and abort everything in it (a dead process answers nobody)."""
        with self._cond:
            self._stopped = True
            for request in [*self._running, *self._waiting]:
                self._finish(request, "abort", self._time, record=False)
            self._running.clear()
            self._waiting.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def pause(self) -> None:
        """Stop scheduling (sleep mode, a hung engine); requests keep queueing."""
        with self._cond:
            if self._paused:
                return
            self._advance(self.clock.now())
            self._paused = True
            self._paused_at = self.clock.now()

    def resume(self) -> None:
        """Carry on where the engine stopped: the step in progress ends as late as the pause lasted."""
        with self._cond:
            if not self._paused:
                return
            paused_for = self.clock.now() - self._paused_at
            self._time += paused_for
            if self._step is not None:
                self._step.start += paused_for
            self._paused = False
            self._cond.notify_all()

    # --- requests --------------------------------------------------------------------------
    def submit(self, prompt_tokens: int, max_tokens: int, priority: int = 0) -> EngineRequest:
        with self._cond:
            if self._stopped:
                raise RuntimeError("engine is stopped")
            request = EngineRequest(prompt_tokens, max_tokens, arrival=self.clock.now(), priority=priority)
            self._waiting.append(request)
            self._publish_load()
            self._cond.notify_all()
            return request

    def abort(self, request: EngineRequest) -> None:
        """The client went away: drop the request like vLLM does on disconnect."""
        with self._cond:
            if request.finished is not None:
                return
            if request in self._running:
                self._running.remove(request)
            elif request in self._waiting:
                self._waiting.remove(request)
            # As vLLM does: an aborted request leaves no trace in the per-request metrics, `finished_reason="abort"`
            # included (vllm-project/vllm#31503, #55634); only the engine's token counters saw it.
            self._finish(request, "abort", max(self._time, request.arrival), record=False)
            self._publish_load()

    def advance_to(self, until: float) -> None:
        """Replay the engine up to model time `until` (offline use, with a ManualClock and no thread)."""
        with self._cond:
            self._advance(until)

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._running) + len(self._waiting)

    def load(self) -> tuple[int, int]:
        """(running, waiting) right now: what vLLM exports as num_requests_running/_waiting."""
        with self._cond:
            return len(self._running), len(self._waiting)

    # --- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        with self._cond:
            while not self._stopped:
                if not self._paused:
                    self._advance(self.clock.now())
                if self._paused or self._step is None:
                    self._cond.wait(timeout=MAX_TICK_S if self._paused else None)
                    continue
                wait_s = self.clock.to_wall(self._step.end - self.clock.now())
                self._cond.wait(timeout=min(MAX_TICK_S, max(MIN_TICK_S, wait_s)))

    def _advance(self, until: float) -> None:
        """Replay every engine step that has ended by model time `until`."""
        while True:
            if self._step is None:
                self._step = self._begin_step(until)
                if self._step is None:
                    self._time = max(self._time, until)
                    break
            if self._step.end > until:
                break
            self._complete_step(self._step)
            self._step = None
        self._publish_load()

    def _begin_step(self, until: float) -> _Step | None:
        if not self._running:
            if not self._waiting or self._waiting[0].arrival > until:
                return None
            self._time = max(self._time, self._waiting[0].arrival)
        admitted = self._admit()
        if not self._running:
            return None
        batch = len(self._running)
        if admitted:
            new_prompt = sum(r.prompt_tokens for r in admitted)
            duration = prefill_seconds(self.profile, new_prompt, batch_size=batch) * self.slowdown
            return _Step(self._time, duration, new_prompt, batch - len(admitted))
        step_s = inter_token_seconds(self.profile, batch) * self.slowdown
        steps = self._quiet_steps(step_s, until)
        return _Step(self._time, step_s * steps, 0, batch, steps)

    def _quiet_steps(self, step_s: float, until: float) -> int:
        """Decode steps that can run as one: the batch stays the same until a request finishes or
        a waiting one can join, and only steps that have already ended (by `until`) are merged."""
        steps = min(r.max_tokens - r.generated for r in self._running)
        steps = min(steps, int((until - self._time) / step_s + 1e-9))
        if self._waiting and len(self._running) < self.profile.max_num_seqs:
            arrival = self._waiting[0].arrival
            if arrival > self._time:
                steps = min(steps, math.ceil((arrival - self._time) / step_s))
        return max(1, steps)

    def _admit(self) -> list[EngineRequest]:
        admitted: list[EngineRequest] = []
        kv_used = sum(r.kv_tokens for r in self._running)
        while self._waiting and len(self._running) < self.profile.max_num_seqs:
            candidate = self._next_waiting()
            if candidate.arrival > self._time:
                break
            if self._running and kv_used + candidate.prompt_tokens + 1 > self.profile.kv_cache_tokens:
                break  # KV cache full: wait for running requests to finish
            self._waiting.remove(candidate)
            candidate.admitted = self._time
            kv_used += candidate.prompt_tokens
            self._running.append(candidate)
            admitted.append(candidate)
        return admitted

    def _next_waiting(self) -> EngineRequest:
        """The waiting request the scheduler admits next: the oldest, or under priority scheduling the
        lowest (priority, arrival) among those arrived by the engine's time."""
        oldest = self._waiting[0]
        if self.scheduling_policy != "priority":
            return oldest
        arrived = [r for r in self._waiting if r.arrival <= self._time]
        return min(arrived, key=lambda r: (r.priority, r.arrival)) if arrived else oldest

    def _complete_step(self, step: _Step) -> None:
        self._time = step.end
        still_running: list[EngineRequest] = []
        for request in self._running:
            request.generated += step.steps
            if request.first_token is None:
                request.first_token = step.end
                # vLLM observes the time to first token when the token comes out, not when the request ends.
                self.metrics.record_first_token(step.end - request.arrival)
            if request.generated >= request.max_tokens:
                self._finish(request, "length", step.end)
            else:
                request.updates.put(request.generated)
                still_running.append(request)
        self.metrics.record_step(
            step_tokens=step.new_prompt_tokens + len(self._running),
            new_prompt_tokens=step.new_prompt_tokens,
            generated=len(self._running) * step.steps,
            inter_token_s=step.duration / step.steps,
            decoding_requests=step.decoding,
            steps=step.steps,
        )
        self._running = still_running

    def _finish(self, request: EngineRequest, reason: str, at: float, record: bool = True) -> None:
        request.finished = at
        request.finished_reason = reason
        if record:
            admitted = request.admitted if request.admitted is not None else at
            first = request.first_token if request.first_token is not None else at
            self.metrics.record_finished(FinishedRequest(
                prompt_tokens=request.prompt_tokens,
                generation_tokens=request.generated,
                max_tokens=request.max_tokens,
                finished_reason=reason,
                queue_s=admitted - request.arrival,
                prefill_s=first - admitted,
                decode_s=at - first,
                e2e_s=at - request.arrival,
            ))
        request.updates.put(request.generated)
        request.updates.put(None)

    def _publish_load(self) -> None:
        kv_used = sum(r.kv_tokens for r in self._running)
        self.metrics.set_load(len(self._running), len(self._waiting), kv_used)
