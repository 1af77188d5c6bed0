"""An error on every latency: profile provenance and validation (parsing, the held-out error a
prediction carries), the refit to published throughputs and its leave-one-out, `cost` and
`prune` printing the error, `margin: error` pruning on the band's far end, and the front's
table, plots and report carrying it."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from studies import make_study

from archsearch.arch import load_arch
from archsearch.cli import main
from archsearch.cost.devices import latency_error, parse_device
from archsearch.cost.fit import Throughput, fit_efficiency, leave_one_out, predict, validation
from archsearch.errors import UserError
from archsearch.latency import load_device
from archsearch.space import load_space
from archsearch.units import fmt_error

BASE = {
    "name": "board",
    "peak_flops": {"fp32": 1e11, "fp16": 2e11, "int8": 4e11},
    "memory_bandwidth": 1e10,
    "memory_capacity": 8e9,
}
GOOD = {
    "provenance": {"kind": "measured", "reason": "archsearch calibrate on the board"},
    "validation": {
        "ttft": {"mape": 0.05, "within_10": 0.9, "n": 12, "method": "held-out models"},
        "decode": {"mape": 0.08, "within_10": 0.7, "p90": 0.2, "n": 12, "method": "held out"},
    },
}


def profile(**extra):
    return parse_device({**BASE, **extra}, source="board.yaml", default_name="board")


# ---- profile fields -------------------------------------------------------------------------------


def test_provenance_and_validation_parse_and_give_the_error():
    dev = profile(**GOOD)
    assert dev.provenance.kind == "measured" and "calibrate" in dev.provenance.reason
    assert dev.validation["ttft"][0].n == 12 and dev.validation["decode"][0].p90 == 0.2
    # the error is the 90th percentile where given, else the MAPE; e2e takes the larger
    assert latency_error(dev, "ttft_ms", "fp32") == 0.05
    assert latency_error(dev, "decode_ms", "q4") == 0.2  # unstated: every precision
    assert latency_error(dev, "e2e_ms", "fp16") == 0.2
    assert latency_error(profile(), "decode_ms", "fp32") is None  # no figures: nothing known
    with pytest.raises(ValueError):
        latency_error(dev, "params", "fp32")


BAD = [
    ({"provenance": {"kind": "guessed", "reason": "x"}}, "provenance.kind"),
    ({"provenance": {"kind": "measured"}}, "provenance"),
    ({"provenance": {"kind": "measured", "reason": "two\nlines"}}, "provenance.reason"),
    ({"validation": {"prefill": GOOD["validation"]["ttft"]}}, "validation.prefill"),
    ({"validation": {"ttft": {"mape": 0.1, "n": 3, "method": "m"}}}, "validation.ttft"),
    ({"validation": {"ttft": {**GOOD["validation"]["ttft"], "bias": 1}}}, "validation.ttft.bias"),
    ({"validation": [1, 2]}, "validation"),
]


@pytest.mark.parametrize("extra,key", BAD)
def test_bad_provenance_and_validation_name_their_key(extra, key):
    with pytest.raises(UserError) as e:
        profile(**extra)
    assert e.value.key == key and "\n" not in str(e.value)


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(["mape", "within_10", "n", "p90"]),
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-5, 5),
        st.booleans(),
        st.text(max_size=3),
        st.none(),
    ),
)
def test_validation_figures_are_checked(field, value):
    entry = {**GOOD["validation"]["decode"], field: value}
    ok = {
        "mape": lambda v: _number(v) and v >= 0,
        "p90": lambda v: v is None or (_number(v) and v >= 0),
        "within_10": lambda v: _number(v) and 0 <= v <= 1,
        "n": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    }[field](value)
    if ok:
        assert profile(validation={"decode": entry}).validation["decode"][0].n > 0
    else:
        with pytest.raises(UserError) as e:
            profile(validation={"decode": entry})
        assert e.value.key == f"validation.decode.{field}"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def test_a_bad_profile_is_one_line_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "board.yaml"
    path.write_text(yaml.safe_dump({**BASE, "validation": {"ttft": {"mape": -1}}}))
    assert main(["cost", "arch=tiny_gqa", f"device={path}"]) == 2
    err = capsys.readouterr().err
    assert "validation.ttft" in err and err.count("\n") == 1


def test_the_published_profiles_say_how_they_were_obtained():
    for name in ("rpi5", "jetson_orin_nx", "nvidia_a10", "apple_m3", "snapdragon_8gen3"):
        dev = load_device(name)
        assert dev.provenance.kind == "published-fit" and "extrapolation" in dev.provenance.reason
        assert "Table 12" in dev.sources["efficiency"]
        assert set(dev.validation) == {"ttft", "decode"}
        checks = [v for vs in dev.validation.values() for v in vs]
        assert all(v.n >= 20 and v.p90 >= v.mape for v in checks)
        # checked on llama.cpp's fp16, q8 and q4 throughputs: fp32 and bf16 carry no error
        assert all(v.precisions == ("fp16", "q8", "q4") for v in checks)
        assert latency_error(dev, "decode_ms", "fp32") is None


# ---- the refit ------------------------------------------------------------------------------------


def test_leave_one_out_recovers_a_synthetic_devices_efficiencies():
    """Throughputs made by the latency model itself from known efficiencies: the fit finds
    them and every held-out model is predicted exactly."""
    device = load_device("rpi5")
    truth = {"compute": 0.23, "bandwidth": 0.61}
    eff = dataclasses.replace(device.eff("fp16"), half_rows=1.0, op_overhead_s=5e-7, **truth)
    rows = []
    for preset in ("plm_1_8b", "fox_1_6b", "index_1_9b", "glm_edge_1_5b"):
        arch = load_arch(preset)
        probe = Throughput(preset, arch, "fp16", 1.0, 1.0)
        ttft, decode = predict(device, probe, eff)
        rows.append(Throughput(preset, arch, "fp16", 512 / ttft, 1 / decode))
    fitted = fit_efficiency(device, rows, overhead_s=5e-7)
    assert fitted.compute == pytest.approx(truth["compute"], rel=1e-3)
    assert fitted.bandwidth == pytest.approx(truth["bandwidth"], rel=1e-3)
    errors = leave_one_out(device, rows, overhead_s=5e-7)
    assert [e["model"] for e in errors] == [r.model for r in rows]
    assert max(abs(e[q]) for e in errors for q in ("ttft", "decode")) < 1e-3
    figs = validation(errors, "decode", "synthetic")
    assert figs["n"] == 4 and figs["within_10"] == 1.0 and figs["mape"] < 1e-3
    # a model 30% slower than the rest is what leave-one-out reports as its error
    slow = dataclasses.replace(rows[0], generate_tok_s=rows[0].generate_tok_s / 1.3)
    errors = leave_one_out(device, [slow, *rows[1:]], overhead_s=5e-7)
    assert errors[0]["decode"] == pytest.approx(1 / 1.3 - 1, abs=0.02)


# ---- cost and prune -------------------------------------------------------------------------------


def test_cost_prints_every_latency_with_its_error(capsys, tmp_path):
    dev = load_device("rpi5")
    assert main(["cost", "arch=plm_1_8b", "device=rpi5", "precision=q4"]) == 0
    out = capsys.readouterr().out
    assert fmt_error(latency_error(dev, "ttft_ms", "q4")) in out
    assert fmt_error(latency_error(dev, "decode_ms", "q4")) in out
    assert "published-fit" in out and "90th percentile" in out
    assert main(["cost", "arch=plm_1_8b", "device=rpi5", "format=json"]) == 0
    rep = json.loads(capsys.readouterr().out)["reports"][0]
    assert rep["latency_error"]["decode_ms"] == latency_error(dev, "decode_ms", "fp16")
    # a profile with no validation figures says its latencies carry no known error
    path = tmp_path / "board.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["cost", "arch=tiny_gqa", f"device={path}"]) == 0
    out = capsys.readouterr().out
    assert "+-?" in out and "no validation figures" in out


SPACE = """
name: margins
base: plm_1_8b
params:
  n_layers: choice(8, 12, 16, 20, 24, 28, 32)
  d_model: choice(1536, 2048)
