"""Workloads: what arrives at the pool. One interface for request logs and per-window rate files.

A `Trace` is a request log (arrival time, prompt and output tokens per request). A `RateTrace`
is a sequence of windows with a request rate (ServeGen); it can be binned for fluid mode without
drawing single requests, and sampled into a `Trace` for request mode.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# Token lengths when a workload carries none (ServeGen's rate files): lognormals matched to the
# mean and median of the Azure conversation trace (prompt 1,155 / 1,020; output 211 / 129).
DEFAULT_PROMPT_MEDIAN, DEFAULT_PROMPT_SIGMA = 1020.0, 0.4986
DEFAULT_OUTPUT_MEDIAN, DEFAULT_OUTPUT_SIGMA = 129.0, 0.9920
TOKEN_SAMPLE_SIZE = 20_000


@dataclass(frozen=True)
class Bins:
    """Arrivals aggregated into fixed steps, for fluid mode."""

    step_s: float
    requests: np.ndarray  # float64, requests arriving in each step (may be fractional)
    prompt_tokens: np.ndarray  # float64, sum of prompt tokens arriving in each step
    output_tokens: np.ndarray  # float64, sum of output tokens arriving in each step
    # Squared CV of the inter-arrival times in each step (burstiness); None: Poisson (1) everywhere.
    arrival_scv: np.ndarray | None = None


class Workload(Protocol):
    name: str

    @property
    def span_s(self) -> float: ...

    @property
    def expected_requests(self) -> float: ...

    def bins(self, step_s: float) -> Bins: ...

    def to_requests(self, seed: int) -> Trace: ...

    def token_sample(self) -> tuple[np.ndarray, np.ndarray]:
        """Prompt and output lengths representative of the workload (for fluid-mode latency spreads)."""
        ...


@dataclass(frozen=True)
class Trace:
    name: str
    arrival_s: np.ndarray  # float64, seconds from the trace start, sorted
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64

    def __post_init__(self) -> None:
        if not (len(self.arrival_s) == len(self.prompt_tokens) == len(self.output_tokens)):
            raise ValueError("trace columns differ in length")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def span_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    @property
    def expected_requests(self) -> float:
        return float(len(self))

    def bins(self, step_s: float) -> Bins:
        n_steps = int(self.span_s // step_s) + 1
        index = (self.arrival_s // step_s).astype(np.int64)
        return Bins(
            step_s=step_s,
            requests=np.bincount(index, minlength=n_steps).astype(np.float64),
            prompt_tokens=np.bincount(index, weights=self.prompt_tokens, minlength=n_steps),
            output_tokens=np.bincount(index, weights=self.output_tokens, minlength=n_steps),
        )

    def to_requests(self, seed: int) -> Trace:
        return self

    def token_sample(self) -> tuple[np.ndarray, np.ndarray]:
        return self.prompt_tokens, self.output_tokens

    def select(self, keep: np.ndarray, arrival_s: np.ndarray | None = None) -> Trace:
        arrivals = self.arrival_s[keep] if arrival_s is None else arrival_s
        order = np.argsort(arrivals, kind="stable")
        return Trace(self.name, arrivals[order], self.prompt_tokens[keep][order], self.output_tokens[keep][order])


def default_token_lengths(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    prompt = rng.lognormal(np.log(DEFAULT_PROMPT_MEDIAN), DEFAULT_PROMPT_SIGMA, count)
    output = rng.lognormal(np.log(DEFAULT_OUTPUT_MEDIAN), DEFAULT_OUTPUT_SIGMA, count)
    return np.maximum(1, prompt.round()).astype(np.int64), np.maximum(1, output.round()).astype(np.int64)


@dataclass(frozen=True)
class ClientWindows:
    """One ServeGen client's windows: rate and the fitted inter-arrival distribution."""

    rate_rps: np.ndarray
    distribution: list[str]  # "Gamma", "Weibull" or "" (Poisson) per window
    shape: np.ndarray
    scale: np.ndarray


