"""The batch slots a Deployment's pod template states: vLLM's --max-num-seqs, read off each container's command
line as vLLM's own parser would take it (scaling/drivers/cluster.py, `stated_max_num_seqs`)."""
from __future__ import annotations

import pytest

from scaling.drivers.cluster import stated_max_num_seqs


@pytest.mark.parametrize(("lines", "slots"), [
    ([["--model", "m", "--max-num-seqs", "64"]], 64),
    ([["--model", "m", "--max-num-seqs=32"]], 32),
    ([["--max_num_seqs", "16"]], 16),  # vLLM takes the underscore spelling too
    ([["vllm", "serve", "m", "--max-num-seqs", "8"]], 8),  # command, then args
    ([["/bin/sh", "-c", "exec vllm serve 'meta/llama 8b' --max-num-seqs 128 --port 8000"]], 128),  # a shell line
    ([["--max-num-seqs", "8", "--max-num-seqs", "16"]], 16),  # the last one wins, as in vLLM's parser
    ([["envoy", "--config", "e.yaml"], ["--model", "m", "--max-num-seqs", "24"]], 24),  # a sidecar first
    ([["--max-num-seqs", "4"], ["--max-num-seqs", "48"]], 4),  # the first container that states one
    ([["sh", "-c", 'vllm serve "m --max-num-seqs 4']], 4),  # an unbalanced quote: word by word
])
def test_the_stated_value_is_read_as_vllm_would(lines: list[list[str]], slots: int) -> None:
    assert stated_max_num_seqs(lines) == slots


@pytest.mark.parametrize("lines", [
    [],  # no container
    [["--model", "m"]],  # not stated: vLLM's default depends on the GPU, so nothing is assumed
    [["--max-num-batched-tokens", "8192", "--max-num-seqs-per-step", "3"]],  # other flags
    [["--max-num-seqs", "many"]],
    [["--max-num-seqs", "0"]],
    [["--max-num-seqs", "-4"]],
    [["--max-num-seqs", "99999999999"]],  # past any batch (and past what the status table stores)
    [["--max-num-seqs=", "--port", "8000"]],
    [["--model", "m", "--max-num-seqs"]],  # no value after it
])
def test_a_line_that_states_no_usable_value_states_nothing(lines: list[list[str]]) -> None:
    assert stated_max_num_seqs(lines) is None
