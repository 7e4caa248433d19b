from __future__ import annotations

import numpy as np
import pytest

from scaling.sim.transforms import rate_scale, surge, surge_multiplier, time_scale, time_shift
from scaling.sim.workload import RateTrace

from .helpers import poisson_trace


@pytest.mark.parametrize("factor", [0.25, 1.0, 3.5])
def test_it_scales_the_rate_of_a_request_log(factor):
    trace = poisson_trace(rate_rps=50, duration_s=600)
    scaled = rate_scale(trace, factor, seed=3)
    assert len(scaled) == pytest.approx(factor * len(trace), rel=0.03)
    assert scaled.span_s == pytest.approx(trace.span_s, rel=0.01)
    assert np.all(np.diff(scaled.arrival_s) >= 0)


def test_it_scales_stretches_and_shifts_rate_files():
    rates = RateTrace("r", np.array([0.0, 600.0]), 600.0, np.array([10.0, 20.0]))
    assert rate_scale(rates, 0.1).expected_requests == pytest.approx(1800)
    stretched = time_scale(rates, 2.0)
    assert stretched.span_s == 2400 and stretched.expected_requests == pytest.approx(rates.expected_requests)
    assert list(time_shift(rates, 600).rate_rps) == [0.0, 10.0, 20.0]


def test_it_stretches_and_shifts_request_logs():
    trace = poisson_trace(rate_rps=10, duration_s=100)
    assert time_scale(trace, 0.5).span_s == pytest.approx(trace.span_s / 2)
    assert time_shift(trace, 30).arrival_s[0] == pytest.approx(trace.arrival_s[0] + 30)
    assert len(time_shift(trace, -50)) == pytest.approx(len(trace) / 2, rel=0.2)


def test_it_shapes_a_surge_as_ramp_hold_decay():
    multiplier = surge_multiplier(10.0, minutes=5, start_s=600)
    at = np.array([0, 600, 750, 900, 1000, 1200, 1350, 1500, 2000])
    assert list(multiplier(at)) == pytest.approx([1, 1, 5.5, 10, 10, 10, 5.5, 1, 1])


def test_it_adds_a_surge_to_a_trace():
    trace = poisson_trace(rate_rps=10, duration_s=3600)
    surged = surge(trace, 4.0, minutes=10, start_s=1200)
    in_hold = lambda t: np.count_nonzero((t.arrival_s >= 1800) & (t.arrival_s < 2400))  # noqa: E731
    assert in_hold(surged) == pytest.approx(4 * in_hold(trace), rel=0.1)
    assert np.count_nonzero(surged.arrival_s < 1200) == np.count_nonzero(trace.arrival_s < 1200)
