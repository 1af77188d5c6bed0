"""Seed noise and cheap signals (issue 12, items 1 and 5): the noise-aware dominance test on
constructed points (against its definition, and monotone in the seeds), the pooled seed std
against a hand computation, a stand-in study with replicates read back into a front with
error bars and ties (table, plots, report, front.json, dashboard), and the rank correlations
of cheap signals with the sandbox loss."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.analysis.front import Axis
from archsearch.analysis.noise import (
    NOT_MEASURED,
    Outcome,
    Pooled,
    SeedNoise,
    compare,
    noise_aware_front,
    pooled_std,
    t_quantile,
)
from archsearch.analysis.pareto import analyse, choose_axes
from archsearch.study import Status, StudyMeta, StudyWriter, load, open_storage
from tests.studies import make_study

LOSS, ACC, PARAMS = "val_loss", "probe_acc[recall]", "params"


# ---- the test on constructed points ---------------------------------------------------------


def test_the_pooled_std_is_the_hand_computation():
    # groups: [1, 2, 3] (mean 2, squared deviations 1 + 0 + 1), [4, 6] (mean 5, 1 + 1), [5] alone
    pooled = pooled_std([[1.0, 2.0, 3.0], [4.0, 6.0], [5.0], [7.0, float("nan")]])
    assert pooled.dof == (3 - 1) + (2 - 1)
    assert pooled.architectures == 2
    assert pooled.std == pytest.approx(math.sqrt((2.0 + 2.0) / 3))
    assert pooled.t == pytest.approx(2.353363, abs=1e-6)  # t_0.95 at 3 dof, from tables
    assert not pooled_std([[1.0], [2.0]]).measured  # no group of two seeds: not measured


def test_a_difference_below_the_threshold_is_a_tie_and_above_it_dominance():
    axes = [Axis(PARAMS), Axis(LOSS)]
    pooled = Pooled(0.1, 10, 4)
    threshold = t_quantile(10) * 0.1 * math.sqrt(1 / 3 + 1 / 1)
    assert pooled.threshold(3, 1) == pytest.approx(threshold)
    b = [2.0, 3.0]
    noise = [None, pooled]
    near, far = [1.0, 3.0 - 0.99 * threshold], [1.0, 3.0 - 1.01 * threshold]
    assert compare(near, b, [1, 3], [1, 1], axes, noise) == Outcome.TIED
    assert compare(far, b, [1, 3], [1, 1], axes, noise) == Outcome.DOMINATES
    assert compare(near, b, [1, 3], [1, 1], axes, [None, None]) == Outcome.DOMINATES  # exact
    assert compare(b, near, [1, 1], [1, 3], axes, noise) == Outcome.NEITHER
    # a maximised training axis: the better point has the larger accuracy
    acc_axes = [Axis(PARAMS), Axis(ACC, "maximize")]
    assert compare([1.0, 0.9], [2.0, 0.5], [1, 2], [1, 2], acc_axes, noise) == Outcome.DOMINATES
    assert compare([1.0, 0.55], [2.0, 0.5], [1, 2], [1, 2], acc_axes, noise) == Outcome.TIED


@st.composite
def pairs(draw):
    """Two points on 2-3 axes (a cost axis and one or two training axes, either direction),
    their seeds, the noise per training axis, and more seeds and dof for both."""
    d = draw(st.integers(2, 3))
    directions = st.sampled_from(["minimize", "maximize"])
    axes = [Axis(PARAMS), *[Axis(label, draw(directions)) for label in (LOSS, ACC)][: d - 1]]
    ints = st.lists(st.integers(0, 4), min_size=d, max_size=d)
    a = [float(x) / 4 for x in draw(ints)]
    b = [float(x) / 4 for x in draw(ints)]
    seeds = st.lists(st.integers(1, 5), min_size=d, max_size=d)
    n_a, n_b, more_a, more_b = draw(seeds), draw(seeds), draw(seeds), draw(seeds)
    noise = [None] + [
        Pooled(draw(st.floats(0.01, 1.0)), draw(st.integers(1, 20)), 2) for _ in range(d - 1)
    ]
    extra_dof = draw(st.integers(0, 20))
    return axes, a, b, n_a, n_b, more_a, more_b, noise, extra_dof


@settings(max_examples=200, deadline=None)
@given(pairs())
def test_more_seeds_only_turn_ties_into_dominance(case):
    axes, a, b, n_a, n_b, more_a, more_b, noise, extra_dof = case
    before = compare(a, b, n_a, n_b, axes, noise)
    # replicates that shrink the standard error: more seeds for both, more degrees of freedom
    sharper = [None if p is None else Pooled(p.std, p.dof + extra_dof, 2) for p in noise]
    n_a2 = [x + y for x, y in zip(n_a, more_a)]
    n_b2 = [x + y for x, y in zip(n_b, more_b)]
    after = compare(a, b, n_a2, n_b2, axes, sharper)
    allowed = {
        Outcome.NEITHER: {Outcome.NEITHER},  # dominance by means does not depend on the seeds
        Outcome.TIED: {Outcome.TIED, Outcome.DOMINATES},
        Outcome.DOMINATES: {Outcome.DOMINATES},
    }
    assert after in allowed[before]
    assert compare(a, b, n_a, n_b, axes, [None] * len(axes)) == (
        Outcome.NEITHER if before == Outcome.NEITHER else Outcome.DOMINATES
    )


@st.composite
def fronts(draw):
    n = draw(st.integers(1, 14))
    rows = draw(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 8)), min_size=n, max_size=n))
    values = np.array([[float(p), 2.0 + loss / 20] for p, loss in rows])
    counts = np.array(draw(st.lists(st.integers(1, 4), min_size=n, max_size=n)))[:, None]
    pooled = Pooled(draw(st.floats(0.005, 0.2)), draw(st.integers(0, 12)), 3)
    return values, counts, pooled


@settings(max_examples=150, deadline=None)
@given(fronts())
def test_the_noise_aware_front_is_every_point_nothing_dominates_significantly(case):
    values, counts, pooled = case
    axes = [Axis(PARAMS), Axis(LOSS)]
    noise = SeedNoise([LOSS], counts, values[:, 1:], {LOSS: pooled}, replicates=1)
    mask, ties = noise_aware_front(values, axes, noise)
    per_axis = [None, pooled if pooled.measured else None]
    seeds = np.hstack([np.ones_like(counts), counts])
    for b in range(len(values)):
        outcomes = [
            compare(values[a], values[b], seeds[a], seeds[b], axes, per_axis)
            for a in range(len(values))
        ]
        assert mask[b] == (Outcome.DOMINATES not in outcomes)
        tied_with = [a for a, o in enumerate(outcomes) if o == Outcome.TIED]
        assert ties.get(b, []) == (tied_with if mask[b] else [])
    if not pooled.measured:  # dof 0: plain dominance, no ties
        assert not ties


# ---- a stand-in study with replicates ---------------------------------------------------------

# five architectures by increasing parameter count: their sandbox loss, and replicate seeds
LOSSES = [3.0, 2.8, 2.6, 2.61, 2.9]
REPLICATES = {0: [3.01, 2.99], 2: [2.61, 2.59], 3: [2.62, 2.60]}  # sample std 0.01 each
EARLY = [4.0, 3.7, 3.5, 3.55, 3.9]  # loss at 25% of the budget: the same order as LOSSES
PROBE = [0.2, 0.9, 0.4, 0.1, 0.6]  # probe accuracy: no relation


def replicated_study(path: Path) -> dict:
    """Five trained architectures of the `tiny` space (objectives val_loss and params), the
    first, third and fourth trained with two more seeds (`Status.REPLICATE`), each written
    through `StudyWriter.add_finished`."""
    import optuna

    from archsearch.cost.devices import device_names
    from archsearch.space import load_space, sample
    from archsearch.sweep.pricing import price

    space = load_space("tiny")
    devices = ["rpi5"]
    assert "rpi5" in device_names()
    priced = [price(space, devices, "rpi5", c.arch) for c in sample(space, 12, 0).candidates]
    by_params = {p.costs["params"]: p for p in priced}  # distinct parameter counts
    chosen = [by_params[k] for k in sorted(by_params)[:5]]
    url = f"sqlite:///{path.resolve()}"
    meta = StudyMeta(
        objectives=[LOSS, PARAMS],
        directions=["minimize", "minimize"],
        space="stand_in",
        device="rpi5",
        train={"seed": 0},
        devices=devices,
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    writer, _ = StudyWriter.create_or_open(open_storage(url), "noise", meta)
    for k, p in enumerate(chosen):
        curve = {
            "evals": [
                {"fraction": 0.25, "step": 1, "val_loss": EARLY[k]},
                {"fraction": 0.5, "step": 2, "val_loss": LOSSES[k] + 0.3},
                {"fraction": 1.0, "step": 4, "val_loss": LOSSES[k]},
            ],
            "train": [],
        }
        attrs = {**p.attrs(), "curve": curve, "probes": {"recall": {"acc": PROBE[k]}}}
        writer.add_finished(Status.TRAINED, "", attrs, [LOSSES[k], p.costs["params"]])
    for k, seeds in REPLICATES.items():
        for seed, loss in enumerate(seeds, start=1):
            attrs = {**chosen[k].attrs(), "replicate_of": k, "seed": seed}
            attrs["metrics"] = {LOSS: loss}
            writer.add_finished(Status.REPLICATE, "", attrs, [loss, chosen[k].costs["params"]])
    return {"url": url, "params": [p.costs["params"] for p in chosen]}


@pytest.fixture(scope="module")
def replicated(tmp_path_factory):
    info = replicated_study(tmp_path_factory.mktemp("noise") / "study.db")
    data = load(info["url"])
    axes, default = choose_axes(data, "rpi5", None, None, None)
    return info, analyse(data, "rpi5", axes, is_default=default)


def test_replicates_become_means_error_bars_and_ties_on_the_front(replicated):
    _, p = replicated
    assert [a.label for a in p.axes] == [PARAMS, LOSS]
    assert [r.number for r in p.trained] == [0, 1, 2, 3, 4]  # replicates are never points
    assert not p.others and p.status_counts() == {"replicate": 6, "trained": 5}
    pooled = p.noise.noisy(LOSS)
    assert pooled is not None and pooled.dof == 6 and pooled.architectures == 3
    assert pooled.std == pytest.approx(0.01)
    assert p.noise.seeds(LOSS).tolist() == [3, 1, 3, 3, 1]
    assert p.values[:, 1] == pytest.approx([3.0, 2.8, 2.6, 2.61, 2.9])  # the means
    # #3 is worse than #2 by 0.01 (< t * 0.01 * sqrt(2/3) = 0.016): tied, stays on the front;
    # #4 is worse than #1 by 0.1 (> t * 0.01 * sqrt(2) = 0.027): dominated
    assert p.on_front.tolist() == [True, True, True, True, False]
    assert p.ties == {3: [2]}
    assert p.strict_front.tolist() == [True, True, True, False, False]
    row = {r["trial"]: r for r in p.front_rows()}[3]
    assert row["val_loss:seeds"] == 3 and row["tied_with"] == [2]
    assert row["val_loss:std_error"] == pytest.approx(0.01 / math.sqrt(3))
    summary = p.summary()["seed_noise"]
    assert summary["measured"] and summary["replicates"] == 6
    assert summary["pooled"][LOSS]["dof"] == 6
    # exact axes only: the replicates are read, but there is no noise to allow for
    axes, _ = choose_axes(p.study, "rpi5", "params", "cache_bytes", None)
    costs = analyse(p.study, "rpi5", axes, is_default=False)
    assert not costs.noise.measured and not costs.ties
    assert costs.noise.describe().startswith("6 replicate trials, but no seed noise")


def test_the_table_plots_report_and_dashboard_show_the_noise(replicated, tmp_path):
    from archsearch.analysis.dashboard import front_payload
    from archsearch.analysis.front_table import format_cell, front_columns, front_facts
    from archsearch.analysis.plots import TIED_TEXT, front_figure, front_mpl
    from archsearch.analysis.report import markdown_report, write_outputs

    info, p = replicated
    cols = dict(front_columns(p))
    assert cols["val_loss:std_error"] == "val_loss +- s.e." and cols["tied_with"] == "tied with"
    row = {r["trial"]: r for r in p.front_rows()}[3]
    assert format_cell("tied_with", row["tied_with"]) == "#2"
    assert format_cell("val_loss:std_error", row["val_loss:std_error"]) == "+-0.0058"
    assert "6 dof" in dict(front_facts(p))["seed noise"]
    # matplotlib: seed error bars of 1 standard error on the front's points, the tie ringed
    fig = front_mpl(p)
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert TIED_TEXT in texts
    assert "val_loss bars: +-1 std error, sigma/sqrt(n seeds) (sigma 0.01)" in texts
    bars = fig.axes[0].containers[0]
    (segments,) = [c.get_segments() for c in bars.lines[2]]
    half = sorted((s[1][1] - s[0][1]) / 2 for s in segments)
    se = 0.01 / math.sqrt(3)
    assert half == pytest.approx(sorted([se, 0.01, se, se]))  # n = 3, 1, 3 and the tied #3
    # plotly: the front's staircase and the tied point, both with error bars
    traces = {t.name: t for t in front_figure(p).data}
    front = traces["Pareto front"]
    assert list(front.meta["trials"]) == [0, 1, 2]
    assert list(front.error_y.array) == pytest.approx([se, 0.01, se])
    assert list(traces[TIED_TEXT].meta["trials"]) == [3]
    md = markdown_report(p)
    assert "## Seed noise" in md and "#3 tied with #2" in md and "6 degrees of freedom" in md
    assert "one-sided two-sample Student t test" in md
    files = write_outputs(p, tmp_path / "out")
    stored = json.loads(files["json"].read_text())
    assert stored["seed_noise"]["pooled"][LOSS]["std"] == pytest.approx(0.01)
    assert {r["trial"]: r["tied_with"] for r in stored["front"]}[3] == [2]
    payload = json.loads(front_payload(info["url"], "noise", None, {}))
    assert payload["info"]["noise"] == p.noise.describe()
    assert "pooled seed std val_loss: sigma 0.01 (6 dof, 3 architectures)" in p.noise.describe()


def test_a_study_without_replicates_says_its_noise_was_not_measured(tmp_path):
    from archsearch.analysis.front_table import front_columns, front_facts
    from archsearch.analysis.report import markdown_report

    info = make_study(tmp_path / "study.db", n=10)
    data = load(info["url"], info["name"])
    axes, _ = choose_axes(data, "rpi5", None, None, None)
    p = analyse(data, "rpi5", axes)
    assert not p.noise.measured and p.noise.replicates == 0 and not p.ties
    assert dict(front_facts(p))["seed noise"].startswith(NOT_MEASURED)
    seed_keys = (":std_error", ":seeds")
    assert [k for k, _ in front_columns(p) if k.endswith(seed_keys) or k == "tied_with"] == []
    assert all("tied_with" not in row for row in p.front_rows())
    assert "## Seed noise" not in markdown_report(p)
    assert p.summary()["seed_noise"]["note"] == NOT_MEASURED


# ---- cheap signals --------------------------------------------------------------------------


def kendall_by_hand(x: list[float], y: list[float]) -> float:
    """Kendall's tau of two rankings without ties: (concordant - discordant) / pairs."""
    signs = [
        np.sign(x[j] - x[i]) * np.sign(y[j] - y[i])
        for i, j in itertools.combinations(range(len(x)), 2)
    ]
    return float(sum(signs) / len(signs))


