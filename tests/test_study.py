"""The stored study: the one writer's statuses map to Optuna states as the schema says, old-style
and new-style constraints are both written, interrupted trials are failed and returned, a study
of the previous layout still opens in `pareto` and the dashboard's front, and no module of the
library reaches into Optuna's private API."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import optuna
import pytest

from archsearch.cli import main
from archsearch.study import (
    Status,
    StudyMeta,
    StudyWriter,
    load,
    locate,
    open_storage,
    records,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "study_v1.db"
# what `archsearch pareto` showed for the fixture when it was written (the previous layout)
FIXTURE_FRONT = [6, 13, 8, 2, 0]
FIXTURE_STATUSES = {"duplicate": 1, "failed": 1, "infeasible": 2, "stopped_early": 2, "trained": 9}


def new_writer(tmp_path: Path, name: str = "s") -> StudyWriter:
    meta = StudyMeta(objectives=["val_loss", "params"], directions=["minimize", "minimize"])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    writer, existed = StudyWriter.create_or_open(
        open_storage(f"sqlite:///{tmp_path / 'study.db'}"), name, meta
    )
    assert not existed
    return writer


@pytest.mark.parametrize(
    "status, values, state",
    [
        (Status.TRAINED, [1.0, 2.0], "COMPLETE"),
        (Status.DUPLICATE, [1.0, 2.0], "PRUNED"),  # values in `duplicate_values` (dashboard)
        (Status.DUPLICATE, None, "PRUNED"),
        (Status.STOPPED_EARLY, None, "PRUNED"),
        (Status.INFEASIBLE, None, "PRUNED"),
        (Status.INVALID, None, "PRUNED"),
        (Status.FAILED, None, "FAIL"),
        (Status.INTERRUPTED, None, "FAIL"),
    ],
)
def test_statuses_map_to_optuna_states(tmp_path, status, values, state):
    writer = new_writer(tmp_path)
    trial = writer.ask()
    writer.finish(trial, status, "why", {"arch": {"d_model": 64}}, values)
    (r,) = records(writer.study)
    assert (r.state, r.status, r.reason) == (state, status.value, "why")
    assert r.attrs["arch"] == {"d_model": 64}  # nested attributes round-trip through JSON text
    assert r.fully_trained == (status == Status.TRAINED)
    if status == Status.DUPLICATE and values:
        assert r.values is None and r.attrs["duplicate_values"] == values


def test_constraints_are_written_new_and_old_style(tmp_path):
    writer = new_writer(tmp_path)
    trial = writer.ask()
    writer.set_constraints(trial, {"params": -3.0, "cache_bytes": 5.0})
    writer.finish(trial, Status.INFEASIBLE, "cache_bytes too large")
    frozen = writer.study.get_trials()[0]
    assert {k: frozen.constraints[k] for k in ("params", "cache_bytes")} == {
        "params": -3.0,
        "cache_bytes": 5.0,
    }
    assert frozen.system_attrs["constraints"] == [-3.0, 5.0]  # what optuna-dashboard shows
    assert not records(writer.study)[0].feasible


def test_interrupted_trials_are_failed_and_returned_for_a_rerun(tmp_path):
    writer = new_writer(tmp_path)
    running = writer.ask()
    running.suggest_int("n_layers", 2, 8)
    writer.set_attrs(running, {"status": Status.RUNNING})  # launched
    poisoned = writer.ask()  # its driver died before it was built and priced
    poisoned.suggest_int("n_layers", 2, 8)
    alive = writer.ask()  # a live driver's trial
    done = writer.ask()
    writer.finish(done, Status.TRAINED, "", {}, [1.0, 2.0])
    again = writer.mark_interrupted(lambda t: t.number != alive.number)
    assert again == [dict(running.params)]  # the poisoned candidate is not run again
    by_number = {r.number: r for r in records(writer.study)}
    for n in (0, 1):
        assert by_number[n].state == "FAIL" and by_number[n].status == "interrupted"
    assert by_number[2].state == "RUNNING" and by_number[3].state == "COMPLETE"
    assert writer.mark_interrupted(lambda t: t.number != alive.number) == []


@pytest.mark.slow
def test_reopening_checks_it_is_the_same_sweep(tmp_path):
    new_writer(tmp_path)
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    same = StudyMeta(objectives=["val_loss", "params"], directions=["minimize", "minimize"])
    _, existed = StudyWriter.create_or_open(storage, "s", same)
    assert existed
    other = StudyMeta(objectives=["val_loss"], directions=["minimize"])
    with pytest.raises(Exception, match="exists with objectives"):
        StudyWriter.create_or_open(storage, "s", other)


@pytest.mark.slow
def test_a_study_of_the_previous_layout_opens_in_pareto(tmp_path, capsys):
    study = tmp_path / "old" / "study.db"
    study.parent.mkdir()
    shutil.copy(FIXTURE, study)
    assert main(["pareto", f"study={study.parent}", "format=json", "plots=false"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [row["trial"] for row in out["front"]] == FIXTURE_FRONT
    assert out["statuses"] == FIXTURE_STATUSES
    data = load(str(study.parent))
    assert data.meta["version"] == 1 and data.objectives[0] == "val_loss"
    assert locate(str(study))[0] == f"sqlite:///{study.resolve()}"
    assert _same_trials(FIXTURE, study)  # nothing about the trials changed


def test_a_study_of_the_previous_layout_opens_in_the_dashboards_front(tmp_path):
    from archsearch.analysis.dashboard import front_payload

    db = tmp_path / "study.db"
    shutil.copy(FIXTURE, db)
    payload = json.loads(front_payload(f"sqlite:///{db}", "tiny", tmp_path, {"device": "rpi5"}))
    text = json.dumps(payload)
    for number in FIXTURE_FRONT:
        assert f'"trial": {number}' in text or f"trial {number}" in text


def _same_trials(a: Path, b: Path) -> bool:
    def dump(path):
        st = optuna.load_study(study_name="tiny", storage=f"sqlite:///{path}")
        return [(t.number, t.state, t.values, t.user_attrs) for t in st.get_trials()]

    return dump(a) == dump(b)


def test_no_private_optuna_api_in_the_library():
    pattern = re.compile(r"\._storage\b|\._trial_id\b|optuna\._")
    hits = []
    for folder in ("archsearch", "trainers", "analysis"):
        for path in (ROOT / folder).rglob("*.py"):
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, hits


def _write_trials(url: str, n: int, *, killed: bool = False) -> None:
    """In another process: add `n` trials to study "s" at `url` (creating it), then exit, or
    die by SIGKILL with the connection open, its writes in the WAL file unmerged."""
    import subprocess
    import sys

    code = (
        "import os, signal, optuna\n"
        "from archsearch.study import open_storage\n"
        f"s = optuna.create_study(study_name='s', storage=open_storage({url!r}), "
        "load_if_exists=True)\n"
        f"for i in range({n}):\n"
        "    s.enqueue_trial({'x': float(i)}, skip_if_exists=False)\n"
        + ("os.kill(os.getpid(), signal.SIGKILL)\n" if killed else "")
    )
    subprocess.run([sys.executable, "-c", code], check=not killed, timeout=120)


@pytest.mark.slow
def test_looking_at_a_study_keeps_the_writes_of_another_process(tmp_path):
    """Checking a study file (every open does) while this process holds a connection to it
    must not drop SQLite's locks on it: a sweep resumed after a killed one, while a reader
    stays open, keeps every trial it wrote."""
    from archsearch.study.storage import open_reader

    url = f"sqlite:///{tmp_path / 'study.db'}"
    _write_trials(url, 2, killed=True)
    held = optuna.load_study(study_name="s", storage=open_storage(url))
    assert len(held.trials) == 2  # this process's connection stays open from here
    assert len(optuna.load_study(study_name="s", storage=open_reader(url)).trials) == 2
    _write_trials(url, 5)
    assert len(optuna.load_study(study_name="s", storage=open_reader(url)).trials) == 7
    assert len(held.trials) == 7
