"""Which of two architectures is faster, and how sure (`archsearch.latency.order`): the held-out
errors a profile keeps, the pairwise confidence they give against a brute-force count, its
shape, the shipped profiles, and the front's table, hover and report carrying it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from studies import make_study

from archsearch.cost.devices import parse_device
from archsearch.errors import UserError
from archsearch.latency import load_device
from archsearch.latency.order import Ordering, log_differences, ordering, spec_ordering
from archsearch.metrics import MetricSpec

BASE = {
    "name": "board",
    "peak_flops": {"fp32": 1e11, "fp16": 2e11, "int8": 4e11},
    "memory_bandwidth": 1e10,
    "memory_capacity": 8e9,
}


def board(held_out: dict | None, quantity: str = "decode"):
    check = {"mape": 0.2, "within_10": 0.3, "n": 6, "method": "held-out models"}
    if held_out is not None:
        check["held_out"] = held_out
    return parse_device(
        {**BASE, "validation": {quantity: check}}, source="board.yaml", default_name="board"
    )


def brute_force(groups: dict[str, list[float]], ratio: float) -> float:
    """Transplant every held-out pair of a group onto (A, B) in both orientations and count
    how often the measured times keep the predicted order (A predicted `ratio` x B)."""
    right = total = 0.0
    for errors in groups.values():
        for ea, eb in itertools.permutations(errors, 2):
            measured_a, measured_b = ratio / (1 + ea), 1.0 / (1 + eb)
            right += 1.0 if measured_a < measured_b else 0.5 if measured_a == measured_b else 0
            total += 1
    return (right + 2.0) / (total + 4.0)  # the +1 / +2 of unordered pairs, counted twice


errors = st.lists(st.floats(-0.6, 1.5, allow_nan=False), min_size=2, max_size=7)


@settings(max_examples=60, deadline=None)
@given(
    groups=st.dictionaries(st.sampled_from(["fp16", "q8", "q4"]), errors, min_size=1),
    ratio=st.floats(0.2, 0.999),
)
def test_confidence_is_the_share_of_held_out_pairs_that_keep_the_order(groups, ratio):
    # a pair whose log-error difference is |log ratio| itself predicts equal measured times in
    # one orientation, a tie the two counts settle by rounding; real errors never land on it
    assume(np.all(np.abs(log_differences(groups) - abs(math.log(ratio))) > 1e-9))
    o = Ordering((log_differences(groups),), "test")
    assert o.confidence(ratio) == pytest.approx(brute_force(groups, ratio), abs=1e-9)
    assert o.confidence(1 / ratio) == pytest.approx(o.confidence(ratio))  # either way round


@settings(max_examples=40, deadline=None)
@given(groups=st.dictionaries(st.sampled_from(["a", "b"]), errors, min_size=1))
def test_confidence_is_a_coin_toss_at_one_and_grows_with_the_ratio(groups):
    o = Ordering((log_differences(groups),), "test")
    ratios = np.array([1.0, 0.95, 0.8, 0.5, 0.2, 0.01])
    got = o.confidence(ratios)
    assert got[0] == pytest.approx(0.5)
    assert np.all(np.diff(got) >= -1e-12)
    assert got[-1] <= (o.pairs + 1) / (o.pairs + 2) + 1e-12  # never certain


def test_shared_errors_order_what_a_wide_band_cannot():
    """Every held-out model 30% too slow (errors shared): a 10% gap is ordered right as often
    as the pairs allow, though each prediction carries +-30%; spread errors do not."""
    shared = ordering(board({"fp16": [0.3] * 6}), "decode_ms", "fp16")
    spread = ordering(board({"fp16": [-0.4, 0.3, -0.2, 0.5, 0.0, 0.25]}), "decode_ms", "fp16")
    assert shared.confidence(0.9) == pytest.approx(16 / 17)  # 15 pairs, all kept
    assert 0.5 < spread.confidence(0.9) < 0.75
    assert spread.confidence(0.3) > spread.confidence(0.9)


def test_pairs_are_taken_within_a_group_only():
    """Errors of two precisions are never paired: +50% at fp16 and -50% at q4 are each
    shared within their group."""
    o = ordering(board({"fp16": [0.5, 0.5], "q4": [-0.5, -0.5]}), "decode_ms", "fp16")
    assert o.pairs == 2 and o.confidence(0.99) == pytest.approx(3 / 4)


def test_a_profile_without_held_out_errors_gives_none():
    assert ordering(board(None), "decode_ms", "fp16") is None
    assert ordering(board({"fp16": [0.1, 0.2]}, "ttft"), "decode_ms", "fp16") is None
    assert ordering(board({"fp16": [0.1, 0.2]}), "ttft_ms", "fp16") is None
    with pytest.raises(ValueError):
        ordering(board(None), "params", "fp16")


@pytest.mark.parametrize(
    "held_out,key",
    [
        ([0.1, 0.2], "validation.decode.held_out"),
        ({}, "validation.decode.held_out"),
        ({"fp16": "0.1"}, "validation.decode.held_out.fp16"),
        ({"fp16": [0.1, -1.0]}, "validation.decode.held_out.fp16.1"),
        ({"fp16": [0.1, True]}, "validation.decode.held_out.fp16.1"),
        ({"fp16": [float("nan")]}, "validation.decode.held_out.fp16.0"),
    ],
)
def test_bad_held_out_errors_name_their_key(held_out, key):
    with pytest.raises(UserError) as e:
        board(held_out)
    assert e.value.key == key and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "name", ["rpi5", "jetson_orin_nx", "apple_m3", "snapdragon_8gen3", "nvidia_a10"]
)
def test_shipped_profiles_keep_their_held_out_errors(name):
    """The published fits keep the leave-one-model-out errors their figures came from: as
    many as `n`, by precision, their mean absolute value the check's MAPE."""
    device = load_device(name)
    for quantity in ("ttft", "decode"):
        check = device.check(quantity, "fp16")
        held = [e for g in check.held_out.values() for e in g]
        assert len(held) == check.n
        assert set(check.held_out) == set(check.precisions)
        assert np.mean(np.abs(held)) == pytest.approx(check.mape, abs=6e-4)
    spec = MetricSpec.parse("decode_ms[" + name + ",context=1024,precision=fp16]")
    o = spec_ordering(spec)
    assert o is not None and o.pairs > 20
    assert 0.5 < o.confidence(0.7) < 1


