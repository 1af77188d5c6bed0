"""The exact hypervolume against a brute-force count on a grid (integer points: every cell of the
grid is either dominated or not), in 1 to 4 dimensions, with ties, duplicates and points beyond
the reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.analysis.hypervolume import hypervolume, prefix_hypervolumes


def brute_force(points: np.ndarray, ref: np.ndarray) -> float:
    """Count the unit cells [c, c+1)^d below the reference that some point dominates."""
    count = 0
    for cell in itertools.product(*(range(int(r)) for r in ref)):
        c = np.array(cell, dtype=float)
        if len(points) and np.any(np.all(points <= c, axis=1)):
            count += 1
    return float(count)


@st.composite
def integer_sets(draw):
    d = draw(st.integers(1, 4))
    n = draw(st.integers(0, 12 if d < 4 else 6))
    rows = draw(
        st.lists(st.lists(st.integers(0, 6), min_size=d, max_size=d), min_size=n, max_size=n)
    )
    return np.array(rows, dtype=float).reshape(n, d), np.full(d, 5.0)


@settings(max_examples=200, deadline=None)
@given(integer_sets())
def test_matches_brute_force(case):
    points, ref = case
    assert hypervolume(points, ref) == brute_force(points, ref)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 3), st.integers(1, 40), st.integers(0, 2**16))
def test_order_and_dominated_points_change_nothing(d, n, seed):
    rng = np.random.default_rng(seed)
    points = rng.random((n, d))
    ref = np.full(d, 1.2)
    hv = hypervolume(points, ref)
    assert abs(hypervolume(points[rng.permutation(n)], ref) - hv) < 1e-12
    # a point dominated by one already there adds nothing; the volume never exceeds the box
    worse = points[0] + 0.01
    assert abs(hypervolume(np.vstack([points, worse]), ref) - hv) < 1e-12
    assert 0 < hv <= np.prod(ref)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4), st.integers(0, 60), st.integers(0, 2**16), st.integers(1, 60))
def test_prefix_hypervolumes_equal_recomputing_each_prefix(d, n, seed, every):
    rng = np.random.default_rng(seed)
    # coarse values: ties and duplicates; some beyond the reference; some NaN
    points = rng.integers(0, 7, size=(n, d)).astype(float)
    points[rng.random(n) < 0.1, rng.integers(0, d)] = np.nan
    ref = np.full(d, 5.0)
    at = sorted({*range(0, n, every), n - 1}) if n else []
    fresh = [hypervolume(points[: k + 1][~np.isnan(points[: k + 1]).any(axis=1)], ref) for k in at]
    assert prefix_hypervolumes(points, ref, at) == pytest.approx(fresh, abs=1e-9)
