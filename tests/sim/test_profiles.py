from __future__ import annotations

import pytest

from scaling.sim.profiles import PROFILES, get_profile, inter_token_seconds, prefill_seconds


def test_it_has_the_default_and_fallback_profiles():
    assert {"llama-3.1-8b-h100", "llama-3.2-1b-l4"} <= set(PROFILES)


def test_it_names_known_profiles_when_one_is_unknown():
    with pytest.raises(KeyError, match="llama-3.1-8b-h100"):
        get_profile("gpt-9")


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_it_grows_inter_token_latency_with_batch_size(name):
    profile = get_profile(name)
    assert inter_token_seconds(profile, 1) == pytest.approx(profile.itl_ms_base / 1000)
    assert inter_token_seconds(profile, 64) > inter_token_seconds(profile, 1)


def test_it_charges_prefill_by_prompt_length():
    profile = get_profile("llama-3.1-8b-h100")
    short, long = prefill_seconds(profile, 100), prefill_seconds(profile, 10_000)
    assert long - short == pytest.approx(9_900 / profile.prefill_tokens_per_s)
    assert prefill_seconds(profile, 100, batch_size=128) > short
