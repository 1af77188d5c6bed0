"""`archsearch train`: help, a tiny run through the real command line, and bad input."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from archsearch.cli import main
from archsearch.cli.config import compose, to_schema
from archsearch.cli.schemas import SCHEMAS
from archsearch.resources import conf_dir
from archsearch.trainers.config import TrainConfig

ARCH = """
name: cli_tiny
vocab_size: 256
d_model: 32
n_layers: 2
max_seq_len: 64
attention: {kind: mha, n_heads: 2}
ffn: {kind: swiglu, d_ffn: 64}
"""


def archsearch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("archsearch")
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_help_lists_the_budget_syntax(tmp_path):
    res = archsearch("train", "--help", cwd=tmp_path)
    assert res.returncode == 0
    assert "usage: archsearch train" in res.stdout
    assert "tokens:N | flops:N | time:N[s|m|h] | steps:N" in res.stdout


@pytest.mark.slow
def test_a_tiny_run_writes_the_curve_into_the_run_directory(tmp_path):
    (tmp_path / "arch.yaml").write_text(ARCH)
    (tmp_path / "corpus.txt").write_text("to be or not to be, that is the question\n" * 200)
    res = archsearch(
        "train",
        "arch=arch.yaml",
        "budget=steps:12",
        "batch_size=2",
        "seq_len=16",
        "eval_at=0.5,1.0",
        "data=corpus.txt",
        "val_fraction=0.1",
        f"cache_dir={tmp_path / 'cache'}",
        "log_every=2",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "runs" / "train").iterdir()  # the default run directory
    assert run_dir.name.startswith("cli_tiny-")
    assert f"loss curve: {Path('runs/train') / run_dir.name / 'curve.json'}" in res.stdout
    curve = json.loads((run_dir / "curve.json").read_text())
    assert [p["step"] for p in curve["train"]] == [2, 4, 6, 8, 10, 12]
    assert [e["fraction"] for e in curve["eval"]] == [0.5, 1.0]
    rows = (run_dir / "curve.csv").read_text().splitlines()
    assert rows[0] == "step,tokens,train_loss,val_loss" and len(rows) == 7
    assert (run_dir / "curve.png").read_bytes()[:4] == b"\x89PNG"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["steps"] == 12
    assert result["config"]["data"] == ["corpus.txt"]
    assert not (tmp_path / "outputs").exists()  # Hydra wrote nothing of its own


def test_json_format_and_resume_of_a_finished_run(tmp_path, capsys):
    (tmp_path / "arch.yaml").write_text(ARCH)
    args = [
        "train",
        f"arch={tmp_path / 'arch.yaml'}",
        "budget=tokens:512",
        "batch_size=2",
        "seq_len=16",
        f"run_dir={tmp_path / 'run'}",
        f"cache_dir={tmp_path / 'cache'}",
        "format=json",
        "objective=both",
        "probe_tasks=recall",
        "probe_steps=3",
        "probe_seq_len=16",
        "probe_batch_size=4",
        "probe_eval_size=4",
    ]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["steps"] == 16 and "probe_acc[recall]" in first["metrics"]
    assert first["files"]["png"].endswith("curve.png")
    assert main(args) == 0  # resume=true: the saved result, not a new run
    again = json.loads(capsys.readouterr().out)
    assert again["wall_s"] == first["wall_s"] and again["key"] == first["key"]


def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys):
    cases = [
        (["budget=tokens"], "budget: bad budget 'tokens'"),
        (["arch=nope"], "arch: unknown architecture preset 'nope'"),
        (["lr=fast"], "key 'lr'"),
        (["learning_rate=1"], "unknown key 'learning_rate'"),
        (["schedule=linear"], "schedule: unknown schedule 'linear'"),
        (["probe_tasks=recall,sorting"], "probe_tasks: unknown probe task 'sorting'"),
        (["data=missing.txt"], "data: data file 'missing.txt' does not exist"),
        (["format=yaml"], "format: unknown format 'yaml'"),
    ]
    for extra, message in cases:
        code = main(["train", f"run_dir={tmp_path / 'r'}", *extra])
        err = capsys.readouterr().err
        assert code == 2, extra
        assert err.count("\n") == 1 and message in err, (extra, err)
    assert not (tmp_path / "r" / "result.json").exists()


def test_the_command_schema_is_train_config_plus_the_command_keys(capsys):
    schema = SCHEMAS["train"]
    assert issubclass(schema, TrainConfig)  # one declaration: the schema reuses TrainConfig
    own = {f.name: f for f in dataclasses.fields(TrainConfig)}
    fields = {f.name: f for f in dataclasses.fields(schema)}
    assert fields.keys() - own.keys() == {"arch", "run_dir", "resume", "format"}
    for name, f in own.items():
        assert (fields[name].type, fields[name].default) == (f.type, f.default), name
    # conf/train.yaml holds the command's own keys and only the settings it changes
    conf = yaml.safe_load((conf_dir() / "train.yaml").read_text())
    defaults = TrainConfig().to_dict()
    assert set(conf) - {"defaults"} == {"arch", "run_dir", "resume", "format", "keep_checkpoint"}
    assert conf["keep_checkpoint"] != defaults["keep_checkpoint"]
    composed = to_schema("train", compose("train", ["data=a.txt,b.txt"]))
    assert composed.trial_config() == TrainConfig(data=("a.txt", "b.txt"), keep_checkpoint=True)
    # --help lists every key with its default, from the yaml or from TrainConfig
    assert main(["train", "--help"]) == 0
    listed = capsys.readouterr().out
    for name, value in {**defaults, "keep_checkpoint": True, "arch": "tiny_gqa"}.items():
        shown = "null" if value is None else str(value)
        if isinstance(value, bool):
            shown = shown.lower()
        elif isinstance(value, list):
            shown = f"[{', '.join(map(str, value))}]"
        assert f"\n  {name}: {shown} " in listed, name
