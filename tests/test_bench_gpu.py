"""benchmarks/bench_gpu.py and gpu_check.sh: without a CUDA device (or given a part they do not
have) they say so in one line and exit 2, writing nothing; the MFU contenders run (tiny shapes,
`--smoke`) on the CPU. (`bench_gpu.py pack --smoke` is the packing test's sweep, which
`test_sweep_resources` runs.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from benchmark_scripts import BENCHMARKS, load

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of no GPU")


@no_gpu
@pytest.mark.parametrize("what", ["mfu", "fla"])
def test_without_a_gpu_the_benchmark_says_so_and_exits_2(what, tmp_path, capsys):
    assert load("bench_gpu").main([what, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().out.strip().endswith("sees none")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("parts", "says"),
    [
        pytest.param([], "needs a CUDA GPU", marks=no_gpu),
        pytest.param(["mfu", "pack"], "needs a CUDA GPU", marks=no_gpu),
        (["mfu", "mfc"], "unknown part mfc"),  # refused before a part runs, GPU or not
    ],
)
def test_the_check_script_refuses_in_one_line_before_writing(parts, says, tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    run = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_check.sh"), *parts], env=env, capture_output=True, text=True
    )
    assert run.returncode == 2, run.stderr
    assert run.stdout.count("\n") == 1 and says in run.stdout
    assert not (tmp_path / "out").exists()


def test_the_mfu_contenders_train_and_are_saved_as_each_finishes(tmp_path):
    bench = load("bench_gpu")
    args = ["mfu", "--smoke", "--batch", "2", "--seq", "32", "--steps", "2", "--tag", "_t"]
    assert (
        bench.main([*args, "--contenders", "plain-eager,trial-eager", "--out", str(tmp_path)]) == 0
    )
    saved = json.loads((tmp_path / "bench_gpu_mfu_t.json").read_text())
    assert saved["tokens_per_step"] == 64 and saved["non_embedding_params"] > 0
    for name in ("plain-eager", "trial-eager"):
        row = saved["contenders"][name]
        assert row["tokens_per_s"] > 0 and len(row["first_steps_s"]) == bench.WARMUP, row


def test_non_embedding_params_leave_out_the_tied_embedding_once():
    bench = load("bench_gpu")
    from archsearch.models import build_model

    arch = bench.edge_arch(smoke=True)
    model = build_model(arch)
    total = sum(p.numel() for p in model.parameters())  # the tied head is one parameter
    assert bench.non_embedding_params(model) == total - arch.vocab_size * arch.d_model


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--contenders", "hf-eager,x-y"], "argument --contenders: unknown 'x-y'"),
        (["--tag", "../elsewhere"], "argument --tag: '../elsewhere'"),
    ],
)
def test_a_bad_argument_is_one_line_exit_2_before_anything_runs(args, says, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        load("bench_gpu").main(["mfu", "--smoke", *args, "--out", str(tmp_path / "out")])
    assert stop.value.code == 2
    assert says in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()
