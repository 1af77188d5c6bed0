"""Learning-curve extrapolation (archsearch.trainers.extrapolate): the annealing law fitted to
synthetic curves with known parameters is recovered, and predicts other budgets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from archsearch.trainers.config import TrainConfig
from archsearch.trainers.extrapolate import (
    CurveShape,
    Run,
    fit_shape,
    planned_steps,
    predict_final,
    predict_loss,
)

RECIPE = {"batch_size": 16, "seq_len": 128, "lr": 3e-3, "eval_at": [0.25, 0.5, 0.75, 1.0]}
PER_STEP = 16 * 128


def areas(budget_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """S1, S2 written out from the paper's definitions, independently of the module."""
    cfg = TrainConfig.from_dict({**RECIPE, "budget": f"tokens:{budget_tokens}"})
    total = budget_tokens // PER_STEP
    eta = [cfg.lr_schedule(k / total) / cfg.lr for k in range(1, total + 1)]
    s1, s2, m, prev = [], [], 0.0, 0.0
    for k, e in enumerate(eta):
        m = 0.999 * m + (max(prev - e, 0.0) if k else 0.0)
        s1.append((s1[-1] if s1 else 0.0) + e)
        s2.append((s2[-1] if s2 else 0.0) + m)
        prev = e
    return np.array(s1), np.array(s2)


def law_curve(budget_tokens: int, floor, alpha, anneal, amp, fractions=(0.25, 0.5, 0.75, 1.0)):
    """Eval points of a run that follows the law exactly (`floor`: this model's floor)."""
    s1, s2 = areas(budget_tokens)
    total = budget_tokens // PER_STEP
    evals = []
    for f in fractions:
        step = int(np.ceil(f * total))
        loss = floor + amp * s1[step - 1] ** -alpha - anneal * s2[step - 1]
        evals.append({"fraction": f, "step": step, "tokens": step * PER_STEP, "val_loss": loss})
    return evals


def train_of(tokens: int) -> dict:
    return {**RECIPE, "budget": f"tokens:{tokens}"}


def test_shape_and_amplitudes_are_recovered_and_predict_a_larger_budget():
    floor, alpha, anneal = 1.2, 0.35, 0.004
    amps = [2.0, 2.6, 3.1, 3.8, 4.4]
    runs = []
    for i, amp in enumerate(amps):
        runs.append(
            Run.of(f"a{i}", law_curve(160_000, floor, alpha, anneal, amp), train_of(160_000))
        )
        if i < 3:  # confirmations of three architectures at 10x
            runs.append(
                Run.of(
                    f"a{i}", law_curve(1_600_000, floor, alpha, anneal, amp), train_of(1_600_000)
                )
            )
    shape = fit_shape(runs)
    assert shape.alpha == pytest.approx(alpha, abs=0.021)  # the exponent's grid step
    assert shape.across_budgets < 0.01 and all(err < 0.01 for _, err in shape.within_run)
    for i in (3, 4):  # never trained at 10x: predicted from its sandbox curve alone
        curve = {"evals": law_curve(160_000, floor, alpha, anneal, amps[i])}
        got = predict_loss(curve, train_of(160_000), "tokens:1.6M", shape=shape)
        true = law_curve(1_600_000, floor, alpha, anneal, amps[i])[-1]["val_loss"]
        assert got.value == pytest.approx(true, rel=0.01)
        assert 0 < got.std < 0.05 * true


@settings(max_examples=10, deadline=None)
@given(
    slope=st.floats(-0.3, 0.0),
    noise=st.floats(0.0, 0.003),
    seed=st.integers(0, 1000),
)
def test_a_floor_that_depends_on_size_is_recovered(slope, noise, seed):
    """Runs whose floors follow L0 + k ln(N / 1M): k is recovered from the sandbox curves and
    a few confirmations, and the architectures never confirmed are predicted at 10x; runs
    without parameter counts are fitted without the term."""
    floor, alpha, anneal = 1.0, 0.3, 0.003
    rng = np.random.default_rng(seed)
    sizes = [50_000, 120_000, 300_000, 700_000, 1_500_000, 4_000_000]
    amps = rng.uniform(2.0, 4.0, len(sizes))
    runs, plain = [], []

    def noisy(evals):
        for e in evals:
            e["val_loss"] += noise * rng.standard_normal()
        return evals

    def floor_of(n):
        return floor + slope * np.log(n / 1e6)

    for i, (n, amp) in enumerate(zip(sizes, amps)):
        budgets = (160_000, 1_600_000) if i in (0, 2, 5) else (160_000,)
        for tokens in budgets:
            evals = noisy(law_curve(tokens, floor_of(n), alpha, anneal, amp))
            runs.append(Run.of(f"a{i}", evals, train_of(tokens), params=n))
            plain.append(Run.of(f"a{i}", evals, train_of(tokens)))
    shape = fit_shape(runs)
    assert shape.size_slope == pytest.approx(slope, abs=0.03 + 10 * noise)
    assert fit_shape(plain).size_slope == 0.0
    for i in (1, 3, 4):  # never confirmed: predicted from the sandbox curve and the size
        n, amp = sizes[i], amps[i]
        curve = {"evals": law_curve(160_000, floor_of(n), alpha, anneal, amp)}
        got = predict_loss(curve, train_of(160_000), "tokens:1.6M", shape=shape, params=n)
        true = law_curve(1_600_000, floor_of(n), alpha, anneal, amp)[-1]["val_loss"]
        assert got.value == pytest.approx(true, rel=0.01 + 5 * noise)
    with pytest.raises(ValueError, match="parameter count"):
        predict_loss(curve, train_of(160_000), "tokens:1.6M", shape=shape)
    for stored in (0, -5.0, float("nan"), True, "300000", [300_000]):  # as a study may hold
        with pytest.raises(ValueError, match="positive number"):
            Run.of("a", curve["evals"], train_of(160_000), params=stored)
    as_numpy = Run.of("a", curve["evals"], train_of(160_000), params=np.int64(n))
    assert as_numpy.size == pytest.approx(np.log(n / 1e6))


