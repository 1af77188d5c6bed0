"""Sweeps end to end on a real local Ray runtime and a real SQLite study: multi-objective
bookkeeping with early stopping, faults, resume after SIGKILL, bad input, containment."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import conftest
import optuna
import pytest
from conftest import EXE
from studies import records_so_far

from archsearch.study import open_storage, records
from archsearch.sweep.testing import FAULTS, fault_of

pytestmark = pytest.mark.slow


def sweep(tmp_path: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return conftest.sweep(tmp_path, "format=json", *args, **kw)


def study_of(run_dir: Path, name: str = "tiny"):
    return optuna.load_study(
        study_name=name, storage=open_storage(f"sqlite:///{run_dir / 'study.db'}")
    )


def test_multiobjective_study_keeps_early_stopped_trials_off_the_front(tmp_path):
    res = sweep(
        tmp_path,
        "trials=12",
        "concurrency=1",
        "seed=3",
        "trainable=archsearch.sweep.testing:synthetic",
        "early_stopping=asha",
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    study = study_of(tmp_path / "run")
    assert len(study.directions) == 2  # still multi-objective
    recs = records(study)
    assert not [r for r in recs if r.state == "RUNNING"]
    trained = [r for r in recs if r.status == "trained"]
    stopped = [r for r in recs if r.status == "stopped_early"]
    assert len(trained) == 12 == summary["trained_in_study"]  # trials=N: N fully trained
    assert stopped, "ASHA stopped nothing: the test space no longer exercises early stopping"
    for r in trained:
        assert r.state == "COMPLETE" and len(r.values) == 2
        assert r.attrs["budget"]["fraction"] == 1.0
    for r in stopped:
        assert r.state == "PRUNED" and r.values is None
        assert r.attrs["budget"]["fraction"] < 1.0
        assert "early-stopping" in r.reason
    front_trials = {row["trial"] for row in summary["front"]}
    assert front_trials and front_trials <= {r.number for r in trained}
    # Optuna's own view agrees: no stopped trial is among its best trials
    assert {t.number for t in study.best_trials}.isdisjoint({r.number for r in stopped})
    # untrained candidates are recorded with their reason and cost numbers, never trained
    for r in recs:
        if r.status in ("infeasible", "invalid", "duplicate"):
            assert r.state == "PRUNED" and "trial_dir" not in r.attrs
        if r.status == "infeasible":
            assert r.attrs["costs"] and r.attrs["device_costs"]["rpi5"]
            assert any(v > 0 for v in r.constraints.values())
    # every trial stores the cost numbers of every device profile
    for r in trained:
        assert {"rpi5", "nvidia_a10", "jetson_orin_nx"} <= set(r.attrs["device_costs"])
        assert r.attrs["arch"]["d_model"] in (64, 128)


def test_the_ehvi_sampler_trains_only_new_feasible_candidates_through_ray(tmp_path):
    """`sampler=ehvi` in a real sweep (Ray Tune, SQLite, two trials at once): every trial it
    asks for is a new feasible architecture, and the study ends with the trials asked for.
    The device is a profile file of the user's (rpi5's figures under another name): the sweep
    prices and stores it under its name."""
    from archsearch.resources import conf_dir

    mine = tmp_path / "my_board.yaml"
    mine.write_text((conf_dir() / "device" / "rpi5.yaml").read_text().replace("name: rpi5", ""))
    res = sweep(
        tmp_path,
        "trials=6",
        "concurrency=2",
        "sampler=ehvi",
        "early_stopping=none",
        "trainable=archsearch.sweep.testing:synthetic",
        f"device={mine}",
    )
    assert res.returncode == 0, res.stderr
    study = study_of(tmp_path / "run")
    recs = records(study)
    assert [r.status for r in recs] == ["trained"] * 6  # no infeasible, invalid or duplicate ask
    assert len({r.attrs["arch_hash"] for r in recs}) == 6
    assert all(r.state == "COMPLETE" and len(r.values) == 2 for r in recs)
    assert json.loads(study.user_attrs["archsearch"])["device"] == "my_board"
    for r in recs:  # priced on the file's figures, stored under its name
        mine_costs = r.attrs["device_costs"]["my_board"]
        assert {k.replace("my_board", "rpi5"): v for k, v in mine_costs.items()} == pytest.approx(
            r.attrs["device_costs"]["rpi5"]
        )


def test_the_gp_sampler_runs_a_sweep_to_its_trials_through_ray(tmp_path):
    """`sampler=gp` (Optuna's GPSampler, sweep/gp.py) in a real sweep with two trials at
    once: past its startup trials the GP picks, and the sweep ends with the trials asked for
    instead of stalling on proposals it cannot train."""
    res = sweep(
        tmp_path,
        "trials=7",
        "concurrency=2",
        "sampler=gp",
        "early_stopping=none",
        "trainable=archsearch.sweep.testing:synthetic",
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["sampler"] == "gp" and summary["trained_in_study"] == 7
    recs = records(study_of(tmp_path / "run"))
    trained = [r for r in recs if r.status == "trained"]
    assert len(trained) == 7 and len({r.attrs["arch_hash"] for r in trained}) == 7
    assert not [r for r in recs if r.state == "RUNNING"]
    assert len(recs) < 7 + 40  # few untrainable asks: the GP does not repeat what was pruned


def test_faults_are_recorded_and_the_sweep_finishes(tmp_path):
    res = sweep(
        tmp_path,
        "trials=1",
        "max_failures=0",
        "trainable=archsearch.sweep.testing:faulty",
        "early_stopping=none",
    )
    assert res.returncode == 0, res.stderr
    recs = records(study_of(tmp_path / "run"))
    attempted = [r for r in recs if r.status in ("trained", "failed")]
    assert len([r for r in attempted if r.status == "trained"]) == 1  # failures not counted
    expected = {
        "raise": "synthetic failure",
        "nan": "non-finite",
        "oom": "allocate",
        "kill": "died",
        "ok": "",
    }
    seen = set()
    for r in attempted:
        fault = fault_of(r.number)
        seen.add(fault)
        if fault == "ok":
            assert r.status == "trained" and r.state == "COMPLETE"
        else:
            assert r.status == "failed" and r.state == "FAIL", (fault, r.reason)
            assert expected[fault] in r.reason, (fault, r.reason)
    assert len(seen) == len(FAULTS)  # the one trained trial comes after every kind of fault


def _snapshot(run_dir: Path) -> tuple[dict[int, list[float]], list[int]]:
    """(the trained trials' values by number, the running trials' numbers), in one read."""
    recs = records_so_far(run_dir, "tiny")
    trained = {r.number: r.values for r in recs if r.state == "COMPLETE" and r.status == "trained"}
    return trained, [r.number for r in recs if r.state == "RUNNING"]


def test_resume_after_the_driver_is_killed(tmp_path):
    run_dir = tmp_path / "run"
    args = [
        EXE,
        "sweep",
        f"run_dir={run_dir}",
        "trials=6",
        "concurrency=2",
        "trainable=archsearch.sweep.testing:synthetic",
        "early_stopping=none",
    ]
    env = {**os.environ, "ARCHSEARCH_SYNTHETIC_SLEEP": "0.6"}
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # killed once two trials are trained while another runs (seen in one read: two trials
        # finishing together leave a moment with none running)
        deadline = time.time() + 180
        before, running = _snapshot(run_dir)
        while time.time() < deadline and (len(before) < 2 or not running):
            time.sleep(0.2)
            before, running = _snapshot(run_dir)
        assert len(before) >= 2 and running, "no moment with two trained and one running"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray it started
        proc.wait()
    study = study_of(run_dir)
    running = [t.number for t in study.get_trials() if t.state.name == "RUNNING"]
    assert running, "the kill came after the sweep had finished"
    res = subprocess.run(
        args,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ARCHSEARCH_SYNTHETIC_SLEEP": "0.02"},
    )
    assert res.returncode == 0, res.stderr
    recs = records(study_of(run_dir))
    after = {r.number: r.values for r in recs if r.state == "COMPLETE" and r.status == "trained"}
    for number, values in before.items():  # completed trials kept, untouched
        assert after[number] == values
    for number in running:  # interrupted ones marked failed...
        r = next(r for r in recs if r.number == number)
        assert r.state == "FAIL" and r.status == "interrupted"
    # ...and the study completes: six fully trained trials in all
    assert len([r for r in recs if r.status == "trained"]) == 6
    assert not [r for r in recs if r.state == "RUNNING"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["storage.url=postgresql+psycopg2://nobody@127.0.0.1:1/none"], "cannot reach the study"),
        (["device=toaster"], "unknown device 'toaster'"),
        (["ray.address=127.0.0.1:1"], "cannot reach a Ray cluster"),
        (["trials=0"], "trials"),
        (["sampler=grid"], "unknown sampler"),
        (  # probe accuracy and loss are both trained: ehvi models one
            ["sampler=ehvi", "search_space=hybrid_linear_moe"],
            "ehvi models exactly one objective that training measures",
        ),
        (["train.learning_rate=1"], "train.learning_rate"),
        (["budget=tokens:lots"], "budget"),
    ],
)
def test_bad_input_exits_2_and_leaves_no_study(tmp_path, args, fragment):
    res = sweep(tmp_path, *args, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], res.stderr
    assert not (tmp_path / "run").exists()


def test_a_space_without_feasible_candidates_exits_2_and_the_driver_never_imports_torch(tmp_path):
    """Refused before Ray starts, after every check of the driver's (the space, the placement,
    the runtime, the sampler, feasibility): none of them imports torch, which only trials
    need."""
    space = tmp_path / "space.yaml"
    space.write_text(
        "base: tiny_gqa\nparams:\n  n_layers: choice(2, 4)\n"
        "constraints:\n  - {metric: params, max: 1000}\n"
        "objectives:\n  - {metric: val_loss}\n"
    )
    code = (
        "import sys; from archsearch.cli import main; "
        f"rc = main(['sweep', 'run_dir={tmp_path / 'run'}', 'space_file={space}']); "
        "print(rc, 'torch' in sys.modules)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert res.stdout.split() == ["2", "False"], res.stderr
    assert "no feasible candidate" in res.stderr and "params" in res.stderr
    assert not (tmp_path / "run").exists()


def test_the_main_job_trains_real_models_and_keeps_ray_contained(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    temp = Path(tempfile.mkdtemp(prefix="as-"))  # this test's own temp dir (short: Ray sockets)
    res = sweep(
        tmp_path,
        "trials=2",
        "budget=tokens:12K",
        "train.eval_batches=2",
        # fair trials: each trial searches its rate first, and the study keeps the search
        "train.lr_search=halving",
        "train.lr_grid=[1e-3,3e-3]",
        "train.lr_search_share=0.5",
        env={"HOME": str(home), "TMPDIR": str(temp)},
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["trained_in_study"] == 2 and summary["front"]
    recs = records(study_of(tmp_path / "run"))
    trained = [r for r in recs if r.status == "trained"]
    assert trained and all(r.values[0] > 0 for r in trained)
    assert all(r.attrs["train_metrics"]["tokens_per_s"] > 0 for r in trained)
    assert all(r.attrs["budget"]["tokens"] > 0 for r in trained)
    for r in trained:  # two short runs within half of the trial's budget, counted
        search = r.attrs["lr_search"]
        assert search["chosen"] in (1e-3, 3e-3) and len(search["runs"]) == 2
        assert 0 < search["tokens"] <= 0.5 * r.attrs["budget"]["tokens"]
    assert list(home.iterdir()) == []  # no ~/.ray, no ~/ray_results
    assert list(temp.glob("archsearch-ray-*")) == []  # Ray's session files removed
    shutil.rmtree(temp)
