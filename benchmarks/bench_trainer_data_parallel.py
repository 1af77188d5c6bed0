"""A 2-worker data-parallel trial (Ray Train TorchTrainer, DDP over gloo) against the same trial
on one worker, on this CPU machine.

    python benchmarks/bench_trainer_data_parallel.py [--steps 60] [--workers 2]

The tiny space's base model (`tiny_gqa`: 4 layers, width 128, GQA, SwiGLU 384; byte vocabulary)
trains `--steps` steps of a global batch of 16 x 128 tokens (fp32, one torch thread per worker):
once by `run_trial` in this process, once by `--workers` Ray Train workers (each 8 x 128 tokens
a step, gradients all-reduced by gloo) on a local Ray with `--workers` + 1 CPUs. Reported per
run: training tokens/s (tokens / time in training steps, all-reduce included), wall time
(Ray Train's start-up included for the data-parallel run) and the final validation loss, which
should agree to fp32 rounding.

Prints a table and saves benchmarks/results/bench_trainer_data_parallel.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from archsearch.arch import ArchConfig
from archsearch.resources import conf_dir
from archsearch.sweep.ray_runtime import contain_ray, ray_session
from archsearch.sweep.trainable import fit_data_parallel
from archsearch.trainers.trial import TrainConfig, run_trial

ROOT = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    arch = ArchConfig.from_yaml(conf_dir() / "arch" / "tiny_gqa.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(
            budget=f"steps:{args.steps}",
            batch_size=16,
            seq_len=128,
            lr=3e-3,
            eval_at=(1.0,),
            eval_batches=2,
            cache_dir=str(Path(tmp) / "cache"),
        )
        t0 = time.perf_counter()
        one = run_trial(arch, cfg, run_dir=Path(tmp) / "one").to_dict()
        one_wall = time.perf_counter() - t0
        contain_ray(False)
        with ray_session(None, args.workers + 1, False):
            t0 = time.perf_counter()
            config = {
                "arch": arch.to_dict(),
                "train": cfg.to_dict(),
                "trial_dir": str(Path(tmp) / "dp"),
                "placement": {"workers": args.workers, "cpus": 1, "gpus": 0},
            }
            dp = fit_data_parallel(config)
            dp_wall = time.perf_counter() - t0
    rows = [
        {
            "run": "1 worker",
            "tokens_per_s": one["tokens_per_s"],
            "wall_s": one_wall,
            "val_loss": one["metrics"]["val_loss"],
            "train_s": one["train_s"],
        },
        {
            "run": f"{args.workers} workers (gloo)",
            "tokens_per_s": dp["tokens_per_s"],
            "wall_s": dp_wall,
            "val_loss": dp["metrics"]["val_loss"],
            "train_s": dp["train_s"],
            "worker_devices": dp["execution"]["worker_devices"],
        },
    ]
    for r in rows:
        print(
            f"{r['run']:18s} {r['tokens_per_s']:8.0f} tokens/s  wall {r['wall_s']:6.1f} s  "
            f"val_loss {r['val_loss']:.6f}"
        )
    speedup = rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"]
    print(
        f"speed-up x{speedup:.2f} in training steps; |val_loss diff| "
        f"{abs(rows[1]['val_loss'] - rows[0]['val_loss']):.2e}"
    )
    out = {
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs torch {torch.__version__}",
        "load_average": os.getloadavg(),
        "steps": args.steps,
        "global_batch": [16, 128],
        "rows": rows,
        "speedup": speedup,
    }
    path = ROOT / "results" / "bench_trainer_data_parallel.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"saved {path}")


if __name__ == "__main__":
    main()