def test_front_rows_hover_and_report_carry_the_pairwise_confidence(tmp_path):
    """Each front point but the slowest states the chance it is faster than the next slower
    one, beside its +-; the table, the hover text and the Markdown report show it."""
    from archsearch.analysis.front_table import front_columns, row_cell
    from archsearch.analysis.pareto import analyse, choose_axes
    from archsearch.analysis.plots import front_figure
    from archsearch.analysis.report import markdown_report
    from archsearch.study import load

    info = make_study(tmp_path / "s.db", n=16)
    data = load(info["url"])
    axes, _ = choose_axes(data, "rpi5", None, None, None)
    p = analyse(data, "rpi5", axes)
    label = next(a.label for a in p.axes if a.label.startswith("decode_ms"))
    rows = p.front_rows()
    ranked = sorted(rows, key=lambda r: r[label])
    key = f"{label}:faster_than_next"
    assert key not in ranked[-1]  # the slowest has no next
    order = spec_ordering(MetricSpec.parse(label))
    for row, slower in itertools.pairwise(ranked):
        nxt, odds = row[key]
        assert nxt == slower["trial"]
        assert odds == pytest.approx(order.confidence(row[label] / slower[label]))
        assert 0.5 <= odds < 1 and math.isfinite(odds)
    assert (key, "P(faster than next) decode_ms") in front_columns(p)
    assert row_cell(key, ranked[0]) == f"{ranked[0][key][1]:.2f} vs #{ranked[1]['trial']}"
    hover = " ".join(
        " ".join(map(str, trace.hovertext))
        for trace in front_figure(p).data
        if trace.hovertext is not None
    )
    assert f"faster than #{ranked[1]['trial']} (next on the front)" in hover
    assert "P(faster than next)" in markdown_report(p)