@dataclass(frozen=True)
class RateTrace:
    """Per-window request rates. `clients` (ServeGen per-client files) drive request sampling."""

    name: str
    window_start_s: np.ndarray
    window_len_s: float
    rate_rps: np.ndarray  # total rate per window
    cv: np.ndarray | None = None  # inter-arrival CV per window when no per-client fits are known
    clients: list[ClientWindows] = field(default_factory=list)

    @property
    def span_s(self) -> float:
        return float(self.window_start_s[-1] - self.window_start_s[0] + self.window_len_s) if len(self.rate_rps) else 0.0

    @property
    def expected_requests(self) -> float:
        return float(self.rate_rps.sum() * self.window_len_s)

    def bins(self, step_s: float) -> Bins:
        n_steps = int(np.ceil(self.span_s / step_s))
        step_start = np.arange(n_steps) * step_s
        window = np.minimum((step_start // self.window_len_s).astype(np.int64), len(self.rate_rps) - 1)
        requests = self.rate_rps[window] * step_s
        prompt, output = self.token_sample()
        arrival_scv = None
        if self.cv is not None and not self.clients:
            # The window's inter-arrival CV, as request mode draws it (`_aggregate_as_client`).
            arrival_scv = np.where(self.cv > 0, self.cv, 1.0)[window] ** 2
        return Bins(step_s, requests, requests * prompt.mean(), requests * output.mean(), arrival_scv)

    def token_sample(self) -> tuple[np.ndarray, np.ndarray]:
        return default_token_lengths(TOKEN_SAMPLE_SIZE, np.random.default_rng(0))

    def to_requests(self, seed: int) -> Trace:
        rng = np.random.default_rng(seed)
        streams = self.clients or [self._aggregate_as_client()]
        arrivals = np.concatenate([_sample_client(client, self.window_len_s, rng) for client in streams])
        arrivals.sort()
        prompt, output = default_token_lengths(len(arrivals), rng)
        return Trace(self.name, arrivals, prompt, output)

    def _aggregate_as_client(self) -> ClientWindows:
        # Aggregate files carry only a CV: a Gamma with that CV (shape 1/cv^2) reproduces it.
        cv = self.cv if self.cv is not None else np.ones_like(self.rate_rps)
        cv = np.where(cv > 0, cv, 1.0)
        with np.errstate(divide="ignore", over="ignore"):  # a CV of ~0: an infinite shape (see _sample_client)
            shape = 1.0 / cv**2
        return ClientWindows(self.rate_rps, ["Gamma"] * len(cv), shape, 1.0 / shape)


def _sample_client(client: ClientWindows, window_len_s: float, rng: np.random.Generator) -> np.ndarray:
    parts = []
    expected = client.rate_rps * window_len_s
    counts = np.floor(expected + rng.random(len(expected))).astype(np.int64)  # unbiased rounding
    for window, count in enumerate(counts):
        if count <= 0:
            continue
        gaps = _inter_arrivals(client.distribution[window], client.shape[window], client.scale[window], count + 1, rng)
        times = np.cumsum(gaps)
        if not (np.isfinite(times[-1]) and times[-1] > 0):
            # A degenerate fit (a CV so small its shape overflows, a scale of ~0) draws gaps of 0 or
            # infinity: the window's requests evenly spaced, the limit of a regular process.
            times = np.arange(1.0, count + 2.0)
        parts.append(window * window_len_s + times[:-1] * (window_len_s / times[-1]))
    return np.concatenate(parts) if parts else np.empty(0)


def _inter_arrivals(distribution: str, shape: float, scale: float, count: int, rng: np.random.Generator) -> np.ndarray:
    if distribution == "Gamma" and shape > 0 and scale > 0:
        return rng.gamma(shape, scale, count)
    if distribution == "Weibull" and shape > 0 and scale > 0:
        return scale * rng.weibull(shape, count)
    return rng.exponential(1.0, count)