constraints:
  - {{metric: decode_ms, max: {limit}, device: rpi5, context: 2048, precision: q4{margin}}}
objectives:
  - {{metric: val_loss, direction: minimize}}
"""


def space_file(tmp_path, limit, margin=""):
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.format(limit=limit, margin=margin))
    return path


def test_margin_error_prunes_exactly_the_candidates_whose_upper_bound_exceeds_the_limit(
    tmp_path,
):
    from archsearch.latency.prune import prune

    error = latency_error(load_device("rpi5"), "decode_ms", "q4")
    plain = prune(load_space(str(space_file(tmp_path, 150))), "rpi5")
    label = next(iter(plain.values))
    values = plain.values[label]
    assert 150 / (1 + error) < values.max() and values.min() < 150  # the margin bites
    res = prune(load_space(str(space_file(tmp_path, 150, ", margin: error"))), "rpi5")
    assert np.array_equal(res.values[label], values)
    assert list(res.feasible) == list(values * (1 + error) <= 150)
    assert list(plain.feasible) == list(values <= 150)
    assert res.pruned_by[label] > plain.pruned_by[label]
    assert (res.margins[label] == error).all() and (plain.margins[label] == 0.0).all()


def test_margin_on_the_command_line_and_its_bad_values(tmp_path, capsys):
    assert main(["prune", f"space_file={space_file(tmp_path, 150, ', margin: error')}"]) == 0
    out = capsys.readouterr().out
    error = latency_error(load_device("rpi5"), "decode_ms", "q4")
    assert f"x (1 + {100 * error:.0f}%)" in out
    assert "ms +-" in out
    bad = [
        (", margin: maybe", "constraints[0].margin"),
        (", margin: 0.2", "constraints[0].margin"),
    ]
    for margin, key in bad:
        assert main(["prune", f"space_file={space_file(tmp_path, 150, margin)}"]) == 2
        err = capsys.readouterr().err
        assert key in err and err.count("\n") == 1
    params = tmp_path / "params.yaml"
    params.write_text(
        SPACE.format(limit=150, margin="").replace(
            "  - {metric: decode_ms",
            "  - {metric: params, max: 2B, margin: error}\n  - {metric: decode_ms",
        )
    )
    assert main(["prune", f"space_file={params}"]) == 2
    err = capsys.readouterr().err
    assert "predicted latencies" in err and err.count("\n") == 1


# ---- the front ------------------------------------------------------------------------------------


def test_front_table_plots_and_report_carry_the_error(tmp_path):
    from archsearch.analysis.front_table import format_cell, front_facts
    from archsearch.analysis.pareto import analyse, choose_axes
    from archsearch.analysis.plots import front_figure, front_mpl
    from archsearch.analysis.report import markdown_report
    from archsearch.study import load

    info = make_study(tmp_path / "study.db", n=10)
    data = load(info["url"], info["name"])
    axes, _ = choose_axes(data, "rpi5", None, None, None)
    p = analyse(data, "rpi5", axes)
    latency = next(a.label for a in p.axes if a.label.startswith("decode_ms"))
    band = fmt_error(latency_error(load_device("rpi5"), "decode_ms", "fp16"))
    assert format_cell(latency, 12.3) == f"12.3 {band}"
    assert format_cell("val_loss", 1.5) == "1.5"
    facts = dict(front_facts(p))
    assert "published-fit" in facts["latency error"]
    md = markdown_report(p)
    assert band in md and "latency error" in md
    fig = front_mpl(p)
    assert fig.axes[0].containers, "the front's points have error bars"
    assert band in fig.axes[0].get_xlabel() + fig.axes[0].get_ylabel()
    front = next(t for t in front_figure(p).data if t.name == "Pareto front")
    bars = front.error_x if latency == p.axes[0].label else front.error_y
    assert bars.array is not None and len(bars.array) == int(p.on_front.sum())
