"""`benchmarks/bench_space_build.py`: both ways it times build the same candidates, so it
compares the times of one computation."""

from __future__ import annotations

from benchmark_scripts import load

bench = load("bench_space_build")


def test_both_ways_build_the_same_candidates_in_positive_time():
    draws = bench.drawn("tiny")[:60]
    fresh_s, fresh = bench.build_all("tiny", draws, kept=False)
    kept_s, kept = bench.build_all("tiny", draws, kept=True)
    assert fresh == kept and any(arch is not None for arch, _ in kept)
    assert fresh_s > 0 and kept_s > 0