def test_the_report_ranks_the_cheap_signals_against_the_sandbox_loss(replicated, tmp_path):
    from archsearch.analysis.report import markdown_report, write_outputs

    info, p = replicated
    got = {c.signal: c for c in p.proxies.rows}
    early = got["val_loss at <=25% of the budget"]  # read from the curves, which load skips
    assert (early.n, early.kendall, early.spearman) == (5, pytest.approx(1.0), pytest.approx(1.0))
    params = got[PARAMS]
    assert params.kendall == pytest.approx(kendall_by_hand(info["params"], LOSSES))  # -0.2
    assert abs(params.kendall) < 1
    assert got[ACC].kendall == pytest.approx(kendall_by_hand(PROBE, LOSSES))
    assert p.proxies.best(LOSS).signal == early.signal
    assert p.proxies.rows[0] is early  # best first
    md = markdown_report(p)
    assert "## Cheap signals against the sandbox loss" in md
    assert "| val_loss | val_loss at <=25% of the budget | 5 | +1.00 | +1.00 |" in md
    stored = json.loads(write_outputs(p, tmp_path / "out")["json"].read_text())
    table = {c["signal"]: c for c in stored["proxies"]["correlations"]}
    assert table[PARAMS]["kendall"] == pytest.approx(params.kendall)
