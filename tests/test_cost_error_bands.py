"""Errors by working set: a profile's decode error in bands of the step's working set (parsed,
checked, looked up per prediction), calibration's pooled check (held-out models and glue models
left out) and its bands, and every place a latency is shown or bounded (`cost`, `prune`, a
sweep's pricing, the front's table, plots and report) giving each prediction its own band."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from studies import make_study

from archsearch.arch import ArchConfig, AttentionConfig
from archsearch.cli import main
from archsearch.cost.devices import latency_errors, parse_device
from archsearch.cost.model import working_set
from archsearch.cost.ops import Columns, Phase
from archsearch.errors import UserError
from archsearch.latency import columns, load_device, read_profile, spec_errors, write_profile
from archsearch.latency.calibrate import fit as calibration
from archsearch.metrics import MetricSpec
from archsearch.units import fmt_error

BASE = {
    "name": "board",
    "peak_flops": {"fp32": 1e11, "fp16": 2e11, "int8": 4e11},
    "memory_bandwidth": 1e10,
    "memory_capacity": 8e9,
}
TTFT = {"mape": 0.05, "within_10": 0.9, "n": 41, "method": "pooled"}
DECODE = {"mape": 0.12, "within_10": 0.6, "p90": 0.3, "n": 41, "method": "pooled"}


def profile(bands: dict | None = None):
    decode = DECODE if bands is None else {**DECODE, "by_working_set": bands}
    raw = {**BASE, "validation": {"ttft": TTFT, "decode": decode}}
    return parse_device(raw, source="board.yaml", default_name="board")


def banded(name: str, edges: list[float], p90: list[float]) -> str:
    """The shipped `local` profile (a kernel predictor) as the user profile `name`, its decode
    error `p90[i]` in the bands split at `edges` (bytes); returns the name."""
    raw = read_profile(load_device("local").path)
    bands = {"edges": edges, "p90": p90, "n": [5] * len(p90)}
    raw["validation"] = {"ttft": TTFT, "decode": {**DECODE, "by_working_set": bands}}
    raw["name"] = name
    write_profile(raw, Path(os.environ["ARCHSEARCH_DEVICE_DIR"]) / f"{name}.yaml")
    return name


def arch(d: int, layers: int) -> ArchConfig:
    return ArchConfig(
        vocab_size=4096,
        d_model=d,
        n_layers=layers,
        attention=AttentionConfig(n_heads=max(1, d // 64), n_kv_heads=1),
    )


def step_bytes(c: Columns, context: int) -> np.ndarray:
    return working_set(c, Phase("step", T=1, n0=context))


# ---- the profile ------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    edges=st.lists(st.floats(1e5, 1e9), max_size=4, unique=True).map(sorted),
    data=st.data(),
)
def test_each_prediction_carries_the_error_of_its_working_sets_band(edges, data):
    k = len(edges) + 1
    p90 = data.draw(st.lists(st.floats(0, 2), min_size=k, max_size=k))
    n = data.draw(st.lists(st.integers(1, 50), min_size=k, max_size=k))
    ws = np.array(data.draw(st.lists(st.floats(0, 2e9), min_size=1, max_size=20)))
    dev = profile({"edges": edges, "p90": p90, "n": n})
    expect = [p90[sum(e <= w for e in edges)] for w in ws]  # band: the edges at or below
    assert dev.check("decode", "fp32").error_at(ws).tolist() == expect
    assert latency_errors(dev, "decode_ms", "fp32", {"decode": ws}).tolist() == expect
    # TTFT has no bands: its one figure (the MAPE, no p90 given); e2e the larger part
    both = latency_errors(dev, "e2e_ms", "fp32", {"ttft": ws, "decode": ws})
    assert both.tolist() == [max(0.05, e) for e in expect]
    again = profile(dev.check("decode", "fp32").by_working_set.to_dict())
    assert again.validation["decode"] == dev.validation["decode"]
    # without bands, every prediction carries the one figure
    plain = latency_errors(profile(), "decode_ms", "fp32", {"decode": ws})
    assert plain.tolist() == [0.3] * len(ws)


BAD_BANDS = [
    ({"edges": [2e7, 1e7], "p90": [0.1, 0.2, 0.3], "n": [5, 5, 5]}, "edges"),
    ({"edges": [1e7], "p90": [0.1], "n": [5]}, ""),
    ({"edges": [1e7], "p90": [0.1, 0.2], "n": [5, 0]}, "n.1"),
    ({"edges": [1e7], "p90": [-0.1, 0.2], "n": [5, 5]}, "p90.0"),
    ({"edges": [0], "p90": [0.1, 0.2], "n": [5, 5]}, "edges.0"),
    ({"edges": [1e7], "p90": [0.1, 0.2]}, ""),
    ({"edges": "1e7", "p90": [0.1, 0.2], "n": [5, 5]}, ""),
    ({"edges": [1e7], "p90": [0.1, 0.2], "n": [5, 5], "bound": [0.2]}, ""),
    ({"edges": [1e7], "p90": [0.1, 0.2], "n": [5, 5], "bound": []}, ""),
    ({"edges": [1e7], "p90": [0.1, 0.2], "n": [5, 5], "bound": [-0.2, 0.3]}, "bound.0"),
]


@pytest.mark.parametrize("bands,key", BAD_BANDS)
def test_bad_bands_name_their_key(bands, key):
    with pytest.raises(UserError) as e:
        profile(bands)
    assert e.value.key == "validation.decode.by_working_set" + (f".{key}" if key else "")
    assert "\n" not in str(e.value)


# ---- calibration's check ----------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    ws=st.lists(st.floats(1e5, 1e9), min_size=1, max_size=60),
    seed=st.integers(0, 2**16),
)
def test_validation_bands_hold_enough_predictions_and_their_90th_percentiles(ws, seed):
    ws = np.array(ws)
    err = np.random.default_rng(seed).uniform(0, 1, len(ws))
    edges = [1e6, 1e7, 1e8]
    bands = calibration.by_working_set(ws, err, edges)
    if len(ws) < 2 * calibration.MIN_BAND:
        assert bands is None
    if bands is None:
        return
    assert set(bands["edges"]) <= set(edges) and sum(bands["n"]) == len(ws)
    assert min(bands["n"]) >= calibration.MIN_BAND
    band = np.searchsorted(bands["edges"], ws, "right")
    for k, (p90, n) in enumerate(zip(bands["p90"], bands["n"])):
        assert n == np.sum(band == k)
        assert p90 == pytest.approx(np.quantile(err[band == k], 0.9), abs=1e-4)


def test_the_check_pools_held_out_and_left_out_models_and_bands_decode_only():
    BAND_EDGES, pooled_check = calibration.BAND_EDGES, calibration.pooled_check
    rng = np.random.default_rng(0)
    cap = 32 * 2**20
    ws = np.concatenate([rng.uniform(1, 15, 10), rng.uniform(17, 60, 10), rng.uniform(70, 300, 10)])
    working = [(2**20 * w, 2**20 * w) for w in ws]
    # near the cache the decode step misses by 40%, elsewhere by 5%; TTFT by 5% everywhere
    near = (ws > 16) & (ws < 64)
    measured = [(1.0, 1.0)] * len(ws)
    predicted = [(1.05, 1.4 if edge else 1.05) for edge in near]
    v = pooled_check(measured, predicted, working, "12 held-out and 18 left out", cap)
    assert v["ttft"]["n"] == v["decode"]["n"] == 30
    assert v["decode"]["method"] == "12 held-out and 18 left out" and v["ttft"]["precisions"] == [
        "fp32"
    ]
    assert "by_working_set" not in v["ttft"]
    bands = v["decode"]["by_working_set"]
    assert bands["edges"] == [round(e * cap) for e in BAND_EDGES]
    assert bands["p90"] == [0.05, 0.4, 0.05] and bands["n"] == [10, 10, 10]
    assert bands["bound"] == [0.05, 0.4, 0.05]  # ten in a band: the largest
    assert v["decode"]["p90"] == pytest.approx(0.4)  # the one figure: wide everywhere
    assert v["decode"]["bound"] == pytest.approx(0.4) and v["ttft"]["bound"] == pytest.approx(0.05)
    assert "by_working_set" not in pooled_check(measured, predicted, working, "", 0.0)["decode"]


@settings(max_examples=80, deadline=None)
@given(err=st.lists(st.floats(0, 5), min_size=1, max_size=120))
def test_the_bound_is_an_order_statistic_at_or_above_the_90th_percentile(err):
    bound = calibration.p90_bound(np.array(err))
    assert bound in err
    if len(err) >= 22:  # an order statistic reaches 90% confidence
        assert bound >= np.quantile(err, 0.9) and bound <= max(err)
    else:
        assert bound == max(err)


def test_the_bound_holds_the_true_90th_percentile_nine_times_in_ten_where_the_estimate_does_not():
    p90_bound = calibration.p90_bound
    rng = np.random.default_rng(0)
    truth = float(np.exp(1.2815515655))  # the 90th percentile of a standard log-normal
    samples = rng.lognormal(0.0, 1.0, (4000, 52))  # a calibration's 52 held-out |errors|
    bound = np.mean([p90_bound(e) >= truth for e in samples])
    estimate = np.mean(np.quantile(samples, 0.9, axis=1) >= truth)
    assert 0.9 <= bound <= 0.97  # 0.92 in theory at n = 52 (the next order statistic: 0.83)
    assert estimate < 0.65  # the plain 90th percentile of 52: about as often below as above


def test_a_bound_when_given_is_the_error_of_the_check_and_of_each_band():
    from archsearch.cost.devices import describe_error

    bands = {"edges": [1e7], "p90": [0.1, 0.2], "n": [20, 32], "bound": [0.25, 0.3]}
    raw = {
        **BASE,
        "validation": {
            "ttft": {**TTFT, "p90": 0.08, "bound": 0.11},
            "decode": {**DECODE, "bound": 0.35, "by_working_set": bands},
        },
    }
    dev = parse_device(raw, source="board.yaml", default_name="board")
    ttft, decode = dev.check("ttft", "fp32"), dev.check("decode", "fp32")
    assert ttft.error == 0.11 and decode.error == 0.35
    assert latency_errors(dev, "decode_ms", "fp32", {"decode": np.array([1e6, 1e8])}).tolist() == [
        0.25,
        0.3,
    ]
    assert decode.by_working_set.to_dict() == bands  # written back as read
    text = describe_error(dev)
    assert "+- the upper 90%-confidence bound of the 90th percentile of the held-out" in text
    assert "ttft +-11%" in text and "below 10 MiB +-25% (n=20)" in text
    # a profile from before bounds: its 90th percentiles, said so
    old = profile({"edges": [1e7], "p90": [0.1, 0.2], "n": [20, 32]})
    assert old.check("decode", "fp32").error == 0.3
    text = describe_error(old)
    assert (
        "ttft +-5% (the mean (MAPE); MAPE 5%" in text
        and "decode +-30% (the 90th percentile;" in text
    )


def test_a_glue_models_left_out_prediction_never_sees_its_own_timing():
    from archsearch.latency.calibrate.models import glue_models

    dev = load_device("local")
    probe = dev.predictor.memory["forward"]
    models = glue_models()[-8:]  # on one sequence, 16-39 MiB: where the cache runs out
    terms = calibration.model_terms(
        models,
        dev.with_predictor(
            dataclasses.replace(dev.predictor, memory={"forward": None, "step": None})
        ),
    )
    measured = terms[0] * (1.2 + 0.05 * np.arange(len(models)))[:, None]
    base = calibration.left_out(measured, *terms, probe)
    moved = measured.copy()
    moved[3] *= 3
    again = calibration.left_out(moved, *terms, probe)
    assert np.array_equal(again[3], base[3])  # its own fit left it out
    assert any(not np.array_equal(again[j], base[j]) for j in range(len(models)) if j != 3)


def test_the_shipped_local_profile_gives_decode_bands():
    dev = load_device("local")
    decode, ttft = dev.check("decode", "fp32"), dev.check("ttft", "fp32")
    assert decode.by_working_set is not None and ttft.by_working_set is None
    bands = decode.by_working_set
    assert sum(bands.n) == decode.n and decode.n > 12  # pooled, not 12 models alone


# ---- where latencies are shown or bounded -----------------------------------------------------


def test_an_architectures_latency_error_is_its_bands_and_fp32_only():
    small, big = arch(128, 2), arch(768, 4)
    ws = step_bytes(Columns.from_archs([small, big]), 2048)
    name = banded("bands_cost", [float(ws.mean())], [0.07, 0.31])
    spec = MetricSpec.parse(f"decode_ms[{name},context=2048,precision=fp32]")
    assert spec_errors(Columns.from_archs([small, big]), spec).tolist() == [0.07, 0.31]
    # the bands are the kernel predictor's check, at fp32: a precision no check covers
    # carries no error
    fp16 = MetricSpec.parse(f"decode_ms[{name},context=2048,precision=fp16]")
    assert spec_errors(columns(big), fp16) is None


def test_cost_reports_each_architectures_own_band(tmp_path, capsys):
    small, big = arch(128, 2), arch(768, 4)
    ws = step_bytes(Columns.from_archs([small, big]), 2048)
    name = banded("bands_cost_cli", [float(ws.mean())], [0.07, 0.31])
    for a, want in ((small, 0.07), (big, 0.31)):
        path = tmp_path / f"{a.d_model}.yaml"
        path.write_text(yaml.safe_dump(a.to_dict()))
        args = ["cost", f"arch={path}", f"device={name}", "precision=fp32", "context=2048"]
        assert main([*args, "format=json"]) == 0
        rep = json.loads(capsys.readouterr().out)["reports"][0]
        assert rep["latency_error"]["decode_ms"] == want
        assert rep["latency_error"]["ttft_ms"] == 0.05
        assert main(args) == 0
        assert fmt_error(want) in capsys.readouterr().out


SPACE = """
name: bands
base: tiny_gqa
params:
  d_model: choice(128, 256, 512, 768)
  n_layers: choice(2, 4, 8)
