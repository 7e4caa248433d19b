"""Request mode and fluid mode tell the same story on the shared Azure traces."""
from __future__ import annotations

import pytest

from scaling.sim.config import SimConfig
from scaling.sim.loaders import load_trace
from scaling.sim.runner import simulate

TRACES = ["AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv"]


@pytest.mark.parametrize("trace_name", TRACES)
@pytest.mark.parametrize(("policy", "replicas"), [("static", None), ("static", 2), ("hpa-util", None), ("oracle", None)])
def test_it_agrees_within_2_points_of_slo_and_5_percent_of_gpu_hours(traces_dir, trace_name, policy, replicas):
    workload = load_trace(traces_dir / trace_name)
    by_request = simulate(workload, SimConfig(), policy, "request", static_replicas=replicas)
    by_fluid = simulate(workload, SimConfig(), policy, "fluid", static_replicas=replicas)
    assert by_fluid.slo_attainment == pytest.approx(by_request.slo_attainment, abs=0.02)
    assert by_fluid.gpu_hours == pytest.approx(by_request.gpu_hours, rel=0.05)
    assert by_fluid.requests == by_request.requests
