"""The latency benchmark's sentinels (benchmarks/bench_latency_accuracy.py): how a held-out
architecture's prediction is scaled by the machine's change since calibration."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_latency_accuracy.py"
SPEC = importlib.util.spec_from_file_location("bench_latency_accuracy", PATH)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)

RATIO = st.floats(0.5, 2.0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(RATIO, RATIO), min_size=3, max_size=3), st.permutations([1e7, 6e7, 2e8]))
def test_the_scale_is_each_sentinels_own_at_its_working_set_and_flat_beyond(ratios, prefill):
    """At a sentinel's working set the scale is its ratio (whatever order the prefill working
    sets come in); below the smallest and above the largest, the nearest sentinel's."""
    ratios = np.array(ratios)
    working = np.column_stack([prefill, [1.6e7, 6.4e7, 1.6e8]])
    for j in range(3):
        got = bench.sentinel_scale(ratios, working, (working[j, 0], working[j, 1]))
        np.testing.assert_allclose(got, ratios[j], rtol=1e-12)
    low = bench.sentinel_scale(ratios, working, (1e3, 1e3))
    high = bench.sentinel_scale(ratios, working, (1e12, 1e12))
    small, large = np.argmin(working, axis=0), np.argmax(working, axis=0)
    assert low == [ratios[small[0], 0], ratios[small[1], 1]]
    assert high == [ratios[large[0], 0], ratios[large[1], 1]]


def test_one_slow_build_of_a_sentinel_does_not_move_the_scale():
    """A sentinel timed 40% slow once, between two normal timings, is smoothed away; a change
    that lasts (the last three rows) is kept."""
    seen = np.ones((8, 3, 2))
    seen[3, 1, 1] = 1.4
    seen[5:, 2, 0] = 1.3
    got = bench.smoothed(seen)
    assert got[3, 1, 1] == 1.0
    np.testing.assert_allclose(got[6:, 2, 0], 1.3)
    assert got.shape == seen.shape
