"""Sweeps on declared resources (a local Ray told it has GPUs on this CPU machine): fractional
GPU trials packed as asked and seeing the ids Ray assigned, CUDA settings refused before
anything runs, and a 2-worker data-parallel trial (Ray Train TorchTrainer, gloo) that matches
the single-worker trial and resumes after its driver is killed."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import optuna
import psutil
import pytest
import torch
from conftest import EXE

from archsearch.arch import ArchConfig
from archsearch.study import open_storage, records
from archsearch.trainers.trial import TrainConfig, run_trial

pytestmark = pytest.mark.slow
REL = 1e-5  # fp32 summation order only: see tests/test_trainers_device.py


def sweep_args(run_dir: Path, *args: str) -> list[str]:
    return [EXE, "sweep", f"run_dir={run_dir}", "format=json", *args]


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL every process of `proc`'s session (it was started in a new one): the driver, its
    Ray, the Train workers. Not its process group: Ray's workers each lead their own, and ones
    that outlived a group kill (about 4 s) have finished the trial they trained."""
    proc.kill()
    proc.wait()
    while True:  # until none is left (a dying raylet may still start a worker)
        left = []
        for p in psutil.process_iter(["status"]):
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if p.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(p.pid) == proc.pid:
                    p.kill()
                    left.append(p)
        if not left:
            return
        psutil.wait_procs(left, timeout=5)


def recs_of(run_dir: Path, name: str):
    study = optuna.load_study(
        study_name=name, storage=open_storage(f"sqlite:///{run_dir / 'study.db'}")
    )
    return records(study)


def test_fractional_gpu_trials_are_packed_four_to_a_gpu(tmp_path):
    res = subprocess.run(
        sweep_args(
            tmp_path / "run",
            "trials=8",
            "concurrency=8",
            "ray.num_cpus=8",
            "ray.num_gpus=1",
            "gpus_per_trial=0.25",
            "early_stopping=none",
            "trainable=archsearch.sweep.testing:synthetic",
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "ARCHSEARCH_SYNTHETIC_SLEEP": "2.5"},
    )
    assert res.returncode == 0, res.stderr
    trained = [r for r in recs_of(tmp_path / "run", "tiny") if r.status == "trained"]
    assert len(trained) == 8
    spans = []
    for r in trained:
        ex = r.attrs["execution"]
        assert ex["gpu_ids"] == ["0"] and ex["cuda_visible_devices"] == "0"
        spans.append((ex["started"], ex["ended"]))
    # the most trials running at one moment: four quarter-GPU trials on the one GPU, never five
    most = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert most == 4, spans


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["train.device=cuda"], "train.device: cuda trials need gpus_per_trial > 0"),
        (["train.precision=fp16"], "train.precision: fp16 needs a GPU"),
        (["gpus_per_trial=2", "ray.num_gpus=1"], "gpus_per_trial: a trial needs 2 GPU(s)"),
        (["workers_per_trial=3"], "workers_per_trial: train.batch_size 16 does not split"),
        (["gpus_per_trial=-1"], "gpus_per_trial: must be 0 or positive"),
    ]
    + (
        []
        if torch.cuda.is_available()
        else [
            (
                ["train.device=cuda", "gpus_per_trial=1", "ray.num_gpus=1"],
                "train.device: cuda requested but",
            )
        ]
    ),
)
def test_settings_no_trial_could_run_under_exit_2_before_the_study(tmp_path, args, fragment):
    res = subprocess.run(
        sweep_args(tmp_path / "run", *args),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], res.stderr
    assert not (tmp_path / "run").exists()


SPACE = """
name: one
base: tiny_gqa
params:
  d_model: choice(64)
  n_layers: choice(2)
derived:
  ffn.d_ffn: ${mul:${d_model},2}
objectives:
  - {metric: val_loss, direction: minimize}
"""
TRAIN = {
    "budget": "steps:200",
    "batch_size": 8,
    "seq_len": 32,
    "lr": 3e-3,
    "eval_at": [0.05, 1.0],
    "eval_batches": 2,
}


def test_a_data_parallel_trial_matches_one_worker_and_resumes_after_its_driver_is_killed(
    tmp_path,
):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    run_dir = tmp_path / "run"
    train = [f"train.{k}={json.dumps(v).replace(' ', '')}" for k, v in TRAIN.items()]
    args = sweep_args(
        run_dir,
        f"space_file={space}",
        "trials=1",
        "workers_per_trial=2",
        "ray.num_cpus=3",
        "early_stopping=none",
        *train,
    )
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not list(run_dir.glob("trials/*/checkpoint.pt")):
            time.sleep(0.05)
        checkpoints = list(run_dir.glob("trials/*/checkpoint.pt"))
        assert checkpoints, "no checkpoint before the deadline"
    finally:
        kill_session(proc)
    trial_dir = checkpoints[0].parent
    assert not (trial_dir / "result.json").exists(), "the kill came after the trial ended"
    res = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr
    recs = recs_of(run_dir, "one")
    (trained,) = [r for r in recs if r.status == "trained"]
    assert [r.status for r in recs if r.status != "trained"] == ["interrupted"]
    ex = trained.attrs["execution"]
    assert ex["workers"] == 2 and len(ex["worker_devices"]) == 2 and ex["device"] == "cpu"
    assert ex["micro_batch_size"] == 4  # each worker trains on half of the global batch of 8
    assert trained.attrs["train_metrics"]["resumed_from_step"] == 10  # the 5% checkpoint
    # the single-worker trial of the same architecture and global batch reaches the same loss
    cfg = TrainConfig.from_dict(TRAIN)
    single = run_trial(ArchConfig.from_dict(trained.attrs["arch"]), cfg, run_dir=tmp_path / "one")
    assert trained.values[0] == pytest.approx(single.metrics["val_loss"], rel=REL)
