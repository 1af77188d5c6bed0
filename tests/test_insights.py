"""What a study learned (`archsearch insights`): a study with planted effects
(`studies.make_planted_study`: a factor that moves the loss only, one that moves the latency
only, one that does nothing, a conditional parameter, an interaction) is recovered with the
signs right and intervals covering the planted sizes, the null factor "not resolved";
replicates narrow the intervals, a predicted loss carries its error, a level with one trial is
never an effect; single-objective studies work; the plots, files, report section and dashboard
carry it; bad input is one line and exit 2, with nothing written."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import optuna
import pytest
from studies import LATENCY, PLANTED, PREDICTED, make_planted_study, make_study

from archsearch.analysis.design import design, observe
from archsearch.analysis.effects import interactions, main_effects
from archsearch.analysis.importance import importances, support
from archsearch.analysis.insights import effect_line, fmt_interval, insights, objective_lines
from archsearch.cli import main
from archsearch.study import Status, StudyMeta, StudyWriter, load, open_storage

RESAMPLES = 300


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The planted study (seed 1) and what it learned on rpi5, fronts on rpi5 and Jetson."""
    path = tmp_path_factory.mktemp("planted") / "run" / "study.db"
    path.parent.mkdir()
    make_planted_study(path, seed=1)
    data = load(str(path.parent))
    got = insights(
        data,
        ["rpi5"],
        fronts=["rpi5", "jetson_orin_nx"],
        resamples=RESAMPLES,
        importance_resamples=8,
    )
    return path.parent, got


def effect(ins, objective: str, factor: str, level):
    o = ins.objective(objective)
    return next(e for e in o.effects if e.factor == factor and str(e.level) == str(level))


def covers(interval, truth: float) -> bool:
    return interval.low <= truth <= interval.high


def test_planted_main_effects_are_recovered_with_signs_and_intervals(planted):
    _, ins = planted
    width = effect(ins, "val_loss", "width", 128)
    family = effect(ins, "val_loss", "linear.family", "retnet")
    for e, truth in ((width, PLANTED["width=128"]), (family, PLANTED["linear.family=retnet"])):
        assert e.status == "estimated" and e.resolved and e.interval.estimate < 0
        assert covers(e.interval, truth), (e.factor, e.interval, truth)
    # quality interacts with the mixer: its main effect is its average over the trials'
    # mixers (16 attention at +0.10, 32 linear at +0.18)
    quality = effect(ins, "val_loss", "quality", "high")
    assert quality.resolved and covers(quality.interval, 0.10 + 0.08 * 32 / 48)
    # the null factor and the latency-only factor do not move the loss
    for factor, level in (("noise", "b"), ("speed", "fast")):
        e = effect(ins, "val_loss", factor, level)
        assert e.status == "estimated" and not e.resolved and covers(e.interval, 0.0)
    # on the latency: speed -30%, quality and the null factor nothing
    speed = effect(ins, LATENCY, "speed", "fast")
    assert speed.unit == "%" and speed.resolved and covers(speed.interval, -30.0)
    for factor, level in (("quality", "high"), ("noise", "b")):
        assert not effect(ins, LATENCY, factor, level).resolved
    assert effect(ins, LATENCY, "width", 128).interval.estimate == pytest.approx(50, abs=3)


def test_the_planted_interaction_is_notable_and_the_null_ones_are_not(planted):
    _, ins = planted
    o = ins.objective("val_loss")
    found = {}
    for i in o.interactions:  # either way round
        found[(i.factors, i.levels)] = found[(i.factors[::-1], i.levels[::-1])] = i
    mixer_quality = found[(("layers.mixer", "quality"), ("linear", "high"))]
    assert mixer_quality.notable
    assert covers(mixer_quality.interval, PLANTED["quality=high x layers.mixer=linear"])
    # the two simple effects it compares: linear vs attention at quality base, and at high
    assert covers(mixer_quality.at_base, PLANTED["layers.mixer=linear"])
    assert covers(mixer_quality.at_level, PLANTED["layers.mixer=linear"] + 0.08)
    for (factors, _), i in found.items():
        if "noise" in factors:
            assert not i.notable, factors
    # quality x linear.family: estimated among the linear mixers only, where both are active
    # (pooling attention trials with gla would fake an interaction)
    family = found[(("linear.family", "quality"), ("retnet", "high"))]
    assert family.counts == (8, 8, 8, 8) and covers(family.interval, 0.0)
    assert not family.notable


