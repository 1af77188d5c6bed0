"""`archsearch space show|sample` end to end, and the bad-input contract: one line naming the
file and key, exit code 2, no traceback, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from archsearch.cli import main

GOOD = """
name: mine
base: tiny_gqa
params:
  n_layers: choice(2, 4)
  attention.kind: choice(gqa, mla)
  attention.kv_rank:
    values: choice(16, 32)
    when: {attention.kind: mla}
derived:
  attention.n_heads: ${div:${d_model},32}
constraints:
  - {metric: params, max: 2M}
objectives:
  - {metric: val_loss}
  - {metric: decode_ms, device: rpi5, context: 512}
"""


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_space_show_and_sample_json(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    code, out, _ = run(["space", "show", f"space_file={path}", "format=json"], capsys)
    assert code == 0
    info = json.loads(out)
    assert info["size"] == 2 * 3 and info["base"] == "tiny_gqa"
    assert [p["name"] for p in info["params"]] == [
        "n_layers",
        "attention.kind",
        "attention.kv_rank",
    ]
    assert info["objectives"][1]["args"]["device"] == "rpi5"
    code, out, _ = run(
        ["space", "sample", f"search_space={path}", "n=4", "seed=3", "format=json"], capsys
    )
    assert code == 0
    data = json.loads(out)
    assert len(data["candidates"]) == 4
    assert len({c["hash"] for c in data["candidates"]}) == 4
    again = json.loads(
        run(["space", "sample", f"space_file={path}", "n=4", "seed=3", "format=json"], capsys)[1]
    )
    assert [c["hash"] for c in again["candidates"]] == [c["hash"] for c in data["candidates"]]


def test_space_sample_table_reports_rejections(capsys):
    code, out, _ = run(["space", "sample", "search_space=hybrid_linear_moe", "n=50"], capsys)
    assert code == 0
    assert "50 candidates from hybrid_linear_moe" in out
    assert "top_k_above_n_experts" in out  # top-k 8 with 4 experts is drawn and counted


def test_help_for_every_command(capsys):
    from archsearch.cli import COMMANDS

    code, out, _ = run(["--help"], capsys)
    assert code == 0 and all(name in out for name in COMMANDS)
    for name in COMMANDS:
        code, out, _ = run([name, "--help"], capsys)
        assert code == 0 and f"archsearch {name}" in out and "keys" in out


@pytest.mark.slow
def test_space_commands_do_not_import_torch_or_ray():
    code = (
        "import sys; from archsearch.cli import main; "
        "rc = main(['space', 'sample', 'search_space=tiny', 'n=3']); "
        "assert rc == 0, rc; "
        "heavy = [m for m in ('torch', 'ray', 'optuna') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


@pytest.mark.slow
def test_console_script_runs_from_a_fresh_process(tmp_path):
    exe = Path(sys.executable).with_name("archsearch")
    res = subprocess.run(
        [str(exe), "space", "show", "search_space=plm_edge"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert "plm_edge" in res.stdout and "384" in res.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written


# Each malformed input: (space file text or None, extra argv, fragments the message must hold).
BAD_SPACES = [
    ("base: tiny_gqa\nparams:\n  n_layers: choice(2, 4\n", [], ["n_layers", "cannot parse"]),
    ("base: tiny_gqa\nparams:\n n_layers: 2\n  d_model: 3\n", [], ["malformed YAML", "line"]),
    ("base: tiny_gqa\nparamz: {}\n", [], ["paramz", "unknown key"]),
    (
        "base: tiny_gqa\nparams:\n  attention.n_headz: choice(2, 4)\n",
        [],
        ["params.attention.n_headz", "unknown architecture key"],
    ),
    (
        "base: tiny_gqa\nparams:\n  n_layers: choice(2, four)\n",
        [],
        ["params.n_layers", "'four'", "int"],
    ),
    ("base: tiny_gqa\nparams:\n  n_layers: choice()\n", [], ["params.n_layers", "empty choice"]),
    (
        "base: tiny_gqa\nparams:\n  norm_eps: interval(5, 1)\n",
        [],
        ["params.norm_eps", "low 5 is above high 1"],
    ),
    (
        "base: tiny_gqa\nparams:\n  layers.mixer: choice(attention, transformer)\n",
        [],
        ["params.layers.mixer", "transformer", "known: attention, linear, mcsd"],
    ),
    (
        "base: tiny_gqa\nparams:\n  ffn.kind: choice(swiglu, swish)\n",
        [],
        ["params.ffn.kind", "swish"],
    ),
    (
        "base: tiny_gqa\nparams:\n  linear.family: choice(gla, lstm)\n",
        [],
        ["params.linear.family", "lstm"],
    ),
    (
        "base: tiny_gqa\nparams:\n  layers.pattern: choice(LLLN, LLXN)\n",
        [],
        ["params.layers.pattern", "unparseable layer pattern", "LLXN"],
    ),
    (
        "base: tiny_gqa\nobjectives:\n  - {metric: decode_ms, device: toaster}\n",
        [],
        ["objectives[0].device", "unknown device 'toaster'"],
    ),
    (
        "base: tiny_gqa\nconstraints:\n  - {metric: params, max: 20Q}\n",
        [],
        ["constraints[0].max", "unknown suffix 'Q'"],
    ),
    (
        "base: tiny_gqa\nconstraints:\n  - {metric: parameters, max: 20M}\n",
        [],
        ["constraints[0].metric", "unknown metric 'parameters'"],
    ),
    (
        "base: tiny_gqa\nconstraints:\n  - {metric: params}\n",
        [],
        ["constraints[0]", "needs 'max' or 'min'"],
    ),
    (
        "base: tiny_gqa\nconstraints:\n  - {metric: decode_ms, max: 5, precision: fp8}\n",
        [],
        ["constraints[0].precision", "unknown precision 'fp8'"],
    ),
    (
        "base: tiny_gqa\nconstraints:\n  - {metric: cache_bytes, max: 1MiB, bits: 12}\n",
        [],
        ["constraints[0].bits", "12"],
    ),
    (
        "base: tiny_gqa\nconstraints:\n  - {metric: cache_bytes, max: 1MiB, context: -5}\n",
        [],
        ["constraints[0].context", "positive integer"],
    ),
    (
        "base: tiny_gqa\nobjectives:\n  - {metric: val_loss, direction: lower}\n",
        [],
        ["objectives[0].direction", "minimize or maximize"],
    ),
    (
        "base: tiny_gqa\nparams:\n  d_model: choice(64, 128)\nderived:\n  attention.n_heads: ${div:${d_modle},32}\n",
        [],
        ["derived.attention.n_heads", "d_modle"],
    ),
    (
        "base: tiny_gqa\nparams:\n  attention.kind: choice(gqa, mha)\n  attention.kv_rank:\n    values: choice(16)\n    when: {attention.kind: mla}\n",
        [],
        ["params.attention.kv_rank.when", "never be active"],
    ),
    (
        "base: tiny_gqa\nparams:\n  vars.a:\n    values: choice(1, 2)\n    when: {vars.b: 1}\n  vars.b:\n    values: choice(1, 2)\n    when: {vars.a: 1}\n",
        [],
        ["when", "cycle"],
    ),
    (
        "base: tiny_gqa\nparams:\n  n_layers:\n    values: choice(2)\n    when: {attention.colour: red}\n",
        [],
        ["params.n_layers.when.attention.colour", "unknown architecture key"],
    ),
    ("base: no_such_preset\n", [], ["base", "unknown architecture preset 'no_such_preset'"]),
    ("params:\n  n_layers: choice(2, 4)\n", [], ["base", "missing"]),
    (
        "base:\n  vocab_size: 10\n  d_model: sixty\n  n_layers: 2\n",
        [],
        ["base", "d_model", "expected an integer"],
    ),
    ("- just\n- a list\n", [], ["(top level)", "mapping"]),
    (
        "base: tiny_gqa\nparams:\n  attention.rope_theta: tag(log, interval(0, 10))\n",
        [],
        ["params.attention.rope_theta", "positive low bound"],
    ),
    ("base: tiny_gqa\nparams:\n  n_layers: range(5, 1)\n", [], ["params.n_layers", "is empty"]),
    (
        "base: tiny_gqa\nparams:\n  n_layers: interval(1, 8)\n",
        [],
        ["params.n_layers", "tag(int, interval"],
    ),
]


@pytest.mark.parametrize(("text", "argv", "fragments"), BAD_SPACES)
def test_malformed_space_files_exit_2_with_one_line(text, argv, fragments, tmp_path, capsys):
    path = write(tmp_path, text)
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = run(["space", "show", f"space_file={path}", *argv], capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"archsearch: error: {path}")
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


BAD_ARGS = [
    (
        ["space", "show", "search_space=nope"],
        ["search_space", "unknown search space 'nope'", "tiny"],
    ),
    (["space", "show", "space_file=./missing.yaml"], ["space_file", "does not exist"]),
    (["space", "show", "colour=red"], ["unknown key 'colour'"]),
    (["space", "show", "+colour=red"], ["cannot be added"]),
    (["space", "sample", "n=abc"], ["n", "abc"]),
    (["space", "sample", "n=0"], ["n", "must be positive"]),
    (["space", "show", "format=xml"], ["format", "xml"]),
    (["space"], ["needs a subcommand"]),
    (["space", "list"], ["unknown subcommand", "list"]),
    (["spaec", "show"], ["unknown command 'spaec'"]),
    (["space", "show", "--verbose"], ["--verbose"]),
    (["space", "show", "search_space"], ["expected key=value"]),
]


@pytest.mark.parametrize(("argv", "fragments"), BAD_ARGS)
def test_bad_command_lines_exit_2_with_one_line(argv, fragments, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("archsearch: error:"), err
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_user_errors_have_no_traceback_in_a_real_process(tmp_path):
    path = write(tmp_path, "base: tiny_gqa\nparams:\n  n_layers: choice()\n")
    res = subprocess.run(
        [sys.executable, "-m", "archsearch.cli", "space", "show", f"space_file={path}"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
