"""`clairvoyant` (earlier `oracle`): knows the whole workload in advance and provisions the least replica-time that meets the SLO.

How the plan is computed (docs/simulator.md, "The oracle", says the same):
1. Cut the workload into bins one TTFT-SLO long (1 s by default). For bin k, the prefill work is
   W_k = prompt tokens / prefill throughput (GPU-seconds) and the decode work D_k = output tokens x
   inter-token latency at a full batch (sequence-seconds).
2. For a utilisation bound u in (0, 1], bin k needs n_k(u) = max(ceil(W_k / (u x bin)),
   ceil(D_k / (u x bin x slots))) ready replicas: a burst of prompts arriving within one SLO period
   is spread over enough replicas to be prefilled within that period.
3. Starting replicas one cold start ahead: the target at time t is the largest n_k over the bins in
   [t, t + cold-start p95 + one tick), at least min replicas, and never above the cap N, the
   replica count of `static` sized for the peak. Scale-down is immediate (no stabilisation).
4. u is the largest value (bisection, 8 steps) whose replay in the same simulator meets the SLO
   objective. u -> 0 gives N everywhere, i.e. `static` at peak, so the oracle never costs more.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaling.sim.config import SimConfig, effective_slots
from scaling.sim.policies.base import Observation
from scaling.sim.profiles import inter_token_seconds
from scaling.sim.workload import Workload


@dataclass(frozen=True)
class OraclePolicy:
    target_by_bin: np.ndarray  # replicas to hold from the start of each bin
    bin_s: float
    name: str = "clairvoyant"
    tick_s: float = 15.0

    def new_state(self) -> None:
        return None

    def decide(self, now: float, observation: Observation, state: None) -> int:
        index = min(int(now // self.bin_s), len(self.target_by_bin) - 1)
        return int(self.target_by_bin[index])


@dataclass(frozen=True)
class OracleDemand:
    """Per-bin work of the workload, computed once and reused across the bisection."""

    bin_s: float
    prefill_gpu_s: np.ndarray
    decode_seq_s: np.ndarray
    slots: int

    @classmethod
    def of(cls, workload: Workload, config: SimConfig, bin_s: float) -> OracleDemand:
        bins = workload.bins(bin_s)
        prompt, output = workload.token_sample()
        slots = effective_slots(config.profile, float(np.mean(prompt) + np.mean(output)))
        itl_full = inter_token_seconds(config.profile, slots)
        return cls(bin_s, bins.prompt_tokens / config.profile.prefill_tokens_per_s, bins.output_tokens * itl_full, slots)

    def plan(self, utilisation: float, lookahead_s: float, min_replicas: int, cap: int, tick_s: float) -> OraclePolicy:
        if utilisation <= 0:
            need = np.full(len(self.prefill_gpu_s), cap, dtype=np.int64)
        else:
            prefill_need = np.ceil(self.prefill_gpu_s / (utilisation * self.bin_s) - 1e-9)
            decode_need = np.ceil(self.decode_seq_s / (utilisation * self.bin_s * self.slots) - 1e-9)
            need = np.maximum(prefill_need, decode_need).astype(np.int64)
        window = max(1, int(np.ceil(lookahead_s / self.bin_s)))
        padded = np.concatenate([need, np.zeros(window - 1, dtype=np.int64)])
        ahead = np.lib.stride_tricks.sliding_window_view(padded, window).max(axis=1)
        target = np.clip(ahead, min_replicas, max(min_replicas, cap))
        return OraclePolicy(target, self.bin_s, tick_s=tick_s)