def test_statements_say_effects_their_intervals_and_trials(planted):
    _, ins = planted
    text = "\n".join(ins.statements())
    width = effect(ins, "val_loss", "width", 128)
    assert (
        f"width 128 vs 64: {fmt_interval(width.interval, 'nats/token')} on val_loss (n=24 vs 24)"
        in text
    )
    assert "noise b vs a: not resolved at this budget on val_loss" in text
    assert "speed fast vs slow: -30" in text and "on decode_ms@rpi5 (n=24 vs 24)" in text
    # trials left out as the front leaves them out, and said
    assert "48 fully trained feasible architectures" in text
    assert "left out: duplicate 1, failed 1, infeasible 1, stopped early 1" in text
    assert "seed noise not measured (replicates=0)" in text
    # the conditional parameter's effect is among the trials where it is active
    assert "linear.family retnet vs gla:" in text and "(n=16 vs 16)" in text
    assert "layers.mixer linear vs attention (at linear.family=gla)" in text
    assert ins.design.factor("linear.family").given == "active where layers.mixer=linear"


def test_importance_ranks_the_factors_that_move_each_objective(planted):
    _, ins = planted
    loss = {i.factor: i for i in ins.objective("val_loss").importance}
    assert max(loss, key=lambda f: loss[f].share) == "quality"
    assert loss["noise"].share < 0.05 and loss["noise"].low <= 0.02
    latency = {i.factor: i for i in ins.objective(LATENCY).importance}
    assert min(latency[f].share for f in ("speed", "width")) > latency["quality"].share
    assert abs(sum(i.share for i in loss.values()) - 1.0) < 1e-6
    for i in loss.values():
        assert i.low <= i.high


def test_importances_wait_for_trials_that_separate_the_factors(tmp_path):
    """fANOVA splits an objective's variance among the factors' main effects: only more trials
    than a main-effects model's terms (an intercept, a term per active level beyond the first,
    one per number of many values; an inactive level is its parent's) separate them. Fewer
    trials get no importances; as many get them."""
    make_study(tmp_path / "s.db", n=30)
    data = load(f"sqlite:///{tmp_path / 's.db'}")
    d = design(data)
    full = observe(d, "val_loss", "minimize")
    rows = np.flatnonzero(full.has_value)
    seen = set()
    for k in range(1, len(rows) + 1):
        keep = set(rows[:k].tolist())
        seeds = [s if i in keep else s[:0] for i, s in enumerate(full.seeds)]
        obs = dataclasses.replace(full, seeds=seeds)
        terms = 0
        for f in d.factors:  # counted apart from `support`: the active levels among the k
            levels = len({str(f.values[i]) for i in keep if f.values[i] is not None})
            terms += 0 if levels < 2 else 1 if f.slope else levels - 1
        got = support(d, obs)
        assert (got.trials, got.terms, got.needed) == (k, terms, terms + 2)
        computed = bool(importances(d, obs, resamples=1))
        assert computed == (terms > 0 and k >= terms + 2), (k, terms)
        seen.add(computed)
    assert seen == {False, True}  # the study crosses the line


def test_fronts_by_factor_and_what_changes_between_devices(planted):
    """Attention is slow on rpi5 and a linear mixer on the Jetson: the fronts say so."""
    _, ins = planted
    rpi5, jetson = ins.fronts
    assert rpi5.device == "rpi5" and jetson.device == "jetson_orin_nx"
    on_rpi5 = rpi5.level_share("layers.mixer", "linear")[0]
    on_jetson = jetson.level_share("layers.mixer", "linear")[0]
    assert on_rpi5 > on_jetson and rpi5.level_share("layers.mixer", "linear")[1] == 32
    text = "\n".join(ins.statements())
    n_rpi5, n_jetson = len(rpi5.front), len(jetson.front)
    assert f"layers.mixer=linear {on_rpi5} of {n_rpi5} -> {on_jetson} of {n_jetson}" in text
    # which neighbour is faster, beside each one's +-, from the profile's held-out pairs
    assert ins.ordering and all(0.5 <= o.confidence < 1 for o in ins.ordering)
    assert "is faster than" in text and "held-out pairs" in text


