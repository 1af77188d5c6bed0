"""`archsearch.open_study` from a notebook: the tutorial docs/tutorials/notebook.md runs as
written on a stand-in study of the `tiny` space, and the API's DataFrames agree with the
stored study (every trial, the searched parameters, every cost on every device with its
error, the front, the effects), reading it without writing it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from studies import OBJECTIVES, make_study

import archsearch
from archsearch.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorials" / "notebook.md"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A folder holding runs/tiny/study.db, as `make run` leaves it."""
    home = tmp_path_factory.mktemp("notebook")
    (home / "runs" / "tiny").mkdir(parents=True)
    info = make_study(home / "runs" / "tiny" / "study.db", n=36)  # 20 trained, as make run
    return home, info


def cells(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.slow  # the tutorial end to end, as the docs' tutorials
def test_the_tutorial_runs_as_written(run, monkeypatch):
    """Every python cell of the tutorial, in order, in one namespace, in the folder holding
    runs/ (as a notebook started there); the last expression of a cell is what the notebook
    shows, and a figure shows as HTML."""
    home, info = run
    monkeypatch.chdir(home)
    code = cells(TUTORIAL.read_text())
    assert len(code) >= 10
    namespace: dict = {}
    shown = []
    for cell in code:
        tree = ast.parse(cell, str(TUTORIAL))
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, str(TUTORIAL), "exec"), namespace)
        if last is not None:
            expression = ast.Expression(last.value)
            shown.append(eval(compile(expression, str(TUTORIAL), "eval"), namespace))
    figures = [s for s in shown if isinstance(s, go.Figure)]
    assert len(figures) == 3
    assert all("plotly" in f.to_html(include_plotlyjs=False) for f in figures)
    assert sum(isinstance(s, pd.DataFrame) for s in shown) >= 7
    written = sum(len(numbers) for numbers in info["by_status"].values())
    assert len(namespace["df"]) == written and len(namespace["front"]) >= 2
    importance = [s for s in shown if isinstance(s, pd.DataFrame) and "share" in s.columns]
    assert len(importance) == 1 and len(importance[0])  # 20 trained trials separate them
    assert {"estimate", "low", "high", "status"} <= set(namespace["effects"].columns)


def test_trials_are_the_stored_study_as_a_dataframe(run):
    home, info = run
    study = archsearch.open_study(str(home / "runs" / "tiny"))
    df = study.trials()
    records = study.data.records
    assert list(df["number"]) == [r.number for r in records]
    assert list(df["status"]) == [r.status for r in records]
    trained = df[df.status == "trained"]
    assert len(trained) == len(info["by_status"]["trained"])
    # objectives and parameters as Optuna's trials_dataframe names them
    for r in records:
        row = df[df.number == r.number].iloc[0]
        for name, value in r.params.items():
            assert row[f"params_{name}"] == value
        if r.values is not None:
            assert row[f"values_{OBJECTIVES[0]}"] == pytest.approx(r.values[0])
    # every stored cost on every device, a predicted latency with its error
    for device in ("rpi5", "jetson_orin_nx", "apple_m3"):
        label = OBJECTIVES[1].replace("rpi5", device)
        assert df[f"cost_{label}"].notna().sum() >= len(trained)
        errors = df.loc[df.status == "trained", f"cost_{label}:error"]
        assert errors.between(0.01, 1.0).all()
    # the duplicate carries its first trial's values (stored beside its PRUNED state)
    dup = df[df.status == "duplicate"].iloc[0]
    first = df[(df.arch_hash == dup["arch_hash"]) & (df.status == "trained")].iloc[0]
    assert dup[f"values_{OBJECTIVES[0]}"] == first[f"values_{OBJECTIVES[0]}"]


def test_device_adds_that_devices_costs_and_fronts_follow_the_device(run):
    home, _ = run
    study = archsearch.open_study(str(home / "runs" / "tiny"))
    df = study.trials("snapdragon_8gen3")
    label = OBJECTIVES[1].replace("rpi5", "snapdragon_8gen3")
    assert df[f"cost_{label}"].notna().any() and f"cost_{label}:error" in df
    front = study.front("snapdragon_8gen3")
    assert label in front and np.all(np.diff(front[label].to_numpy()) >= 0)
    p = study.pareto("snapdragon_8gen3")
    assert list(front["trial"]) == [r.number for r, _ in p.front]
    with pytest.raises(UserError):
        study.trials("mars")


def test_effects_importance_and_figures_come_from_one_analysis(run):
    home, _ = run
    study = archsearch.open_study(str(home / "runs" / "tiny"))
    kw = {"resamples": 100, "importance_resamples": 2}
    effects = study.effects(**kw)
    ins = study.insights(**kw)
    assert study.insights(**kw) is ins  # reused
    assert len(effects) == sum(len(o.effects) for o in ins.objectives)
    resolved = effects[effects.resolved]
    assert ((resolved.low > 0) | (resolved.high < 0)).all()
    assert set(study.importance(**kw).objective) == {o.label for o in ins.objectives}
    assert study.effects_figure("decode_ms@rpi5", **kw).data
    with pytest.raises(UserError) as e:
        study.effects_figure("nonsense", **kw)
    assert "known: val_loss, decode_ms@rpi5" in str(e.value)


def test_opening_writes_nothing_and_bad_locations_are_one_line(run, tmp_path):
    home, _ = run
    db = home / "runs" / "tiny" / "study.db"
    before = db.read_bytes()
    archsearch.open_study(str(home / "runs" / "tiny")).trials()
    assert db.read_bytes() == before
    with pytest.raises(UserError) as e:
        archsearch.open_study(str(tmp_path / "nowhere"))
    assert "\n" not in str(e.value)
