"""Workload transforms: rate scale, time scale, time shift, a synthetic surge and long prompts.

Request logs are scaled by thinning (factor < 1) or by adding copies of requests (factor > 1);
a copy lands at a uniform random time between its original and the next request, so the rate
curve keeps its shape down to the scale of one inter-arrival gap. Rate files scale their rates.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from scaling.sim.workload import RateTrace, Trace, Workload

Multiplier = Callable[[np.ndarray], np.ndarray]  # seconds from the start -> rate factor


def rate_scale(workload: Workload, factor: float, seed: int = 0) -> Workload:
    if factor <= 0:
        raise ValueError(f"rate scale must be positive, got {factor}")
    return _reshape_rate(workload, lambda t: np.full(np.shape(t), float(factor)), seed)


def time_scale(workload: Workload, factor: float) -> Workload:
    """Stretch time by `factor`: 2 doubles the span and halves the rate."""
    if factor <= 0:
        raise ValueError(f"time scale must be positive, got {factor}")
    if isinstance(workload, Trace):
        return dataclasses.replace(workload, arrival_s=workload.arrival_s * factor)
    assert isinstance(workload, RateTrace)
    return dataclasses.replace(
        workload,
        window_start_s=workload.window_start_s * factor,
        window_len_s=workload.window_len_s * factor,
        rate_rps=workload.rate_rps / factor,
        clients=[dataclasses.replace(c, rate_rps=c.rate_rps / factor, scale=c.scale * factor) for c in workload.clients],
    )


def time_shift(workload: Workload, shift_s: float) -> Workload:
    """Start the replay `shift_s` later (idle lead-in); a negative shift drops the trace's beginning."""
    if isinstance(workload, Trace):
        arrivals = workload.arrival_s + shift_s
        keep = arrivals >= 0
        if shift_s < 0:
            arrivals = arrivals - arrivals[keep][0] if keep.any() else arrivals
        return workload.select(keep, arrivals[keep])
    assert isinstance(workload, RateTrace)
    windows = int(round(shift_s / workload.window_len_s))
    if windows >= 0:
        pad = np.zeros(windows)
        rates = np.concatenate([pad, workload.rate_rps])
        clients = [dataclasses.replace(c, rate_rps=np.concatenate([pad, c.rate_rps]), shape=np.concatenate([pad, c.shape]),
                                       scale=np.concatenate([pad, c.scale]), distribution=[""] * windows + c.distribution)
                   for c in workload.clients]
        cv = np.concatenate([np.ones(windows), workload.cv]) if workload.cv is not None else None
    else:
        rates = workload.rate_rps[-windows:]
        clients = [dataclasses.replace(c, rate_rps=c.rate_rps[-windows:], shape=c.shape[-windows:], scale=c.scale[-windows:],
                                       distribution=c.distribution[-windows:]) for c in workload.clients]
        cv = workload.cv[-windows:] if workload.cv is not None else None
    starts = np.arange(len(rates)) * workload.window_len_s
    return dataclasses.replace(workload, window_start_s=starts, rate_rps=rates, cv=cv, clients=clients)


def long_prompts(workload: Trace, median_tokens: float, sigma: float, seed: int = 0) -> Trace:
    """The same arrivals and outputs with prompt lengths redrawn from a lognormal (median, sigma).

    A pool whose TTFT is prefill-bound: with median 4,000 and sigma 0.6 the p99 prompt's prefill
    alone takes over a second on the default profile, so no number of replicas meets a 1-s p99.
    """
    if not isinstance(workload, Trace):
        raise ValueError("long prompts need a request log (a Trace), not a rate file")
    if median_tokens <= 0 or sigma < 0:
        raise ValueError(f"prompt lengths need a positive median and a non-negative sigma, got {median_tokens}, {sigma}")
    rng = np.random.default_rng(seed)
    prompt = np.maximum(1, rng.lognormal(np.log(median_tokens), sigma, len(workload)).round()).astype(np.int64)
    return dataclasses.replace(workload, prompt_tokens=prompt)


def surge_multiplier(factor: float, minutes: float, start_s: float) -> Multiplier:
    """1 until `start_s`, a linear ramp to `factor` over `minutes`, a hold as long, a decay as long."""
    ramp_s = minutes * 60.0

    def multiplier(t: np.ndarray) -> np.ndarray:
        since = t - start_s
        rising = np.clip(since / ramp_s, 0, 1)
        falling = np.clip((since - 2 * ramp_s) / ramp_s, 0, 1)
        return 1 + (factor - 1) * (rising - falling)

    return multiplier


SURGE_START_SHARE = 1 / 3  # where a surge starts by default: a third of the way in


def surge(workload: Workload, factor: float, minutes: float, start_s: float | None = None, seed: int = 0) -> Workload:
    """A synthetic surge on top of the trace as its baseline; by default it starts a third of the way in."""
    if factor <= 0 or minutes <= 0:
        raise ValueError(f"surge needs a positive factor and duration, got {factor}:{minutes}")
    start = workload.span_s * SURGE_START_SHARE if start_s is None else start_s
    return _reshape_rate(workload, surge_multiplier(factor, minutes, start), seed)


def _reshape_rate(workload: Workload, multiplier: Multiplier, seed: int) -> Workload:
    if isinstance(workload, RateTrace):
        # The window's factor is the mean over its span, sampled every 10 s.
        offsets = np.arange(0, workload.window_len_s, min(10.0, workload.window_len_s))
        factors = multiplier(workload.window_start_s[:, None] + offsets[None, :]).mean(axis=1)
        return dataclasses.replace(
            workload,
            rate_rps=workload.rate_rps * factors,
            clients=[dataclasses.replace(c, rate_rps=c.rate_rps * factors) for c in workload.clients],
        )
    assert isinstance(workload, Trace)
    rng = np.random.default_rng(seed)
    factors = multiplier(workload.arrival_s)
    copies = np.floor(factors).astype(np.int64) + (rng.random(len(factors)) < factors - np.floor(factors))
    index = np.repeat(np.arange(len(workload)), copies)
    first_copy = np.concatenate([[True], index[1:] != index[:-1]]) if len(index) else np.empty(0, bool)
    gaps = np.diff(workload.arrival_s, append=workload.arrival_s[-1] if len(workload) else 0.0)
    arrivals = workload.arrival_s[index] + np.where(first_copy, 0.0, rng.random(len(index)) * gaps[index])
    return workload.select(index, arrivals)
