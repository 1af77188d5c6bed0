"""Pareto fronts, hypervolume and axes: properties checked against brute force on random
points (ties, duplicates, maximised axes, missing values), and how a trial's value of any
metric on any device is found."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.analysis.front import (
    Axis,
    candidates,
    default_axes,
    for_device,
    hypervolume,
    hypervolume_history,
    non_dominated,
    reference_point,
    resolve_axis,
    value_of,
)
from archsearch.arch import load_arch
from archsearch.errors import UserError
from archsearch.latency import metric_value
from archsearch.metrics import MetricSpec, parse_label
from archsearch.study import TrialRecord


@st.composite
def point_sets(draw):
    d = draw(st.integers(2, 3))
    n = draw(st.integers(0, 25))
    # small integers: many ties and exact duplicates
    rows = draw(
        st.lists(st.lists(st.integers(0, 6), min_size=d, max_size=d), min_size=n, max_size=n)
    )
    values = np.array(rows, dtype=float).reshape(n, d)
    if n and draw(st.booleans()):
        values[draw(st.integers(0, n - 1)), draw(st.integers(0, d - 1))] = np.nan
    dirs = draw(st.lists(st.sampled_from(["minimize", "maximize"]), min_size=d, max_size=d))
    return values, [Axis(f"m{i}", dr) for i, dr in enumerate(dirs)]


def dominates(a: np.ndarray, b: np.ndarray, axes: list[Axis]) -> bool:
    """a dominates b: no worse on every axis, better on one (written out, axis by axis)."""
    better = False
    for x, y, ax in zip(a, b, axes):
        if ax.direction == "minimize":
            if x > y:
                return False
            better |= x < y
        else:
            if x < y:
                return False
            better |= x > y
    return better


@settings(max_examples=150, deadline=None)
@given(point_sets())
def test_non_dominated_matches_brute_force(case):
    values, axes = case
    mask = non_dominated(values, axes)
    finite = np.isfinite(values).all(axis=1)
    for i in range(len(values)):
        if not finite[i]:
            assert not mask[i]
            continue
        dominated = any(dominates(values[j], values[i], axes) for j in np.flatnonzero(finite))
        assert mask[i] == (not dominated)
    # ties: identical finite rows are on or off the front together
    for i in range(len(values)):
        for j in range(len(values)):
            if finite[i] and finite[j] and np.array_equal(values[i], values[j]):
                assert mask[i] == mask[j]
    # the order of the trials does not matter
    perm = np.random.default_rng(0).permutation(len(values))
    assert np.array_equal(non_dominated(values[perm], axes), mask[perm])


def hv_2d_brute(values: np.ndarray, axes: list[Axis], ref: np.ndarray) -> float:
    """Area dominated in 2-D, by summing the cells of the grid the points and ref span."""
    signs = np.array([a.sign for a in axes])
    pts = values[np.isfinite(values).all(axis=1)] * signs
    r = ref * signs
    pts = pts[(pts < r).all(axis=1)]
    xs = np.unique(np.concatenate([pts[:, 0], [r[0]]]))
    ys = np.unique(np.concatenate([pts[:, 1], [r[1]]]))
    area = 0.0
    for x0, x1 in itertools.pairwise(xs):
        for y0, y1 in itertools.pairwise(ys):
            if ((pts[:, 0] <= x0) & (pts[:, 1] <= y0)).any():
                area += (x1 - x0) * (y1 - y0)
    return area


@settings(max_examples=100, deadline=None)
@given(point_sets())
def test_hypervolume_reference_and_history(case):
    values, axes = case
    finite = values[np.isfinite(values).all(axis=1)]
    if len(finite) == 0:
        with pytest.raises(UserError):
            reference_point(values, axes)
        return
    ref = reference_point(values, axes)
    # the reference point is strictly worse than every trial on every axis
    for a, k in zip(axes, range(len(axes))):
        assert (
            (finite[:, k] < ref[k]).all()
            if a.direction == "minimize"
            else (finite[:, k] > ref[k]).all()
        )
    hv = hypervolume(values, axes, ref)
    assert hv > 0
    mask = non_dominated(values, axes)
    assert hypervolume(values[mask], axes, ref) == pytest.approx(hv)
    if len(axes) == 2:
        assert hv == pytest.approx(hv_2d_brute(values, axes, ref))
    # history: never decreases, and ends at the hypervolume of all trials
    recs = [_record(i, trained=bool(np.isfinite(v).all())) for i, v in enumerate(values)]
    objectives = [a.label for a in axes]
    for r, v in zip(recs, values):
        r.values = list(v)
    hist = hypervolume_history(recs, axes, objectives, ref)
    hvs = [h for _, h in hist]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(hvs))
    assert hvs[-1] == pytest.approx(hv)
    # each step is the hypervolume of every trained trial up to that trial number
    for number, h in hist:
        assert h == pytest.approx(hypervolume(values[: number + 1], axes, ref))


def _record(number: int, *, trained=True, status="trained", h=None, feasible=True, **attrs):
    return TrialRecord(
        number=number,
        state="COMPLETE" if trained else "PRUNED",
        status=status if trained else "stopped_early",
        reason="",
        values=None,
        attrs={"arch_hash": h or f"h{number}", **attrs},
        constraints={"params": -1.0 if feasible else 1.0},
    )


def test_candidates_keep_one_trial_per_architecture_and_only_trained_feasible_ones():
    recs = [
        _record(3, h="a"),
        _record(1, h="a"),  # the earliest trial of hash a wins
        _record(2, h="b", feasible=False),
        _record(4, h="c", trained=False),
        _record(5, h="d", status="duplicate"),
        _record(6, h="e"),
    ]
    assert [r.number for r in candidates(recs)] == [1, 6]


def test_value_of_reads_stored_numbers_then_training_results_then_the_cost_model():
    arch = load_arch("tiny_gqa")
    label = "decode_ms[rpi5,context=1024,precision=fp16]"
    r = _record(
        0,
        arch=arch.to_dict(),
        device_costs={"rpi5": {label: 123.0}},
        costs={"params": 7.0},
        probes={"recall": {"acc": 0.75}},
    )
    r.values = [2.0, 0.5]
    objectives = ["val_loss", label]
    assert value_of(r, label, objectives) == 0.5  # the objective value as trained
    assert value_of(r, label, ["val_loss"]) == 123.0  # stored device costs
    assert value_of(r, "params", objectives) == 7.0
    assert value_of(r, "probe_acc[recall]", objectives) == 0.75
    assert value_of(r, "probe_acc[compression]", objectives) is None
    assert value_of(r, "val_ppl", objectives) == pytest.approx(math.exp(2.0))
    other = for_device(label, "jetson_orin_nx")  # not stored: the cost model prices it
    spec = MetricSpec(
        "decode_ms", (("device", "jetson_orin_nx"), ("context", 1024), ("precision", "fp16"))
    )
    assert value_of(r, other, objectives) == pytest.approx(metric_value(arch, spec))
    cache = "cache_bytes[context=4096,bits=8,batch=1]"
    spec = MetricSpec("cache_bytes", (("context", 4096), ("bits", 8), ("batch", 1)))
    assert value_of(r, cache, objectives) == pytest.approx(metric_value(arch, spec))


META = {"constraints": ["cache_bytes[context=1024,bits=16,batch=1] <= 524288"]}
OBJ = ["val_loss", "decode_ms[rpi5,context=1024,precision=fp16]"]
DIRS = ["minimize", "minimize"]


@pytest.mark.parametrize(
    ("spec", "device", "label", "direction"),
    [
        ("decode_ms", "rpi5", OBJ[1], "minimize"),  # the study's own arguments
        (
            "decode_ms",
            "jetson_orin_nx",
            "decode_ms[jetson_orin_nx,context=1024,precision=fp16]",
            "minimize",
        ),
        (
            "decode_ms@context:4096@precision:q4",
            "rpi5",
            "decode_ms[rpi5,context=4096,precision=q4]",
            "minimize",
        ),
        (
            "decode_ms[context=4096]",
            "rpi5",
            "decode_ms[rpi5,context=4096,precision=fp16]",
            "minimize",
        ),
        (
            "decode_ms@apple_m3",
            "rpi5",
            "decode_ms[apple_m3,context=1024,precision=fp16]",
            "minimize",
        ),
        ("cache_bytes", "rpi5", "cache_bytes[context=1024,bits=16,batch=1]", "minimize"),
        ("cache_bytes@bits:8", "rpi5", "cache_bytes[context=1024,bits=8,batch=1]", "minimize"),
        ("active_params", "rpi5", "active_params", "minimize"),
        ("probe_acc@noisy_recall", "rpi5", "probe_acc[noisy_recall]", "maximize"),
        ("val_loss", "rpi5", "val_loss", "minimize"),
    ],
)
def test_axes_from_the_command_line(spec, device, label, direction):
    axis = resolve_axis(spec, device=device, objectives=OBJ, directions=DIRS, meta=META, key="x")
    assert axis == Axis(label, direction)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("latency", "unknown metric 'latency'"),
        ("decode_ms@ctx:4", "takes no argument 'ctx'"),
        ("decode_ms@context:-3", "context must be a positive integer"),
        ("decode_ms@precision:fp8", "unknown precision 'fp8'"),
        ("cache_bytes@bits:5", "bits must be one of"),
        ("decode_ms@nowhere", "unknown device 'nowhere'"),
        ("probe_acc@telepathy", "unknown probe task 'telepathy'"),
    ],
)
def test_bad_axes_are_one_line_errors_naming_the_key(spec, fragment):
    with pytest.raises(UserError) as err:
        resolve_axis(spec, device="rpi5", objectives=OBJ, directions=DIRS, meta=META, key="y")
    assert fragment in str(err.value) and str(err.value).startswith("y: ")


def test_default_axes_put_costs_on_x_and_training_metrics_on_y():
    axes = default_axes(OBJ, DIRS, "apple_m3")
    assert [a.label for a in axes] == [
        "decode_ms[apple_m3,context=1024,precision=fp16]",
        "val_loss",
    ]
    assert parse_label("probe_acc@recall") == ("probe_acc", {"task": "recall"})


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(0, 300), st.integers(0, 2**16), st.integers(2, 50))
def test_fast_front_matches_brute_force_on_larger_sets(d, n, seed, levels):
    """Random sets of a few hundred points, coarse (ties, duplicates) or fine, some NaN and
    infinite, some axes maximised: the fast front equals the definition checked pairwise."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, levels, size=(n, d)).astype(float)
    if n:
        values[rng.random(n) < 0.05, rng.integers(0, d)] = rng.choice([np.nan, np.inf, -np.inf])
    axes = [Axis(f"m{i}", rng.choice(["minimize", "maximize"])) for i in range(d)]
    signed = values * np.array([a.sign for a in axes])
    finite = np.isfinite(signed).all(axis=1)
    f = signed[finite]
    brute = np.zeros(n, dtype=bool)
    if len(f):
        weakly = (f[:, None, :] <= f[None, :, :]).all(axis=2)  # [j, i]: j no worse than i
        strictly = (f[:, None, :] < f[None, :, :]).any(axis=2)
        brute[finite] = ~(weakly & strictly).any(axis=0)
    assert np.array_equal(non_dominated(values, axes), brute)