@settings(max_examples=15, deadline=None)
@given(
    amp=st.floats(1.0, 5.0),
    noise=st.floats(0.0, 0.02),
    seed=st.integers(0, 1000),
)
def test_the_end_of_a_run_is_predicted_from_its_first_half(amp, noise, seed):
    shape = CurveShape(1.0, 0.3, 0.003, 0.05, ((0.25, 0.04), (0.75, 0.02)), "test")
    evals = law_curve(320_000, shape.floor, shape.alpha, shape.anneal, amp, (0.25, 0.5, 1.0))
    rng = np.random.default_rng(seed)
    for e in evals:
        e["val_loss"] += noise * rng.standard_normal()
    got = predict_final(evals[:2], train_of(320_000), shape=shape)
    exact = law_curve(320_000, shape.floor, shape.alpha, shape.anneal, amp)[-1]["val_loss"]
    assert abs(got.value - exact) <= 4 * noise + 1e-6 + 0.0  # only the noise moves it
    assert got.std >= 0.03 * got.value * 0.999  # never tighter than the shape at half the run


def test_the_error_within_a_run_is_measured_by_how_much_of_it_was_seen():
    """Runs whose exponents differ from the shared one: their ends are missed by more from
    their first eval point than from their third, and the error the shape states at a share is
    never smaller than what it misses there (z-scores of RMS at most 1; about 1 from the first
    point, where one error for all shares, the one at the last share, would be too tight)."""
    rng = np.random.default_rng(3)
    runs, evals_of = [], []
    for i, alpha in enumerate(rng.uniform(0.15, 0.6, 24)):
        evals = law_curve(320_000, 1.0, alpha, 0.003, rng.uniform(2.0, 4.0))
        runs.append(Run.of(f"a{i}", evals, train_of(320_000)))
        evals_of.append(evals)
    shape = fit_shape(runs)
    shares = [share for share, _ in shape.within_run]
    errors = [err for _, err in shape.within_run]
    assert shares == pytest.approx([0.25, 0.5, 0.75], abs=0.01)
    assert errors == sorted(errors, reverse=True) and errors[0] > 1.5 * errors[-1]
    for seen in (1, 2, 3):
        z = []
        for evals in evals_of:
            got = predict_final(evals[:seen], train_of(320_000), shape=shape)
            z.append((got.value - evals[-1]["val_loss"]) / got.std)
        rms = float(np.sqrt(np.mean(np.square(z))))
        assert rms <= 1.05  # never tighter than what it misses (later, the fit residual adds)
        if seen == 1:  # the error is all the shape's: it matches; the last share's would not
            assert rms >= 0.8 and rms * errors[0] / errors[-1] > 1.5
    early = law_curve(320_000, 1.0, 0.3, 0.003, 3.0, (0.05, 0.1, 0.25))
    with pytest.raises(ValueError, match="of the run seen"):  # no error measured that early
        predict_final(early[:2], train_of(320_000), shape=shape)
    assert predict_final(early, train_of(320_000), shape=shape).std > 0


def test_a_wrong_law_shows_in_the_measured_error():
    """Runs that do not follow one shape (each its own exponent) give a larger
    leave-one-out error than runs that do."""
    good, bad = [], []
    for i, (amp, a) in enumerate([(2.0, 0.2), (2.5, 0.5), (3.0, 0.8), (3.5, 0.3)]):
        for tokens in (160_000, 1_600_000):
            good.append(Run.of(f"a{i}", law_curve(tokens, 1.0, 0.4, 0.0, amp), train_of(tokens)))
            bad.append(Run.of(f"a{i}", law_curve(tokens, 1.0, a, 0.0, amp), train_of(tokens)))
    assert fit_shape(bad).across_budgets > 10 * fit_shape(good).across_budgets