def test_replicates_narrow_the_intervals(tmp_path):
    """The same planted study with noisier seeds, once with one seed per architecture and once
    with three more: the intervals over seeds are narrower, and the pooled seed std is
    measured and stated."""
    widths = {}
    for reps in (0, 3):
        path = tmp_path / f"r{reps}.db"
        make_planted_study(path, sigma=0.06, replicates=reps, seed=2, extras=False)
        d = design(load(f"sqlite:///{path}"))
        o = observe(d, "val_loss", "minimize")
        e = next(x for x in main_effects(d, o, resamples=RESAMPLES) if x.factor == "width")
        widths[reps] = e.interval.half_width
        assert covers(e.interval, PLANTED["width=128"])
        if reps:
            assert sum(len(v) for v in d.replicates.values()) == 48 * reps
            assert o.noise is not None and 0.04 < o.noise.std < 0.08
    assert widths[3] < 0.75 * widths[0], widths


def test_a_predicted_loss_carries_its_error_into_the_intervals(tmp_path):
    path = tmp_path / "p.db"
    make_planted_study(path, predicted_std=0.1, seed=3, extras=False)
    data = load(f"sqlite:///{path}")
    got = insights(
        data, ["rpi5"], extra=["val_loss@tokens:10M"], resamples=RESAMPLES, importance_resamples=2
    )
    measured, predicted = got.objective("val_loss"), got.objective(PREDICTED)
    assert predicted.observed.kind == "predicted" and "predicted" in predicted.observed.how
    assert "1-sigma error" in predicted.noise_note()

    def width(o):
        return next(e for e in o.effects if e.factor == "width").interval

    assert width(predicted).half_width > 2 * width(measured).half_width
    assert covers(width(predicted), PLANTED["width=128"])


def test_a_level_with_one_trial_is_never_an_effect(tmp_path):
    path = tmp_path / "rare.db"
    make_planted_study(path, rare=True, seed=1, extras=False)
    d = design(load(f"sqlite:///{path}"))
    o = observe(d, "val_loss", "minimize")
    effects = main_effects(d, o, resamples=100)
    rare = next(e for e in effects if e.factor == "rare")
    assert rare.n == 1 and rare.status == "too few trained trials" and rare.interval is None
    # n and n_reference count trained trials; `modelled` those the model keeps (the rare
    # level's one trial is left out), and the statement says both where they differ
    f = d.factor("rare")
    trained_at_reference = int((f.indicator(f.reference) * o.has_value).sum())
    assert rare.n_reference == trained_at_reference and rare.modelled[0] == 0
    assert effect_line(rare, f).endswith(
        f"(n=1 vs {trained_at_reference}, 0 vs {rare.modelled[1]} in the model; "
        "needs 2 each in the model)"
    )
    for e in effects:
        assert e.modelled[0] <= e.n and e.modelled[1] <= e.n_reference
        if e.status == "estimated" and not d.factor(e.factor).slope:
            assert min(e.modelled) >= 2
    assert not d.factor("rare").resolvable
    assert not [i for i in interactions(d, o, resamples=100) if "rare" in i.factors]


@pytest.mark.parametrize("n", [3, 5])
def test_a_study_too_small_for_any_effect_says_so_in_one_statement(tmp_path, n):
    make_study(tmp_path / "s.db", n=n)
    data = load(f"sqlite:///{tmp_path / 's.db'}")
    o = insights(data, ["rpi5"], resamples=20, importance_resamples=2).objectives[0]
    assert o.size[0] == 1  # the intercept alone
    lines = objective_lines(o, design(data))
    assert [line for line in lines if line.startswith("no effect can be fitted yet")]
    assert not o.importance and not o.support.separable
    (why,) = [line for line in lines if line.startswith("what matters most for val_loss")]
    assert why.startswith(f"what matters most for val_loss: not estimated yet: {o.support.trials}")
    assert why.endswith(f"it takes at least {o.support.needed} trials")
    assert not [line for line in lines if "the effects model has" in line]


def test_a_single_objective_study_works(tmp_path):
    path = tmp_path / "one.db"
    make_planted_study(path, single_objective=True, seed=1)
    got = insights(load(f"sqlite:///{path}"), ["rpi5"], resamples=200, importance_resamples=2)
    assert [o.label for o in got.objectives] == ["val_loss"]
    assert effect(got, "val_loss", "width", 128).resolved
    assert got.fronts[0].front and not got.ordering  # a front of one axis, no latency to order


