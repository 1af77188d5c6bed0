"""The first hour of a new user (issue 15): a sweep followed in a log file, `trials=N` meaning N
fully trained architectures, reruns and Ctrl-C that say what happened, duplicates kept off
optuna-dashboard's front, a hypervolume reference point fixed per study, humane units, and an
export that `archsearch train` reproduces."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from conftest import EXE, SYNTHETIC
from conftest import sweep as _sweep
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.analysis.pareto import analyse, choose_axes
from archsearch.errors import CtrlC
from archsearch.study import Status, StudyMeta, StudyWriter, load, open_storage, records
from archsearch.units import fmt_duration, human


@pytest.mark.slow
def test_a_logged_sweep_shows_each_trial_and_trials_counts_fully_trained(tmp_path):
    res = _sweep(tmp_path, "trials=5", "seed=3", SYNTHETIC, "early_stopping=asha")
    assert res.returncode == 0, res.stderr
    log = res.stdout
    # one line per trial event, with the architecture, loss, throughput, times and ETA
    started = re.findall(r"trial (\d+) started: (.+) \(\S+ params\)", log)
    trained = re.findall(r"trial (\d+) trained: val_loss [\d.]+ nats/token", log)
    assert len(trained) == 5 and len(started) >= 5, log
    assert re.search(r"trial \d+ evaluated at \d+% of the budget: val_loss", log), log
    assert "tokens/s" in log and "ETA" in log and "elapsed" in log
    assert "\x1b[" not in log  # no terminal control codes in a log file
    # the counts: five fully trained, the rest beside them, in the same words everywhere
    recs = records(_study(tmp_path))
    by_status = {s: [r for r in recs if r.status == s] for s in {r.status for r in recs}}
    assert len(by_status["trained"]) == 5
    summary = json.loads((tmp_path / "run" / "sweep.json").read_text())
    assert summary["trained_in_study"] == 5 == summary["counts"]["trained"]
    assert summary["outcome"] == "done"
    assert summary["in_study"] == {s: len(v) for s, v in sorted(by_status.items())}
    assert "study tiny: 5 of 5 trained (trials=5); this run: 5 trained" in log
    stopped = len(by_status.get("stopped_early", []))
    if stopped:
        assert f"{stopped} stopped early" in log
    # duplicates never appear as extra COMPLETE trials (optuna-dashboard's front)
    complete = [r for r in recs if r.state == "COMPLETE"]
    assert {r.status for r in complete} == {"trained"}
    hashes = [r.attrs["arch_hash"] for r in complete]
    assert len(hashes) == len(set(hashes))
    for r in by_status.get("duplicate", []):
        assert r.state == "PRUNED" and r.values is None and "duplicate_of" in r.attrs
    # the study's reference point was fixed when it was created, from the space
    meta = StudyMeta.from_study(_study(tmp_path))
    assert meta.reference and len(meta.reference) == 2
    assert meta.reference[0] == pytest.approx(math.log(256))  # a uniform byte prediction

    again = _sweep(tmp_path, "trials=5", "seed=3", SYNTHETIC)
    assert again.returncode == 0, again.stderr
    assert "study tiny already holds 5 trained trials; nothing to do (trials=15 adds 10)" in (
        again.stdout
    )
    assert json.loads((tmp_path / "run" / "sweep.json").read_text())["outcome"] == "nothing_to_do"
    assert len(records(_study(tmp_path))) == len(recs)  # nothing was added


@pytest.mark.slow
def test_ctrl_c_says_what_was_interrupted_and_exits_130(tmp_path):
    log = (tmp_path / "log").open("w")
    env = {**os.environ, "ARCHSEARCH_SYNTHETIC_SLEEP": "2"}
    cmd = [EXE, "sweep", f"run_dir={tmp_path / 'run'}", "trials=6", SYNTHETIC]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # as in a terminal: a runner started in the background (`cmd &` in a script) passes
        # SIGINT on ignored, and a program that inherits it ignored never sees Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 180
    while time.time() < deadline and " started: " not in (tmp_path / "log").read_text():
        time.sleep(0.3)
    assert " started: " in (tmp_path / "log").read_text(), "no trial started before the deadline"
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "archsearch: interrupted: sweep of study 'tiny' stopped with" in err, err
    summary = json.loads((tmp_path / "run" / "sweep.json").read_text())
    assert summary["outcome"] == "interrupted"
    study = _study(tmp_path)
    states = [t.state.name for t in study.get_trials()]
    assert "RUNNING" not in states
    interrupted = [r for r in records(study) if r.status == "interrupted"]
    assert interrupted and any(r.reason == "interrupted (Ctrl-C)" for r in interrupted)
    assert states.count("WAITING") >= 1  # the interrupted trials, run first by the next run


@pytest.fixture
def python_sigint():
    """SIGINT as a fresh Python process has it (raises KeyboardInterrupt), whatever an earlier
    test of this process left; restored afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _ctrl_c_turned_into(error: Exception):
    """Ctrl-C landing in a library whose cleanup fails on its half-built state and raises its own
    error instead of the KeyboardInterrupt (as OmegaConf's did, building a config mid-sweep)."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler runs here
    finally:
        raise error


def test_ctrl_c_that_a_library_turned_into_another_error_still_reads_as_ctrl_c(python_sigint):
    ctrl_c = CtrlC()
    with pytest.raises(AttributeError), ctrl_c:
        _ctrl_c_turned_into(AttributeError("'NoneType' object has no attribute"))
    assert ctrl_c.pressed and ctrl_c.interrupted(AttributeError())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    with CtrlC() as quiet:
        pass
    assert not quiet.interrupted(AttributeError()) and quiet.interrupted(KeyboardInterrupt())


@pytest.mark.slow
def test_the_cli_exits_130_on_a_converted_ctrl_c_and_lets_real_errors_through(
    monkeypatch, capsys, python_sigint
):
    import archsearch.cli as cli

    monkeypatch.setattr(cli, "_main", lambda argv: _ctrl_c_turned_into(AttributeError("x")))
    assert cli.main(["sweep"]) == 130
    assert (
        "archsearch: interrupted: `archsearch sweep` before it finished" in capsys.readouterr().err
    )

    def bug(argv):
        raise AttributeError("a bug, not Ctrl-C")

    monkeypatch.setattr(cli, "_main", bug)
    with pytest.raises(AttributeError, match="a bug"):
        cli.main(["sweep"])


class _CollectedDuringCtrlC:
    """An object whose finaliser is running when Ctrl-C comes (as SQLAlchemy's weakref callback
    was, in a garbage collection mid-sweep): Python prints the KeyboardInterrupt raised there
    as ignored and the program goes on."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler runs here, inside the finaliser


