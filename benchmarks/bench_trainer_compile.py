"""Does `train.compile: true` pay off on CPU? Trial tokens/s with torch.compile (inductor) vs
eager, side by side, on the tiny space's model families.

    python benchmarks/bench_trainer_compile.py [--steps 60] [--threads 1] [--device auto]
                                               [--out results/bench_trainer_compile.json]

For each family of `search_spaces/tiny.yaml` at its largest size (4 layers, width 128, SwiGLU
x4, byte vocabulary; the GQA and MLA attention, the four linear families, MCSD) the same seeded
trial (`run_trial`, batch 16 x 128 tokens, fp32, `--threads` torch threads) runs eagerly and
compiled. Step times come from the trial's progress callback (one call per step): the first
compiled step holds the compile time, reported apart (`compile_s`); `steady` is tokens/s over the
remaining steps. Inductor's on-disk cache starts empty (`TORCHINDUCTOR_CACHE_DIR` in a fresh
temp dir), so `compile_s` is a cold compile, as a node's first trial of a family pays it; later
trials of the same shapes hit the cache (seconds). `trial_1M` prices the tiny space's whole
1M-token trial (488 steps): compile time plus 488 steady steps, against 488 eager steps: the
speed-up a sweep would see.

`--device` is the trial's `train.device` (auto: a GPU where there is one; its name is recorded).

Prints a table and saves benchmarks/results/bench_trainer_compile.json (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-inductor-")  # cold

import torch

from archsearch.arch import ArchConfig
from archsearch.trainers.trial import TrainConfig, run_trial

ROOT = Path(__file__).resolve().parent
FAMILIES = {
    "attention gqa": {"layers": {"mixer": "attention"}, "attention": {"kind": "gqa"}},
    "attention mla": {
        "layers": {"mixer": "attention"},
        "attention": {"kind": "mla", "kv_rank": 32},
    },
    "linear gla": {"layers": {"mixer": "linear"}, "linear": {"family": "gla"}},
    "linear retnet": {"layers": {"mixer": "linear"}, "linear": {"family": "retnet"}},
    "linear mamba2": {"layers": {"mixer": "linear"}, "linear": {"family": "mamba2"}},
    "linear deltanet": {"layers": {"mixer": "linear"}, "linear": {"family": "deltanet"}},
    "mcsd": {"layers": {"mixer": "mcsd"}, "mcsd": {"n_channels": 8}},
}
TINY_TRIAL_STEPS = 488  # tokens:1M at batch 16 x 128


def arch(name: str) -> ArchConfig:
    base = ArchConfig.from_dict(
        {
            "name": "bench",
            "vocab_size": 256,
            "d_model": 128,
            "n_layers": 4,
            "max_seq_len": 256,
            "attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2},
            "linear": {"n_heads": 4},
            "ffn": {"kind": "swiglu", "d_ffn": 512},
        }
    ).to_dict()
    for section, values in FAMILIES[name].items():
        base[section] = {**(base.get(section) or {}), **values}
    base["name"] = name.replace(" ", "-")
    return ArchConfig.from_dict(base)


def timed_trial(a: ArchConfig, cfg: TrainConfig, run_dir: Path) -> dict:
    stamps: list[float] = []
    t0 = time.perf_counter()
    r = run_trial(a, cfg, run_dir=run_dir, progress=lambda f, i: stamps.append(time.perf_counter()))
    steps = [b - a for a, b in zip([t0, *stamps], stamps)]  # first one includes data set-up
    tokens = cfg.batch_size * cfg.seq_len
    steady = statistics.median(steps[1:])
    return {
        "status": r.status,
        "first_step_s": steps[0],
        "steady_step_s": steady,
        "steady_tokens_per_s": tokens / steady,
        "val_loss": r.metrics.get("val_loss"),
        "compiled": r.execution.get("compiled"),
        "compile_fallback": r.execution.get("compile_fallback"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_trainer_compile.json"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = TrainConfig(
            budget=f"steps:{args.steps}",
            batch_size=16,
            seq_len=128,
            lr=3e-3,
            eval_at=(1.0,),
            eval_batches=1,
            log_every=1,
            threads=args.threads,
            device=args.device,
            cache_dir=str(Path(tmp) / "cache"),
        )
        for name in args.families:
            a = arch(name)
            eager = timed_trial(a, base, Path(tmp) / f"{name}-eager")
            comp = timed_trial(a, base.replace(compile=True), Path(tmp) / f"{name}-compiled")
            compile_s = comp["first_step_s"] - eager["first_step_s"]
            trial_eager = eager["first_step_s"] + (TINY_TRIAL_STEPS - 1) * eager["steady_step_s"]
            trial_comp = comp["first_step_s"] + (TINY_TRIAL_STEPS - 1) * comp["steady_step_s"]
            row = {
                "family": name,
                "eager_tokens_per_s": eager["steady_tokens_per_s"],
                "compiled_tokens_per_s": comp["steady_tokens_per_s"],
                "steady_speedup": comp["steady_tokens_per_s"] / eager["steady_tokens_per_s"],
                "compile_s": compile_s,
                "trial_1M_eager_s": trial_eager,
                "trial_1M_compiled_s": trial_comp,
                "trial_1M_speedup": trial_eager / trial_comp,
                "compiled": comp["compiled"],
                "compile_fallback": comp["compile_fallback"],
                "val_loss_eager": eager["val_loss"],
                "val_loss_compiled": comp["val_loss"],
            }
            rows.append(row)
            print(
                f"{name:16s} eager {row['eager_tokens_per_s']:8.0f} tok/s  compiled "
                f"{row['compiled_tokens_per_s']:8.0f} tok/s  x{row['steady_speedup']:.2f}  "
                f"compile {compile_s:5.1f} s  1M-token trial x{row['trial_1M_speedup']:.2f}"
                + (f"  FALLBACK {comp['compile_fallback']}" if comp["compile_fallback"] else ""),
                flush=True,
            )
            save(args, rows)  # after each family: a long run keeps what it measured


def save(args: argparse.Namespace, rows: list[dict]) -> None:
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    out = {
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs torch {torch.__version__}",
        "gpu": gpu if args.device in ("auto", "cuda") else None,
        "device": args.device,
        "load_average": os.getloadavg(),
        "threads": args.threads,
        "steps": args.steps,
        "batch": [16, 128],
        "rows": rows,
    }
    path = Path(args.out)
    path.write_text(json.dumps(out, indent=1))
    print(f"saved {path}", flush=True)


if __name__ == "__main__":
    main()
