"""Plots a reader does not have to decode: units on every axis, a log scale where sizes and times
span decades (and not otherwise), legends naming only what is drawn and what the markers mean.
Checked on the matplotlib Figure objects the PNG writers save."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.analysis.front import axis_title, log_axis
from archsearch.analysis.pareto import analyse, choose_axes
from archsearch.analysis.plots import front_mpl, hypervolume_mpl
from archsearch.study import load
from archsearch.units import DECADES, scale_for, spans_decades

FIXTURE = Path(__file__).parent / "fixtures" / "study_v1.db"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = tmp_path_factory.mktemp("plots") / "study.db"
    shutil.copy(FIXTURE, path)
    return load(str(path))


def pareto(data, x=None, y=None, z=None):
    axes, default = choose_axes(data, "rpi5", x, y, z)
    return analyse(data, "rpi5", axes, is_default=default)


def legend_texts(fig) -> list[str]:
    (legend,) = fig.legends
    return [t.get_text() for t in legend.get_texts()]


def families_drawn(p, with_band: bool) -> set[str]:
    """Families of the fully trained trials and of the other trials the 2-D plot can place
    (every axis known, or only one unknown: it sits in the 'not trained' band)."""
    known = np.isfinite(p.other_values).sum(axis=1)
    need = len(p.axes) - 1 if with_band else len(p.axes)
    others = [r for r, k in zip(p.others, known) if k >= need]
    return {str(r.attrs.get("family")) for r in p.trained + others}


def test_the_default_front_has_units_linear_axes_and_a_legend_of_what_is_drawn(study):
    p = pareto(study)
    fig = front_mpl(p)
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("linear", "linear")  # 0.13-0.43 ms, ~2.1 nats
    assert "(ms;" in ax.get_xlabel() and ax.get_ylabel() == "val_loss (nats/token)"
    texts = legend_texts(fig)
    assert texts[0] == "on the Pareto front (outlined, dashed staircase)"
    assert "fully trained, dominated" in texts
    assert "not trained (no loss): the grey band" in texts  # stopped and failed trials lack a loss
    shown = {t.removeprefix("family ") for t in texts if t.startswith("family ")}
    assert shown == families_drawn(p, with_band=True)
    kinds = {p.group_of_other(r) for r in p.others}
    for group, text in (("infeasible", "infeasible"), ("stopped_early", "stopped early")):
        assert (group in kinds) == any(t.startswith(text) for t in texts)
    band = [t for t in ax.texts if t.get_text() == "not trained"]
    assert len(band) == 1 and band[0].get_fontsize() >= 9


def test_a_byte_axis_spanning_decades_is_logarithmic_in_the_unit_it_reaches(study):
    p = pareto(study, x="cache_bytes", y="params")  # caches of 1 KiB to 512 KiB, 0.13-1 M params
    fig = front_mpl(p)
    for ax in fig.axes[:2]:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
        assert ax.get_xlabel().startswith("cache_bytes (KiB;") and ax.get_ylabel() == "params (M)"
    texts = legend_texts(fig)
    assert not any(t.startswith("not trained") for t in texts)  # every trial has both costs
    shown = {t.removeprefix("family ") for t in texts if t.startswith("family ")}
    assert shown == families_drawn(p, with_band=False)


def test_three_axes_name_the_front_without_a_staircase(study):
    p = pareto(study, x="cache_bytes", y="val_loss", z="params")
    fig = front_mpl(p)
    texts = legend_texts(fig)
    assert texts[0] == "on the Pareto front (outlined)"
    assert [a.get_xscale() for a in fig.axes] == ["log", "log", "linear"]  # cache, cache, loss
    assert fig.axes[2].get_xlabel() == "val_loss (nats/token)"


def test_the_hypervolume_plot_states_its_units(study):
    fig = hypervolume_mpl(pareto(study))
    ax = fig.axes[0]
    assert ax.get_ylabel() == "hypervolume (ms × nats/token)"
    assert "ms, " in ax.get_title() and "nats/token)" in ax.get_title()


def test_length_curves_are_logarithmic_only_where_they_span_decades():
    from types import SimpleNamespace

    from archsearch.arch import load_arch
    from archsearch.cli.cost_cmd import length_figure
    from archsearch.latency import load_device
    from archsearch.latency.breakdown import length_curves

    device = load_device("rpi5")
    cfg = SimpleNamespace(prompt=512, precision="fp16", batch=1)
    lengths = [256, 1024, 4096]

    def figure(names):
        archs = [load_arch(n) for n in names]
        curves = [
            length_curves(a, device, lengths, precision="fp16", prompt=512, batch=1) for a in archs
        ]
        return length_figure(curves, names, device, cfg)

    mixed = figure(["tiny_gqa", "plm_1_8b"])  # caches of 0.25 MiB to 144 MiB
    assert [a.get_yscale() for a in mixed.axes] == ["log", "log", "log"]
    assert mixed.axes[0].get_ylabel() == "KV cache / recurrent state (MiB)"
    alone = figure(["plm_1_8b"])  # one model over 16x the length: 1.2 decades of cache
    assert alone.axes[0].get_yscale() == "linear"
    assert [t.get_text() for t in mixed.axes[0].get_legend().get_texts()] == [
        "tiny_gqa",
        "plm_1_8b",
    ]


@settings(max_examples=200, deadline=None)
@given(
    low=st.floats(1e-3, 1e12),
    decades=st.floats(0.0, 8.0),
    n=st.integers(2, 30),
    label=st.sampled_from(["cache_bytes", "params", "prefill_flops", "decode_ms[rpi5]"]),
)
def test_log_scale_exactly_when_sizes_and_times_span_more_than_the_threshold(
    low, decades, n, label
):
    values = low * np.logspace(0, decades, n)
    span = np.log10(values.max() / values.min())
    if abs(span - DECADES) < 1e-9:
        return  # the boundary itself is a matter of rounding
    assert log_axis(label, values) == (span > DECADES)
    assert not log_axis("val_loss", values)  # losses keep a linear axis
    assert not spans_decades(np.append(values, 0.0))  # a zero has no place on a log axis
    scale, unit = scale_for("bytes", values)
    shown = (np.sqrt(values.max() * values.min()) if span > DECADES else values.max()) / scale
    assert 1 <= shown < 1024 or (unit == "B" and shown < 1) or (unit == "TiB" and shown >= 1)
    assert f"({unit}" in axis_title("cache_bytes", values)
