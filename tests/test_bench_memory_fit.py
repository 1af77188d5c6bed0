"""`benchmarks/bench_memory_fit.py`: it compares the product's fit with the grid search that
fit replaced, on the same probes, and leaves the product's fit in place."""

from __future__ import annotations

import numpy as np
from benchmark_scripts import load

from archsearch.latency.calibrate import fit
from archsearch.latency.calibrate.plan import PLANS
from archsearch.latency.predict import Memory

bench = load("bench_memory_fit")
MIB = 2**20


def test_the_grid_form_misplaces_an_edge_the_refined_fit_recovers():
    """A cache of 22.75-35.5 MiB has its upper edge between the probe's 32 and 48 MiB and on no
    grid point: the grid form trades the edge for a stall per byte several percent low, the product's
    fit (which the benchmark compares it with) finds both."""
    assert bench.REFINED is fit.fit_memory
    true = Memory(9.33e-11, 22.75 * MIB, 35.5 * MIB)
    sizes = np.array(PLANS["full"].memory_sizes, dtype=np.float64)
    seconds = 2e-6 + 1.2e-11 * sizes + true.byte_stalls(sizes)
    grid, refined = bench.grid_only(sizes, seconds), fit.fit_memory(sizes, seconds)
    assert abs(grid.stall_s / true.stall_s - 1) > 0.03
    assert abs(refined.stall_s / true.stall_s - 1) < 1e-3
    assert abs(refined.hi / true.hi - 1) < 1e-3


def test_the_synthetic_comparison_scores_both_forms_on_the_same_probes():
    got = bench.synthetic(draws=3, noise=0.0, seed=1)
    assert set(got) == set(bench.FORMS)
    assert got["refined"]["outside_worst"] < 0.01
    assert got["refined"]["outside_worst"] <= got["grid"]["outside_worst"]
    assert all(f["ms_per_fit"] > 0 for f in got.values())
    assert fit.fit_memory is bench.REFINED