def test_budgets_and_refusals():
    cfg = TrainConfig.from_dict(train_of(160_000))
    assert planned_steps(cfg) == 160_000 // PER_STEP
    flops = TrainConfig.from_dict({**RECIPE, "budget": "flops:1e12"})
    evals = [{"step": 10, "tokens": 10 * PER_STEP, "flops": 10 * PER_STEP * 5e5}]
    assert planned_steps(flops, evals) == int(1e12 / 5e5 // PER_STEP)
    with pytest.raises(ValueError, match="time budget"):
        planned_steps(TrainConfig.from_dict({**RECIPE, "budget": "time:60s"}))
    with pytest.raises(ValueError, match="no finite"):
        predict_final([{"step": 5, "val_loss": float("nan")}], train_of(160_000))
    with pytest.raises(ValueError, match="no optimizer step"):
        predict_loss({"evals": law_curve(160_000, 1, 0.3, 0, 2)}, train_of(160_000), "tokens:1K")


@settings(max_examples=25, deadline=None)
@given(tokens=st.integers(1, 10**13))
@example(tokens=999_999_500_000)  # rounds up to the next suffix: 1T, not 1000B
def test_a_predicted_loss_is_a_metric_whose_label_reads_back(tokens):
    from archsearch.metrics import MetricSpec

    spec = MetricSpec.parse(f"val_loss@tokens:{tokens}")
    assert MetricSpec.parse(spec.label) == spec
    assert spec.label.startswith("val_loss[tokens=") and spec.measured.label == "val_loss"
    assert spec.predicted_at == f"tokens:{spec.arg('tokens')}"
    assert MetricSpec.parse("val_loss").predicted_at is None


def test_the_sweep_stores_a_predicted_objective_with_its_error():
    """What the recorder stores for `val_loss[tokens=1.6M]`: the prediction from the trial's
    own eval points and recipe, and its error beside it."""
    from archsearch.metrics import MetricSpec
    from archsearch.sweep.recorder import training_value

    evals = law_curve(160_000, 1.0, 0.3, 0.002, 2.5)
    res = {"metrics": {"val_loss": evals[-1]["val_loss"]}, "evals": evals, "tokens": 160_000}
    res["config"] = TrainConfig.from_dict(train_of(160_000)).to_dict()
    res["n_params"] = 300_000
    attrs: dict = {}
    spec = MetricSpec.parse("val_loss@tokens:1.6M")
    value = training_value(spec, res, attrs)
    expected = predict_loss({"evals": evals}, train_of(160_000), "tokens:1.6M", params=300_000)
    assert value == pytest.approx(expected.value)
    assert attrs["predicted"][spec.label]["std"] == pytest.approx(expected.std)
    assert value < evals[-1]["val_loss"]  # more tokens, lower loss
    assert training_value(MetricSpec.parse("val_loss"), res, {}) == evals[-1]["val_loss"]
    with pytest.raises(ValueError):
        training_value(spec, {**res, "evals": []}, {})
    # the prior's floor depends on size: a trial without a parameter count is not predicted
    with pytest.raises(ValueError, match="parameter count"):
        training_value(spec, {**res, "n_params": None}, {})
    smaller = training_value(spec, {**res, "n_params": 100_000}, {})
    assert smaller > value  # same curve, fewer parameters: a higher floor


def test_a_predicted_loss_is_an_axis_of_any_trained_study_with_its_error(tmp_path):
    """`pareto y=val_loss@tokens:1.6M` on a study that optimised the sandbox loss: each
    trained trial's loss predicted from its stored curve, its error in the table."""
    import optuna

    from archsearch.analysis.front_table import front_columns
    from archsearch.analysis.pareto import analyse, choose_axes
    from archsearch.space import load_space, sample
    from archsearch.study import Status, StudyMeta, StudyWriter, load, open_storage
    from archsearch.sweep.pricing import price

    space = load_space("tiny")
    priced = [price(space, ["rpi5"], "rpi5", c.arch) for c in sample(space, 4, 0).candidates]
    meta = StudyMeta(
        objectives=["val_loss", "params"],
        directions=["minimize", "minimize"],
        device="rpi5",
        train=train_of(160_000),
        devices=["rpi5"],
    )
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    writer, _ = StudyWriter.create_or_open(open_storage(url), "pred", meta)
    curves = []
    for k, p in enumerate(priced):
        curves.append({"evals": law_curve(160_000, 1.0, 0.3, 0.002, 2.0 + 0.5 * k)})
        values = [curves[-1]["evals"][-1]["val_loss"], p.costs["params"]]
        writer.add_finished(Status.TRAINED, "", {**p.attrs(), "curve": curves[-1]}, values)
    data = load(url)
    label = "val_loss[tokens=1.6M]"
    axes, _ = choose_axes(data, "rpi5", "params", "val_loss@tokens:1.6M", None)
    assert [a.label for a in axes] == ["params", label]
    front = analyse(data, "rpi5", axes, is_default=False)
    for r, v in zip(front.trained, front.values):
        params = r.attrs["params"]
        expected = predict_loss(curves[r.number], train_of(160_000), "tokens:1.6M", params=params)
        assert v[1] == pytest.approx(expected.value)
        row = front.row(r, v)
        assert row[f"{label}:predicted_std"] == pytest.approx(expected.std)
    assert (f"{label}:predicted_std", "predicted +-1 sigma") in front_columns(front)