@pytest.mark.slow
def test_the_cli_exits_130_on_a_ctrl_c_a_garbage_collection_swallowed(
    monkeypatch, capsys, python_sigint
):
    import archsearch.cli as cli

    def command(argv):
        _CollectedDuringCtrlC()  # dropped at once: its __del__ swallows the interrupt
        return 0

    monkeypatch.setattr(cli, "_main", command)
    assert cli.main(["sweep"]) == 130
    err = capsys.readouterr().err
    assert "archsearch: interrupted: `archsearch sweep` before it finished" in err
    monkeypatch.setattr(cli, "_main", lambda argv: 0)
    assert cli.main(["sweep"]) == 0  # no Ctrl-C: the command's own code


@pytest.mark.slow
def test_a_sweep_whose_trials_keep_failing_gives_up_and_says_so(tmp_path):
    res = _sweep(
        tmp_path,
        "trials=5",
        "concurrency=1",
        "max_failures=2",
        "trainable=archsearch.sweep.testing:faulty",
        "early_stopping=none",
        "format=json",
    )
    assert res.returncode == 1, res.stderr
    # (sweep.json: Ray's raylet prints a line about the killed worker on stdout)
    summary = json.loads((tmp_path / "run" / "sweep.json").read_text())
    assert summary["outcome"] == "gave_up" and summary["counts"]["failed"] == 2
    assert summary["trained_in_study"] < 5


def _study(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'run' / 'study.db'}"
    return optuna.load_study(study_name="tiny", storage=open_storage(url))


# ---- hypervolume reference point ---------------------------------------------------------------


