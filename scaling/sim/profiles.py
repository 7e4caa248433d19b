"""Named vLLM pool profiles: what one replica of a served model can do, and what it costs.

Numbers and their sources are in docs/simulator.md ("Pool profiles"). Anything not read off a
published benchmark is an estimate and says so there. The sandbox's vLLM emulator and the
simulator share this latency model, so keep `prefill_seconds` and `inter_token_seconds` pure.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PoolProfile:
    name: str
    model: str  # served model name, as vLLM's --served-model-name would report it
    gpu_type: str
    gpus_per_replica: int
    max_num_seqs: int  # continuous-batching slots (vLLM --max-num-seqs)
    prefill_tokens_per_s: float  # prompt tokens one replica processes per second
    itl_ms_base: float  # inter-token latency with one running sequence
    itl_ms_per_seq: float  # added inter-token latency per concurrent sequence
    cold_start_p50_s: float  # pod requested -> model loaded and Ready
    cold_start_p95_s: float
    gpu_hour_usd: float  # price of one GPU for one hour
    kv_cache_tokens: int  # KV-cache capacity of one replica, in tokens

    @property
    def replica_hour_usd(self) -> float:
        return self.gpu_hour_usd * self.gpus_per_replica


PROFILES: dict[str, PoolProfile] = {
    profile.name: profile
    for profile in (
        PoolProfile(
            name="llama-3.1-8b-h100",
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_type="H100-80GB-SXM",
            gpus_per_replica=1,
            max_num_seqs=256,
            prefill_tokens_per_s=15_000.0,
            itl_ms_base=7.0,
            itl_ms_per_seq=0.12,
            cold_start_p50_s=60.0,
            cold_start_p95_s=90.0,
            gpu_hour_usd=3.00,
            kv_cache_tokens=450_000,
        ),
        PoolProfile(
            name="llama-3.2-1b-l4",
            model="meta-llama/Llama-3.2-1B-Instruct",
            gpu_type="L4-24GB",
            gpus_per_replica=1,
            max_num_seqs=256,
            prefill_tokens_per_s=12_000.0,
            itl_ms_base=9.0,
            itl_ms_per_seq=0.08,
            cold_start_p50_s=30.0,
            cold_start_p95_s=45.0,
            gpu_hour_usd=0.80,
            kv_cache_tokens=500_000,
        ),
    )
}

DEFAULT_PROFILE = "llama-3.1-8b-h100"
# vLLM's --scheduling-policy values the replay and the sandbox model: arrival order, or priority first.
SCHEDULING_POLICIES = ("fcfs", "priority")


def get_profile(name: str) -> PoolProfile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise KeyError(f"unknown pool profile {name!r}; known profiles: {known}") from None


def inter_token_seconds(profile: PoolProfile, batch_size: int) -> float:
    """Time between two output tokens of one sequence while `batch_size` sequences decode together."""
    running = max(1, batch_size)
    return (profile.itl_ms_base + profile.itl_ms_per_seq * (running - 1)) / 1000.0


def prefill_seconds(profile: PoolProfile, prompt_tokens: int, batch_size: int = 1) -> float:
    """Time from a request's admission to its first token, with no queue in front of it.

    The prompt is processed at the replica's prefill throughput, then one decode step shared
    with the `batch_size` running sequences emits the first token.
    """
    return max(0, prompt_tokens) / profile.prefill_tokens_per_s + inter_token_seconds(profile, batch_size)