# ---- the command, its files, the report and the dashboard -------------------------------------


def test_the_command_prints_statements_and_writes_plots_and_files(planted, tmp_path, capsys):
    run, _ = planted
    out = tmp_path / "out"
    code = main(
        [
            "insights",
            f"study={run}",
            f"out={out}",
            "resamples=100",
            "importance_resamples=2",
            "format=json",
        ]
    )
    assert code == 0
    got = json.loads(capsys.readouterr().out)
    assert got["trials"] == 48 and got["devices"] == ["rpi5"]
    assert [f["device"] for f in got["fronts"]] == ["rpi5", "jetson_orin_nx"]  # every priced
    assert [o["objective"] for o in got["objectives"]] == ["val_loss", LATENCY]
    assert any("not resolved at this budget" in s for s in got["statements"])
    for key in ("report_md", "report_html", "json", f"effects_png:{LATENCY}"):
        assert (out / got["files"][key].split("/")[-1]).exists(), key
    assert "![val_loss](effects-00-val_loss.png)" in (out / "insights.md").read_text()
    assert (
        json.loads((out / "insights.json").read_text())["objectives"][0]["objective"] == "val_loss"
    )


def test_devices_are_named_as_a_comma_list(planted, capsys):
    run, _ = planted
    args = ["insights", f"study={run}", "plots=false", "resamples=50", "importance_resamples=0"]
    assert main([*args, "device=jetson_orin_nx,rpi5", "fronts=rpi5", "format=json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["devices"] == ["jetson_orin_nx", "rpi5"]
    assert [f["device"] for f in got["fronts"]] == ["rpi5"]
    jetson = LATENCY.replace("rpi5", "jetson_orin_nx")
    assert [o["objective"] for o in got["objectives"]] == ["val_loss", jetson, LATENCY]


def test_plots_draw_every_factor_and_effect(planted):
    from archsearch.analysis.insight_plots import effect_rows, effects_mpl, importance_mpl

    _, ins = planted
    o = ins.objective("val_loss")
    bars = importance_mpl(o).axes[0].patches
    assert len(bars) == len(o.importance) == 6
    rows = effect_rows(o, ins.design)
    assert len(effects_mpl(o, ins.design).axes[0].get_yticklabels()) == len(rows) == len(o.effects)
    assert sum(r["resolved"] for r in rows) == sum(e.resolved for e in o.effects)


@pytest.mark.slow  # a front report and the dashboard's answer, end to end
def test_the_front_report_and_the_dashboard_say_what_the_study_learned(tmp_path):
    """On the stand-in sweep of the `tiny` space (real architectures and costs)."""
    from archsearch.analysis.dashboard import insights_payload
    from archsearch.analysis.pareto import analyse, choose_axes
    from archsearch.analysis.report import write_outputs

    info = make_study(tmp_path / "s.db", n=24)
    data = load(info["url"])
    p = analyse(data, "rpi5", choose_axes(data, "rpi5", None, None, None)[0])
    files = write_outputs(p, tmp_path / "pareto")
    report = files["report_md"].read_text()
    assert "## What the study learned" in report
    assert "layers.mixer" in report and design(data).describe() in report
    assert "What the study learned" in files["report_html"].read_text()
    sections = dict(json.loads(insights_payload(data, "jetson_orin_nx"))["sections"])
    assert any("decode_ms@jetson_orin_nx" in line for line in sections["decode_ms@jetson_orin_nx"])


BAD = [
    (["device=mars"], "device"),
    (["fronts=rpi5,mars"], "fronts"),
    (["resamples=10"], "resamples"),
    (["metrics=[nonsense]"], "metrics"),
]


@pytest.mark.parametrize("extra,key", BAD)
def test_bad_settings_are_one_line_and_exit_2(planted, tmp_path, capsys, extra, key):
    run, _ = planted
    out = tmp_path / "out"
    assert main(["insights", f"study={run}", f"out={out}", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and key in err
    assert not out.exists()


def test_a_study_without_trained_trials_or_of_another_tool_is_refused(tmp_path, capsys):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    untrained = tmp_path / "untrained.db"
    meta = StudyMeta(objectives=["val_loss"], directions=["minimize"], device="rpi5")
    writer, _ = StudyWriter.create_or_open(open_storage(f"sqlite:///{untrained}"), "s", meta)
    writer.add_finished(Status.FAILED, "nan")
    other = tmp_path / "other.db"
    plain = optuna.create_study(storage=f"sqlite:///{other}", study_name="plain")
    plain.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=3)
    for path, says in ((untrained, "no fully trained"), (other, "not written by archsearch")):
        out = tmp_path / f"out-{path.stem}"
        assert main(["insights", f"study={path}", f"out={out}"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and says in err, err
        assert not out.exists()
    assert np.isfinite(plain.best_value)  # the other tool's study is as it was


@pytest.mark.slow
def test_the_dashboard_answers_what_the_study_learned(planted):
    """The served page offers it, and its route answers for a device of the study, and one
    line (400) for a device it does not know."""
    import select
    import signal
    import subprocess
    import sys
    import urllib.error
    import urllib.request
    from pathlib import Path

    run, _ = planted
    exe = str(Path(sys.executable).with_name("archsearch"))
    proc = subprocess.Popen(
        [exe, "dashboard", f"study={run}", "port=0", "format=json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        urls = json.loads(proc.stdout.readline()) if ready else None
        assert urls, "the dashboard did not start"
        page = urllib.request.urlopen(urls["archsearch"], timeout=60).read().decode()
        assert 'id="learn"' in page and "What the study learned" in page
        api = urls["archsearch"] + "/api/insights?device="
        body = json.loads(urllib.request.urlopen(api + "rpi5", timeout=120).read())
        titles = [title for title, _ in body["sections"]]
        assert titles[:3] == ["What the analysis stands on", "val_loss", "decode_ms@rpi5"]
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(api + "mars", timeout=60)
        assert (
            e.value.code == 400 and "unknown device 'mars'" in json.loads(e.value.read())["error"]
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_large_study_s_importances_come_from_a_sample_of_its_trials(planted, monkeypatch):
    """Above `MAX_TRIALS` trained trials the forests see a seeded sample of them."""
    from archsearch.analysis import importance

    run, _ = planted
    d = design(load(str(run)))
    o = observe(d, "val_loss", "minimize")
    seen = []
    real = optuna.importance.get_param_importances

    def spy(study, **kw):
        seen.append(len(study.trials))
        return real(study, **kw)

    monkeypatch.setattr(importance, "MAX_TRIALS", 30)
    monkeypatch.setattr(optuna.importance, "get_param_importances", spy)
    got = importance.importances(d, o, resamples=3)
    assert seen == [30] * 4
    assert got[0].factor == "quality" and abs(sum(i.share for i in got) - 1) < 1e-6


def test_a_study_of_three_trials_says_it_is_too_few(tmp_path):
    """What a sweep of three trained trials writes at its end: no effect, every level too few,
    nothing raised."""
    path = tmp_path / "three.db"
    make_planted_study(path, seed=1, extras=False)
    data = load(f"sqlite:///{path}")
    data.records = [r for r in data.records if r.number in (0, 1, 17)]
    got = insights(data, ["rpi5"], fronts=["rpi5"], resamples=50, importance_resamples=2)
    assert len(got.design.trials) == 3
    effects = [e for o in got.objectives for e in o.effects]
    assert effects and not any(e.resolved for e in effects)
    assert {e.status for e in effects} <= {"too few trained trials", "too few trials"}
    assert not [i for o in got.objectives for i in o.interactions]
    assert "3 fully trained feasible architectures" in got.statements()[0]


def test_a_contrast_at_a_level_without_a_column_of_its_own_is_read_as_zero(tmp_path):
    """A small study (as a short sweep ends) where an interaction's level has no column in the
    effects model (the model could not identify it): the insights are written, not raised."""
    path = tmp_path / "small.db"
    make_study(path, n=6, seed=2)
    data = load(f"sqlite:///{path}")
    got = insights(data, ["rpi5"], fronts=["rpi5"], resamples=20, importance_resamples=2)
    assert got.statements()
    for o in got.objectives:
        for i in o.interactions:  # every contrast it reports has finite intervals
            assert np.isfinite([i.interval.low, i.interval.high]).all()