def _write(path: Path, points: list[tuple[float, float]], reference: list[float] | None):
    meta = StudyMeta(
        objectives=["val_loss", "params"],
        directions=["minimize", "minimize"],
        reference=reference,
        reference_source="stated" if reference else "",
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    writer, _ = StudyWriter.create_or_open(open_storage(f"sqlite:///{path}"), "s", meta)
    for i, values in enumerate(points):
        trial = writer.ask()
        writer.finish(
            trial, Status.TRAINED, "", {"arch_hash": f"h{len(writer.records())}{i}"}, list(values)
        )
    return writer


def _hv(path: Path):
    data = load(str(path))
    axes, is_default = choose_axes(data, "rpi5", None, None, None)
    return analyse(data, "rpi5", axes, is_default=is_default)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(
    front=st.lists(st.tuples(st.floats(1.0, 5.0), st.floats(1.0, 5.0)), min_size=1, max_size=6),
    worse=st.tuples(st.floats(0.0, 10.0), st.floats(0.0, 10.0)),
)
def test_a_dominated_trial_does_not_move_the_hypervolume(tmp_path_factory, front, worse):
    path = tmp_path_factory.mktemp("hv") / "study.db"
    writer = _write(path, front, [6.0, 6.0])
    before = _hv(path)
    assert before.reference_source == "study"
    # a trial dominated by the first point (worse on both axes, possibly beyond the reference)
    dominated = (front[0][0] + worse[0], front[0][1] + worse[1])
    _write(path, [dominated], None)  # reopens the same study
    after = _hv(path)
    assert list(after.reference) == [6.0, 6.0]
    assert after.hypervolume == pytest.approx(before.hypervolume, rel=1e-12)
    del writer


def test_an_old_study_without_a_reference_falls_back_to_the_data_and_says_so(tmp_path):
    path = tmp_path / "study.db"
    _write(path, [(2.0, 3.0), (3.0, 2.0)], None)
    p = _hv(path)
    assert p.reference_source == "data"
    assert np.all(p.reference > [3.0, 3.0])
    assert p.summary()["reference_source"] == "data"
    data = load(str(path))
    axes, _ = choose_axes(data, "rpi5", None, None, None)
    stated = analyse(data, "rpi5", axes, reference=[10.0, 10.0])
    assert stated.reference_source == "reference=" and stated.hypervolume == pytest.approx(
        8 * 7 + 7 * 8 - 7 * 7
    )


# ---- units ----------------------------------------------------------------------------------


@given(st.floats(1e-3, 1e6))
def test_durations_read_in_one_unit_and_round_trip_to_the_second(seconds):
    text = fmt_duration(seconds)
    m = re.fullmatch(r"([\d.]+) (ms|s)|(\d+) min (\d\d) s|(\d+) h (\d\d) min", text)
    assert m, text
    if m.group(2):
        back = float(m.group(1)) / (1e3 if m.group(2) == "ms" else 1)
        assert back == pytest.approx(seconds, rel=5e-3)
    elif m.group(3):
        assert int(m.group(3)) * 60 + int(m.group(4)) == round(seconds)
    else:
        assert abs(int(m.group(5)) * 3600 + int(m.group(6)) * 60 - seconds) <= 30


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (7.08e11, "FLOP", "708 GFLOP"),
        (2.5e13, "FLOP", "25 TFLOP"),
        (19880.0, "ms", "19.9 s"),
        (3.25, "ms", "3.25 ms"),
        (524288, "B", "512 KiB"),
        (3 * 2**30, "B", "3 GiB"),
    ],
)
def test_numbers_carry_humane_units(value, unit, text):
    assert human(value, unit) == text


# ---- export reproduces the trial ----------------------------------------------------------------


@pytest.mark.slow
def test_train_on_an_export_reproduces_the_trial_loss(tmp_path):
    from archsearch.arch import load_arch
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import run_trial

    recipe = {"budget": "tokens:3K", "lr": 3e-3, "batch_size": 4, "seq_len": 32}
    recipe["eval_batches"] = 2
    assert TrainConfig().lr != recipe["lr"]  # the command's default would train another trial
    arch = load_arch("tiny_gqa")
    # what the sweep's trainable does with the study's recipe
    sweep_loss = run_trial(arch, TrainConfig.from_dict(recipe), run_dir=tmp_path / "t").metrics
    meta = StudyMeta(objectives=["val_loss"], directions=["minimize"], space="tiny", train=recipe)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    writer, _ = StudyWriter.create_or_open(open_storage(url), "s", meta)
    trial = writer.ask()
    attrs = {"arch": arch.to_dict(), "arch_hash": arch.arch_hash}
    writer.finish(trial, Status.TRAINED, "", attrs, [sweep_loss["val_loss"]])
    out = tmp_path / "export"
    res = subprocess.run(
        [EXE, "export", f"study={tmp_path / 'study.db'}", "trial=0", f"out={out}", "format=json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    exported = json.loads(res.stdout)
    assert Path(exported["recipe"]).is_file()
    res = subprocess.run(
        [
            EXE,
            "train",
            f"arch={exported['preset']}",
            f"run_dir={tmp_path / 'again'}",
            "format=json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    again = json.loads(res.stdout)
    assert again["metrics"]["val_loss"] == pytest.approx(sweep_loss["val_loss"], rel=1e-5)
    # a setting on the command line still wins over the recipe
    res = subprocess.run(
        [
            EXE,
            "train",
            f"arch={exported['preset']}",
            f"run_dir={tmp_path / 'lr'}",
            "lr=1e-2",
            "format=json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["metrics"]["val_loss"] != pytest.approx(
        sweep_loss["val_loss"], rel=1e-5
    )
