"""Replicates and confirmations (`archsearch.sweep.retrain`, `archsearch confirm`): a real
sweep with replicates and a confirmation at its end, `archsearch confirm` on its study through
the CLI (real Ray Tune trials, real SQLite), reruns that train nothing, and bad input."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from conftest import EXE
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.cli import main
from archsearch.errors import UserError
from archsearch.study import Status, load
from archsearch.sweep.retrain import confirm_jobs, pareto_layers, scaled_budget
from archsearch.trainers.config import parse_budget

SYNTHETIC = "trainable=archsearch.sweep.testing:synthetic"


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ARCHSEARCH_SYNTHETIC_SLEEP": "0.01"}
    return subprocess.run(
        [EXE, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )


@pytest.mark.slow
def test_replicates_and_confirmation_are_stored_linked_and_never_trained_twice(tmp_path, capsys):
    run_dir = tmp_path / "run"
    res = cli(
        tmp_path,
        "sweep",
        f"run_dir={run_dir}",
        "trials=3",
        "seed=1",
        "early_stopping=none",
        "budget=tokens:1M",
        "replicates=2",
        "confirm.factor=4",
        "confirm.n=0",
        SYNTHETIC,
        "format=json",
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    stored = json.loads((run_dir / "sweep.json").read_text())
    assert stored["replicated"] == summary["replicated"] and stored["confirmed"]["jobs"] >= 1
    data = load(str(run_dir))
    by_number = {r.number: r for r in data.records}
    layers = pareto_layers(data.records, data.directions, 2)
    first_two = sorted(r.number for layer in layers for r in layer)
    assert summary["replicated"]["trials"] == first_two
    assert summary["replicated"]["seeds"] == [1]
    replicates = [r for r in data.records if r.status == Status.REPLICATE]
    assert sorted((r.attrs["replicate_of"], r.attrs["seed"]) for r in replicates) == sorted(
        (n, 1) for n in first_two
    )
    for r in replicates:
        sandbox = by_number[r.attrs["replicate_of"]]
        assert r.state == "PRUNED" and r.values is None  # never a point of its own
        assert r.attrs["arch_hash"] == sandbox.attrs["arch_hash"]
        values = r.attrs["replicate_values"]
        assert values[1] == sandbox.values[1]  # the cost objective, copied
        assert values[0] != sandbox.values[0]  # another seed, another loss
    confirmed = [r for r in data.records if r.status == Status.CONFIRMATION]
    front = {r.number for r in layers[0]}
    assert {r.attrs["confirms"] for r in confirmed} >= front
    assert len(confirmed) == len(front)  # confirm.n=0: the front alone
    for r in confirmed:
        assert r.attrs["budget_factor"] == 4.0 and r.attrs["seed"] == 0
        assert parse_budget(r.attrs["confirm_train"]["budget"]).amount == 4e6  # 4 x tokens:1M
        assert r.attrs["confirm_values"][0] < by_number[r.attrs["confirms"]].values[0]
    assert len(data.trained) == 3  # retraining never counts in trials=

    # `archsearch confirm` with another seed: a confirmation of its own, linked, with figures
    res = cli(
        tmp_path,
        "confirm",
        f"study={run_dir}",
        "factor=4",
        "n=1",
        "seed=5",
        SYNTHETIC,
        "format=json",
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    conf = out["confirmation"]
    assert out["already_stored"] == 0 and out["this_run"] == {"confirmation": out["jobs"]}
    assert conf["seed"] == 5 and len(conf["trials"]) == out["jobs"] >= len(front)
    after = load(str(run_dir))
    mine = [r for r in after.records if r.attrs.get("seed") == 5]
    assert sorted(r.attrs["confirms"] for r in mine) == sorted(t["trial"] for t in conf["trials"])
    for t in conf["trials"]:
        assert t["sandbox"] == pytest.approx(by_number[t["trial"]].values[0])
    assert -1.0 <= conf["kendall_tau"] <= 1.0 and -1.0 <= conf["spearman"] <= 1.0
    assert conf["front_kept"] <= conf["front_members"] == len(front)
    assert Path(out["files"]["png"]).is_file() and Path(out["files"]["html"]).is_file()

    # rerun: nothing trained (no Ray: in this process), the same figures printed as a table
    capsys.readouterr()
    assert main(["confirm", f"study={run_dir}", "factor=4", "n=1", "seed=5", SYNTHETIC]) == 0
    shown = capsys.readouterr().out
    assert "this run: nothing trained" in shown and "Kendall tau" in shown
    assert f"{conf['kendall_tau']:.3f}" in shown and "Spearman rho" in shown
    assert len(load(str(run_dir)).records) == len(after.records)


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    """A stand-in study (tests/studies.py), written once; tests copy it."""
    from studies import make_study

    path = tmp_path_factory.mktemp("stand_in") / "study.db"
    make_study(path, n=24)
    with sqlite3.connect(path) as con:  # all in the file itself (WAL mode), so a copy holds it
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["factor=0"], "factor: must be a positive budget factor"),
        (["n=-1"], "n: must be 0 or more"),
        (["concurrency=0"], "concurrency: must be positive"),
        (["study_name=nope"], "no study 'nope'"),
        (["data=./missing.txt"], "data file './missing.txt' does not exist"),
        (["trainable=no.such:thing"], "cannot import the trainable"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path, capsys, stand_in, args, fragment
):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(stand_in, run_dir / "study.db")

    def files_and_trials():  # SQLite's -wal and -shm files come with any reader
        names = sorted(p.name for p in run_dir.iterdir() if not p.name.endswith(("-wal", "-shm")))
        return names, len(load(str(run_dir)).records)

    before = files_and_trials()
    capsys.readouterr()
    assert main(["confirm", f"study={run_dir}", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err
    assert files_and_trials() == before


def test_an_unknown_study_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["confirm", "study=nowhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "study" in err[0] and "runs/nowhere" in err[0], err


@pytest.mark.parametrize("value", [0, -2, "three", 1.5, True])
def test_a_bad_replicates_key_names_the_file_and_key(value):
    from archsearch.space.spec import parse_space

    with pytest.raises(UserError, match=r"space\.yaml: replicates: must be a whole number"):
        parse_space({"base": "tiny_gqa", "replicates": value}, source="space.yaml")
    assert parse_space({"base": "tiny_gqa", "replicates": 3}, source="s.yaml").replicates == 3


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(["tokens", "flops", "steps", "time"]),
    amount=st.integers(1, 10**9),
    factor=st.floats(0.5, 64),
)
def test_a_scaled_budget_parses_back_to_factor_times_the_budget(kind, amount, factor):
    scaled = parse_budget(scaled_budget(f"{kind}:{amount}", factor))
    assert scaled.kind == kind
    want = max(1, round(amount * factor)) if kind == "steps" else amount * factor
    assert scaled.amount == pytest.approx(want, rel=1e-5)


def test_confirm_picks_the_front_and_n_trials_spread_over_the_ranking(stand_in):
    data = load(str(stand_in))
    train = {"budget": "tokens:1M", "data": ["stdlib"], "seed": 0}
    front = {r.number for r in pareto_layers(data.records, data.directions, 1)[0]}
    rest = sorted((r for r in data.trained if r.number not in front), key=lambda r: r.values[0])
    assert len(rest) >= 3
    for n in range(len(rest) + 2):
        jobs = confirm_jobs(data.records, data.objectives, data.directions, train, factor=2, n=n)
        picked = {j.source for j in jobs} - front
        assert {j.source for j in jobs} >= front and len(picked) == min(n, len(rest))
        if n >= 2:  # the best and the worst of the rest are always among them
            assert {rest[0].number, rest[-1].number} <= picked
        assert all(j.train["budget"] == "tokens:2M" and j.budget_factor == 2.0 for j in jobs)


@pytest.mark.slow
def test_replicates_confirmations_and_exports_train_at_the_rate_the_search_chose(tmp_path):
    """A study whose trials searched their rates: every job that trains a trial again, and
    the recipe `export` writes, train at the trial's chosen rate without searching again."""
    from studies import make_study, searched_rate

    from archsearch.sweep.retrain import full_train, replicate_jobs

    made = make_study(tmp_path / "study.db", n=24, lr_search=True)
    data = load(made["url"], made["name"])
    train = full_train(data.meta["train"])
    assert train["lr_search"] == "halving"
    jobs = [
        *replicate_jobs(data.records, data.directions, train, 2),
        *confirm_jobs(data.records, data.objectives, data.directions, train, factor=2, n=3),
    ]
    assert jobs
    for job in jobs:
        assert job.train["lr"] == searched_rate(job.source) and job.train["lr_search"] == "off"
    trained = data.trained[0].number
    res = cli(
        tmp_path, "export", f"study={made['url']}", f"trial={trained}", f"out={tmp_path / 'x'}"
    )
    assert res.returncode == 0, res.stderr
    recipe = next((tmp_path / "x").glob("*.train.yaml")).read_text()
    assert f"lr: {searched_rate(trained)}" in recipe and "lr_search: 'off'" in recipe
    assert f"the rate its learning-rate search chose ({searched_rate(trained):g})" in recipe
