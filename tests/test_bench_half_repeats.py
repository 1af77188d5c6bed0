"""`benchmarks/bench_half_repeats.py`: a timing recorded at the plan's repeats, read again at
fewer, gives what timing at fewer would have given."""

from __future__ import annotations

import pytest
from benchmark_scripts import load
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.latency.calibrate import timing

bench = load("bench_half_repeats")


def timed(costs: list[float], repeats: int, span: float) -> tuple[list[float], float]:
    """`seconds_per_call` (its samples) of a call whose n-th call takes costs[n] seconds of a
    simulated clock, and the clock's seconds it took."""
    clock = {"now": 0.0, "calls": 0}

    def call():
        clock["now"] += costs[clock["calls"] % len(costs)]
        clock["calls"] += 1

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timing.time, "perf_counter", lambda: clock["now"])
        samples = timing.seconds_per_call(call, repeats, 0.0, reduce=list, span=span)
    return samples, clock["now"]


@settings(max_examples=60, deadline=None)
@given(
    costs=st.lists(st.floats(1e-3, 2.0), min_size=2, max_size=40),
    span=st.sampled_from([0.0, 0.25, 0.5]),
    fewer=st.integers(1, 4),
)
def test_a_recorded_timing_read_at_fewer_repeats_is_that_timing(costs, span, fewer):
    samples, spent = timed(costs, 5, span)
    call = {"samples": samples, "span": span, "other_s": spent - sum(samples)}
    assert bench.least(call, 5) == pytest.approx((min(samples), spent))
    direct, direct_spent = timed(costs, fewer, span)
    assert bench.least(call, fewer) == pytest.approx((min(direct), direct_spent))