constraints:
  - {{metric: decode_ms, max: {limit}, context: 2048, precision: fp32{margin}}}
objectives:
  - {{metric: val_loss, direction: minimize}}
"""


def test_margin_error_widens_each_candidates_bound_by_its_own_band(tmp_path):
    from archsearch.latency.prune import prune
    from archsearch.space import load_space

    def space(limit: float, margin: str = "") -> str:
        path = tmp_path / f"space{margin != ''}.yaml"
        path.write_text(SPACE.format(limit=limit, margin=margin))
        return str(path)

    plain = prune(load_space(space(1e9)), "local")
    c = Columns.from_archs([cand.arch for cand in plain.candidates])
    ws = step_bytes(c, 2048)
    name = banded("bands_prune", [float(np.median(ws))], [0.05, 0.5])
    label = next(iter(plain.values))
    values = plain.values[label]
    limit = float(np.median(values))
    res = prune(load_space(space(limit, ", margin: error")), name)
    label = next(iter(res.values))
    margins = res.margins[label]
    assert margins.tolist() == [0.05 if w < np.median(ws) else 0.5 for w in ws]
    assert np.array_equal(res.errors[label], margins)
    assert list(res.feasible) == list(res.values[label] * (1 + margins) <= limit)
    # a sweep's pricing judges a candidate the same way
    from archsearch.space import load_space as load
    from archsearch.sweep.pricing import price

    sp = load(space(limit, ", margin: error"))
    for k in (int(np.argmin(ws)), int(np.argmax(ws))):
        priced = price(sp, [name], name, plain.candidates[k].arch)
        bound = res.values[label][k] * (1 + margins[k]) - limit
        assert priced.violations[label] == pytest.approx(bound)


def test_the_front_shows_each_points_own_error(tmp_path):
    from archsearch.analysis.front_table import front_columns, row_cell
    from archsearch.analysis.pareto import analyse, choose_axes
    from archsearch.analysis.plots import error_bars, front_mpl
    from archsearch.analysis.report import markdown_report
    from archsearch.study import load

    info = make_study(tmp_path / "study.db", n=24, seed=3)
    data = load(info["url"], info["name"])
    archs = [ArchConfig.from_dict(r.attrs["arch"]) for r in data.records if r.attrs.get("arch")]
    ws = step_bytes(Columns.from_archs(archs), 1024)
    name = banded("bands_front", [float(np.median(ws))], [0.04, 0.6])
    axes, _ = choose_axes(data, name, "val_loss", "decode_ms[context=1024,precision=fp32]", None)
    p = analyse(data, name, axes)
    label = p.axes[1].label
    errors = p.axis_errors[label]
    trained = step_bytes(
        Columns.from_archs([ArchConfig.from_dict(r.attrs["arch"]) for r in p.trained]), 1024
    )
    assert errors.tolist() == [0.04 if w < np.median(ws) else 0.6 for w in trained]
    assert {0.04, 0.6} <= set(errors.tolist())
    rows = p.front_rows(100)
    assert rows
    assert {k for k, _ in front_columns(p)} >= {label}
    for row in rows:
        k = next(i for i, r in enumerate(p.trained) if r.number == row["trial"])
        assert row[f"{label}:error"] == errors[k]
        assert row_cell(label, row) == f"{row[label]:.4g} {fmt_error(errors[k])}"
    md = markdown_report(p)
    assert all(row_cell(label, row) in md for row in rows)
    rows_idx = np.flatnonzero(p.on_front)
    tv = p.values.copy()
    bars = error_bars(p, tv, rows_idx, [_View() for _ in p.axes])
    assert np.allclose(bars[1], np.abs(tv[rows_idx, 1]) * errors[rows_idx])
    fig = front_mpl(p)
    title = fig.axes[0].get_ylabel() + fig.axes[0].get_xlabel()
    assert "+-4-60% by working set" in title


class _View:
    scale = 1.0


def test_the_profiles_description_gives_its_bands():
    from archsearch.cost.devices import describe_error

    mib = 2**20
    dev = profile({"edges": [16 * mib, 64 * mib], "p90": [0.1, 0.4, 0.2], "n": [10, 15, 16]})
    assert (
        "decode +-30% (the 90th percentile; MAPE 12%, 60% within +-10%, n=41; by working set: "
        "below 16 MiB +-10% "
        "(n=10), 16-64 MiB +-40% (n=15), from 64 MiB +-20% (n=16))" in describe_error(dev)
    )
