"""Errors by precision: a profile's checks each cover the precisions they were measured at
(parsed, checked, looked up), a latency at a precision no check covers carries none (+-?), and
the shipped `local` states its kernel predictor's check at fp32 and its roofline's at fp16/bf16
(calibrate's `fit_half`: timed in bf16)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.arch import load_arch
from archsearch.cli import main
from archsearch.cost.devices import describe_error, latency_error, parse_device
from archsearch.cost.model import op_seconds, prefill_phase, step_phase
from archsearch.errors import UserError
from archsearch.latency import columns, latency_errors, load_device, phase_seconds, read_profile
from archsearch.latency.calibrate.timing import DTYPES
from archsearch.latency.profile import parse_profile
from archsearch.metrics import PRECISIONS

BASE = {
    "name": "board",
    "peak_flops": {"fp32": 1e11, "fp16": 2e11, "int8": 4e11},
    "memory_bandwidth": 1e10,
    "memory_capacity": 8e9,
}


def entry(p90: float, precisions: list[str] | None = None) -> dict:
    out = {"mape": p90 / 2, "within_10": 0.5, "p90": p90, "n": 10, "method": "held out"}
    return out if precisions is None else {**out, "precisions": precisions}


def profile(validation: dict, **extra):
    return parse_device(
        {**BASE, "validation": validation, **extra}, source="board.yaml", default_name="board"
    )


# ---- the profile ------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(groups=st.lists(st.sets(st.sampled_from(PRECISIONS), min_size=1), max_size=4))
def test_each_precision_finds_the_one_check_that_covers_it(groups):
    """Checks with disjoint precisions parse, and each precision finds its own (None where none
    covers it); checks that share a precision are refused, naming the later one."""
    checks = [entry(0.1 * (i + 1), sorted(g)) for i, g in enumerate(groups)]
    shared = any(a & b for i, a in enumerate(groups) for b in groups[i + 1 :])
    if not checks:
        return
    if shared:
        with pytest.raises(UserError) as e:
            profile({"decode": checks})
        assert e.value.key.startswith("validation.decode.") and "two checks cover" in e.value.detail
        return
    dev = profile({"decode": checks, "ttft": entry(0.05)})
    for p in PRECISIONS:
        owner = [i for i, g in enumerate(groups) if p in g]
        got = dev.check("decode", p)
        want = None if not owner else 0.1 * (owner[0] + 1)
        assert (got is None and want is None) or got.error == pytest.approx(want)
        assert latency_error(dev, "decode_ms", p) == (None if want is None else got.error)
        # e2e needs both parts checked at the precision: TTFT's one check covers all
        e2e = latency_error(dev, "e2e_ms", p)
        assert e2e == (None if want is None else max(0.05, want))


def test_unstated_precisions_cover_what_the_validated_predictor_prices():
    """Unstated, a check covers every precision on a roofline profile, and fp32 only on a
    profile with a kernel predictor (which prices fp32 alone)."""
    roofline = profile({"decode": entry(0.2)})
    assert all(roofline.check("decode", p) is not None for p in PRECISIONS)
    raw = read_profile(load_device("local").path)
    raw["validation"] = {"decode": entry(0.2), "ttft": entry(0.1)}
    kernel = parse_profile(raw, source="local.yaml", default_name="local")
    assert kernel.check("decode", "fp32").error == 0.2
    assert [p for p in PRECISIONS if kernel.check("decode", p) is not None] == ["fp32"]


BAD = [
    ({"decode": []}, "validation.decode"),
    ({"decode": [entry(0.1, ["fp8"])]}, "validation.decode.0.precisions"),
    ({"decode": entry(0.1, [])}, "validation.decode.precisions"),
    ({"decode": entry(0.1, "fp16")}, "validation.decode.precisions"),
    ({"decode": entry(0.1, ["q4", "q4"])}, "validation.decode.precisions"),
    ({"decode": [entry(0.1, ["fp32"]), entry(0.2, ["fp16", "fp32"])]}, "validation.decode.1"),
    ({"decode": [entry(0.1, ["fp32"]), {"mape": 0.1}]}, "validation.decode.1"),
]


@pytest.mark.parametrize("validation,key", BAD)
def test_bad_checks_name_their_key(validation, key):
    with pytest.raises(UserError) as e:
        profile(validation)
    assert e.value.key == key and "\n" not in str(e.value)


# ---- the shipped profiles ---------------------------------------------------------------------


def test_the_shipped_local_checks_fp32_and_its_half_precision_apart():
    dev = load_device("local")
    fp32, half = dev.check("decode", "fp32"), dev.check("decode", "fp16")
    assert fp32.by_working_set is not None and fp32.n > 12
    # the roofline's half precision, timed in bf16 (torch's fast CPU half type): one check for
    # both, no bands, a method that says so
    assert half is dev.check("decode", "bf16") and half is not fp32
    assert half.by_working_set is None and f"in {DTYPES['fp16']}" in half.method
    assert dev.check("decode", "q8") is None and dev.check("ttft", "q4") is None
    c = columns(load_arch("tiny_gqa"))
    for p, want in (("fp16", half.error), ("bf16", half.error)):
        assert latency_errors(c, dev, "decode_ms", p, context=512).tolist() == [want]
    assert latency_errors(c, dev, "decode_ms", "q8", context=512) is None
    text = describe_error(dev)
    stat = f", +- the {fp32.statistic} of the held-out |error|: "
    assert f"at fp32{stat}" in text and f"at bf16/fp16{stat}" in text
    assert "q8/q4 unchecked (+-?)" in text


def test_cost_shows_a_precision_no_check_covers_as_unknown(capsys):
    assert main(["cost", "arch=tiny_gqa", "device=local", "precision=q8", "format=json"]) == 0
    rep = json.loads(capsys.readouterr().out)["reports"][0]
    assert rep["latency_error"]["decode_ms"] is None
    assert main(["cost", "arch=tiny_gqa", "device=local", "precision=fp16", "format=json"]) == 0
    rep = json.loads(capsys.readouterr().out)["reports"][0]
    want = latency_error(load_device("local"), "decode_ms", "fp16")
    assert want is not None and rep["latency_error"]["decode_ms"] == pytest.approx(want)


SPACE = """
name: margins
base: tiny_gqa
params:
  d_model: choice(64, 128)
