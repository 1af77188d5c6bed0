"""`benchmarks/bench_half_repeats.py`: a timing recorded at the plan's repeats, read again at
fewer, gives what timing at fewer would have given."""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_scripts import load
from hypothesis import given, settings
from hypothesis import strategies as st
from test_latency_calibrate import FakeMachine, _timed_on_a_simulated_clock

from archsearch.latency.calibrate import plan, roofline
from archsearch.latency.calibrate.models import held_out_models

bench = load("bench_half_repeats")


def timed(costs: list[float], repeats: int, span: float) -> tuple[list[float], float]:
    """`seconds_per_call`'s samples of a call whose n-th call takes costs[n] seconds of a
    simulated clock, and the clock's seconds it took (every call's, the warm-up's too)."""
    cost = lambda now, calls: costs[calls % len(costs)]  # noqa: E731
    samples, calls = _timed_on_a_simulated_clock(cost, repeats, reduce=list, span=span)
    return samples, sum(cost(0.0, i) for i in range(calls))


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


SLOWER = (1.3, 1.1, 1.0, 1.2, 1.05)  # each recorded sample's time over the model's least


def recording(p, machine: FakeMachine) -> list[dict]:
    """A made-up recording of `roofline.half` at plan `p`: each model's prefill and step sampled
    SLOWER times the machine's (prefill, step) seconds, back to back."""
    long = {"prompt": roofline.LONG[0], "context": roofline.LONG[1]}
    check = [x for m in held_out_models()[: p.held_out] for x in (m, m._replace(**long))]
    log = []
    for m in roofline.references(p) + check:
        calls = [
            {"samples": [f * t for f in SLOWER], "span": 0.0, "other_s": t}
            for t in machine.time_model(m, p)
        ]
        log.append({"model": bench.named(m), "calls": calls})
    return log


def test_a_replay_reads_the_check_at_fewer_repeats_and_keeps_the_fit(monkeypatch):
    p = plan("full", held_out=2, references=3)
    machine = FakeMachine(monkeypatch)
    measured, log = machine.measure(p), recording(p, machine)
    full, spent = bench.replay(measured, p, log, 5, 5)
    fewer, spent_fewer = bench.replay(measured, p, log, 2, 5)
    assert fewer["factors"] == full["factors"]  # the references read alike
    assert np.allclose(bench.timings(fewer), 1.1 * bench.timings(full))  # least of 1.3t, 1.1t
    assert spent_fewer["references"] == pytest.approx(spent["references"])
    assert spent_fewer["check"] < spent["check"]
    refitted, _ = bench.replay(measured, p, log, 2, 2)
    assert refitted["factors"] != full["factors"]
    log[0]["model"] = "another"
    with pytest.raises(AssertionError, match="recorded another"):
        bench.replay(measured, p, log, 5, 5)
