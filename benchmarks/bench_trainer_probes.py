"""Do the synthetic probes separate recall-capable mixers from pure linear ones?

    python benchmarks/bench_trainer_probes.py [--suite recall|all] [--steps N] [--threads 1]

Three byte-vocabulary models of equal size (2 layers, width 64, 2 heads, SwiGLU 128; about 84K
parameters each): softmax attention in both layers (`NN`), a hybrid with one linear-attention
layer under one attention layer (`LN`), and pure linear attention (`LL`, [Linear-MoE]
Table 1's `linear_attention`: ELU+1 feature map, no decay, no output gate). Each is trained from
the same seed on each probe task by `run_trial(objective="probe")` and scored by accuracy on
the task's fixed held-out set (`archsearch.trainers.probes`).

- `--suite recall` (default): MQAR recall, 8 key-value pairs then 8 queries (sequence 32,
  vocabulary 32), 3000 steps of batch 32.
- `--suite all`: the six tasks at sequence 64, vocabulary 64, `--steps` (default 600) each.

Prints a table and saves benchmarks/results/bench_trainer_probes_<suite>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from archsearch.arch import ArchConfig
from archsearch.metrics import PROBE_TASKS
from archsearch.trainers.trial import TrainConfig, run_trial

ROOT = Path(__file__).resolve().parent
MODELS = {"attention (NN)": "NN", "hybrid (LN)": "LN", "linear attention (LL)": "LL"}
SUITES = {
    "recall": {"tasks": ("recall",), "steps": 3000, "seq_len": 32, "vocab": 32},
    "all": {"tasks": PROBE_TASKS, "steps": 600, "seq_len": 64, "vocab": 64},
}


def arch(pattern: str, vocab: int) -> ArchConfig:
    return ArchConfig.from_dict(
        {
            "name": pattern,
            "vocab_size": vocab,
            "d_model": 64,
            "n_layers": 2,
            "max_seq_len": 128,
            "layers": {"pattern": pattern},
            "attention": {"kind": "mha", "n_heads": 2},
            "linear": {
                "family": "linear_attention",
                "n_heads": 2,
                "feature_map": "elu",
                "output_gate": False,
            },
            "ffn": {"kind": "swiglu", "d_ffn": 128},
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", choices=SUITES, default="recall")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    suite = dict(SUITES[args.suite])
    suite["steps"] = args.steps or suite["steps"]
    cfg = TrainConfig(
        objective="probe",
        probe_tasks=suite["tasks"],
        probe_steps=suite["steps"],
        probe_seq_len=suite["seq_len"],
        probe_vocab=suite["vocab"],
        probe_batch_size=32,
        probe_eval_size=512,
        lr=3e-3,
        warmup=0.05,
        weight_decay=0.0,
        threads=args.threads,
        seed=0,
        log_every=50,
    )
    rows = {}
    load_before = os.getloadavg()
    for label, pattern in MODELS.items():
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as run_dir:
            r = run_trial(arch(pattern, suite["vocab"]), cfg, run_dir=run_dir)
        rows[label] = {
            "pattern": pattern,
            "status": r.status,
            "n_params": r.n_params,
            "acc": {t: p["acc"] for t, p in r.probes.items()},
            "loss": {t: p["loss"] for t, p in r.probes.items()},
            "wall_s": time.perf_counter() - t0,
        }
        print(f"{label}: {rows[label]['acc']} ({rows[label]['wall_s']:.0f} s)", flush=True)
    report = {
        "benchmark": "probe accuracy of attention vs hybrid vs linear attention",
        "suite": args.suite,
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in suite.items()},
        "train": {"lr": cfg.lr, "batch": cfg.probe_batch_size, "eval_sequences": 512},
        "threads": args.threads,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "models": rows,
    }
    out = Path(args.out or ROOT / "results" / f"bench_trainer_probes_{args.suite}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    tasks = list(suite["tasks"])
    print(f"\n{'model':24} {'params':>7} " + " ".join(f"{t:>14}" for t in tasks))
    for label, row in rows.items():
        accs = " ".join(f"{row['acc'][t]:>14.3f}" for t in tasks)
        print(f"{label:24} {row['n_params']:>7} {accs}")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