constraints:
  - {{metric: decode_ms, max: 50, device: local, context: 512, precision: {precision}, margin: error}}
objectives:
  - {{metric: val_loss, direction: minimize}}
"""


def test_margin_error_at_an_unchecked_precision_is_one_line(tmp_path, capsys):
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.format(precision="q4"))
    assert main(["prune", f"space_file={path}"]) == 2
    err = capsys.readouterr().err.splitlines()  # progress lines, then the error's one line
    assert "Traceback" not in "\n".join(err) and err[-1].startswith("archsearch: error:")
    assert "constraints.margin" in err[-1] and "no held-out check at q4" in err[-1]
    path.write_text(SPACE.format(precision="fp16"))
    assert main(["prune", f"space_file={path}", "format=json"]) == 0


# ---- one-query attention --------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    rate=st.floats(1e-4, 1.0),
    context=st.integers(1, 8192),
    batch=st.integers(1, 8),
)
def test_a_measured_one_query_attention_rate_prices_only_the_decode_steps_sdpa(
    rate, context, batch
):
    """With `attention_step`, a decode step's `attn.sdpa` runs at that fraction of the fp16
    peak whatever the batch (or its bytes, if slower); every other op, the prefill, MLA's own
    attention and fp32 are priced as without it."""
    eff = {"compute": 0.8, "half_rows": 20.0, "bandwidth": 0.6, "op_overhead_s": 2e-6}
    plain = profile({}, efficiency={"fp32": eff, "fp16": eff})
    measured = profile({}, efficiency={"fp32": eff, "fp16": {**eff, "attention_step": rate}})
    gqa, mla = load_arch("tiny_gqa"), load_arch("minicpm3_4b")
    assert mla.attention.kind == "mla"
    step, prefill = step_phase(context, batch), prefill_phase(64, batch)
    for arch, phase, precision in (
        (gqa, prefill, "fp16"),
        (mla, step, "fp16"),
        (gqa, step, "fp32"),
    ):
        c = columns(arch)
        assert phase_seconds(c, phase, measured, precision) == phase_seconds(
            c, phase, plain, precision
        )
    c = columns(gqa)
    ops = {op.name: (op, t) for op, t in op_seconds(c, step, measured, "fp16")}
    before = {op.name: t for op, t in op_seconds(c, step, plain, "fp16")}
    sdpa, seconds = ops["attn.sdpa"]
    eff16 = measured.eff("fp16")
    count = seconds / (
        np.maximum(
            sdpa.flops / (measured.peak("fp16") * rate),
            (sdpa.acts * 2.0 + sdpa.state * 2.0) / (measured.memory_bandwidth * eff16.bandwidth),
        )
        + sdpa.launches * eff16.op_overhead_s
    )
    np.testing.assert_allclose(count, np.round(count), rtol=1e-9)  # the layer count
    assert all(
        np.array_equal(t, before[name]) for name, (_, t) in ops.items() if name != "attn.sdpa"
    )


@pytest.mark.parametrize("value", [0, -0.1, "fast", True, None])
def test_a_bad_attention_rate_names_its_key(value):
    with pytest.raises(UserError) as e:
        profile({}, efficiency={"fp16": {"attention_step": value}})
    assert e.value.key == "efficiency.fp16.attention_step" and "\n" not in str(e.value)
