"""`benchmarks/bench_sampler_coverage.py`: it compares the sampler's weighed counts with the
plain sum they replaced, on the same seeds, and leaves the sampler's own form in place."""

from __future__ import annotations

from benchmark_scripts import load

from archsearch.latency.calibrate import sample

bench = load("bench_sampler_coverage")


def test_a_seed_whose_summed_draws_leave_a_row_count_out_is_covered_weighed():
    """At this seed the plain sum leaves one of the `moe` kernel's eleven row counts out of its
    random half; weighed by each knob's number of values, every value is drawn."""
    assert bench.WEIGHED is sample.least_taken
    sample.least_taken = bench.summed
    try:
        summed = bench.random_half("moe", 217)
    finally:
        sample.least_taken = bench.WEIGHED
    weighed = bench.random_half("moe", 217)
    assert len(summed) == len(weighed) > 0
    assert not bench.coverage(summed, "moe")[0]
    assert bench.coverage(weighed, "moe")[0]
