"""nanoGPT's CPU "baby GPT" on Tiny Shakespeare characters, trained by `archsearch.trainers`
and, side by side in the same process, by a plain PyTorch loop of the same model.

    python benchmarks/bench_trainer_baby_gpt.py [--data PATH] [--threads 1] [--iters 2000]

The recipe of nanoGPT's README (config/train_shakespeare_char.py with the CPU overrides):
4 layers, 4 heads, width 128, block 64, batch 12, 2000 iterations, dropout 0, AdamW lr 1e-3
(betas 0.9/0.99, weight decay 0.1 on matrices), 100 warmup iterations, cosine decay to 1e-4 at
iteration 2000 (lr_decay_iters = max_iters), gradient clipping at 1.0, the 65-character
vocabulary and nanoGPT's 90/10 train/validation split. nanoGPT reports a validation loss of
1.8857 at iteration 2000 (its README quotes "1.88").

Differences, stated: the archsearch model (conf/arch/baby_gpt.yaml) uses RoPE and bias-free
LayerNorm/linears where nanoGPT's GPT uses learned absolute positions (and bias=False too in
its default config); the trainer evaluates on 2,400 fixed, evenly spread validation windows
(= nanoGPT's 200 eval iterations x batch 12) instead of 200 random batches; the plain loop uses
nanoGPT's own `estimate_loss` (200 random batches). The README's CPU command uses
--eval_iters=20; we use 200 for a less noisy figure.

Prints a table and saves benchmarks/results/bench_trainer_baby_gpt.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from archsearch.arch import load_arch
from archsearch.models import build_model
from archsearch.trainers.data import load_corpus
from archsearch.trainers.trial import TrainConfig, make_optimizer, run_trial

NANOGPT_VAL_LOSS = 1.8857
ROOT = Path(__file__).resolve().parent
DEFAULT_DATA = ROOT.parent.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"

BATCH, BLOCK, LR, MIN_LR, WARMUP = 12, 64, 1e-3, 1e-4, 100
EVAL_ITERS = 200


def trainer_config(data: str, iters: int, threads: int, cache: str) -> TrainConfig:
    return TrainConfig(
        budget=f"steps:{iters}",
        batch_size=BATCH,
        seq_len=BLOCK,
        lr=LR,
        min_lr=MIN_LR,
        warmup=min(1.0, WARMUP / iters),
        schedule="cosine",
        weight_decay=0.1,
        beta1=0.9,
        beta2=0.99,
        grad_clip=1.0,
        threads=threads,
        seed=1337,
        data=(data,),
        tokenizer="char",
        val_fraction=0.1,
        cache_dir=cache,
        eval_at=(0.25, 0.5, 0.75, 1.0),
        eval_batches=EVAL_ITERS,
        log_every=50,
    )


def nanogpt_lr(it: int, iters: int) -> float:
    """nanoGPT's get_lr: linear warmup, then cosine from LR to MIN_LR at lr_decay_iters."""
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    ratio = (it - WARMUP) / (iters - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def plain_loop(
    arch, train: np.ndarray, val: np.ndarray, iters: int, threads: int, evaluate: bool = True
) -> dict:
    """nanoGPT's train.py reduced to its loop, training the same archsearch model."""
    torch.set_num_threads(threads)
    torch.manual_seed(1337)
    model = build_model(arch)
    cfg = trainer_config("unused", iters, threads, "unused")
    opt = make_optimizer(model, cfg)  # the same AdamW grouping as nanoGPT's configure_optimizers
    train_t, val_t = (
        torch.from_numpy(train.astype(np.int64)),
        torch.from_numpy(val.astype(np.int64)),
    )

    def get_batch(split: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(split) - BLOCK, (BATCH,))
        x = torch.stack([split[i : i + BLOCK] for i in ix])
        y = torch.stack([split[i + 1 : i + 1 + BLOCK] for i in ix])
        return x, y

    @torch.no_grad()
    def estimate_loss(split: torch.Tensor) -> float:
        model.eval()
        losses = [model(*get_batch(split))[1].item() for _ in range(EVAL_ITERS)]
        model.train()
        return float(np.mean(losses))

    train_s = 0.0
    start = time.perf_counter()
    for it in range(iters):
        for group in opt.param_groups:
            group["lr"] = nanogpt_lr(it, iters)
        x, y = get_batch(train_t)
        t0 = time.perf_counter()
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        train_s += time.perf_counter() - t0
    wall = time.perf_counter() - start
    return {
        "val_loss": estimate_loss(val_t) if evaluate else None,
        "train_loss_estimate": estimate_loss(train_t) if evaluate else None,
        "train_s": train_s,
        "wall_s": wall,
        "tokens_per_s": iters * BATCH * BLOCK / train_s,
    }


def interleaved_speed(arch, cfg: TrainConfig, corpus, steps: int, repeats: int) -> dict:
    """Tokens/s of the trainer and of the plain loop, alternating short runs so that both see
    the same background load; medians of `repeats`."""
    trainer, plain = [], []
    short = cfg.replace(budget=f"steps:{steps}", eval_at=(1.0,), eval_batches=1)
    train, val = np.asarray(corpus.train), np.asarray(corpus.val)
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            trainer.append(run_trial(arch, short, run_dir=d).tokens_per_s)
        plain.append(
            plain_loop(arch, train, val, steps, cfg.threads, evaluate=False)["tokens_per_s"]
        )
    return {
        "steps_per_run": steps,
        "repeats": repeats,
        "trainer_tokens_per_s": trainer,
        "plain_tokens_per_s": plain,
        "trainer_median": statistics.median(trainer),
        "plain_median": statistics.median(plain),
        "ratio_trainer_over_plain": statistics.median(trainer) / statistics.median(plain),
    }


def startup_seconds(arch, cfg: TrainConfig, repeats: int = 5) -> float:
    """Median time of a one-step trial on a warm cache: opening the memory-mapped corpus,
    building the model and optimizer, one step, one small evaluation."""
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            tiny = cfg.replace(budget="steps:1", eval_at=(1.0,), eval_batches=1)
            t0 = time.perf_counter()
            run_trial(arch, tiny, run_dir=d)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--speed-steps", type=int, default=150)
    ap.add_argument("--speed-repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_trainer_baby_gpt.json"))
    args = ap.parse_args()
    arch = load_arch("baby_gpt")
    cache = tempfile.mkdtemp(prefix="archsearch-bench-")
    cfg = trainer_config(args.data, args.iters, args.threads, cache)
    corpus = load_corpus(cfg.data, tokenizer="char", val_fraction=0.1, cache_dir=cache)
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory() as run_dir:
        result = run_trial(arch, cfg, run_dir=run_dir)
    plain = plain_loop(
        arch, np.asarray(corpus.train), np.asarray(corpus.val), args.iters, args.threads
    )
    startup = startup_seconds(arch, cfg)
    speed = interleaved_speed(arch, cfg, corpus, args.speed_steps, args.speed_repeats)

    report = {
        "benchmark": "nanoGPT baby GPT on Tiny Shakespeare characters",
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": args.threads,
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "recipe": {
            "iters": args.iters,
            "batch": BATCH,
            "block": BLOCK,
            "lr": LR,
            "min_lr": MIN_LR,
            "warmup_iters": WARMUP,
            "betas": [0.9, 0.99],
            "weight_decay": 0.1,
            "grad_clip": 1.0,
            "eval_windows": EVAL_ITERS * BATCH,
            "vocab": corpus.vocab_size,
            "train_tokens": int(corpus.meta["train_tokens"]),
            "val_tokens": int(corpus.meta["val_tokens"]),
        },
        "nanogpt_reported_val_loss": NANOGPT_VAL_LOSS,
        "archsearch_trainer": {
            "status": result.status,
            "val_loss": result.metrics.get("val_loss"),
            "evals": [{k: e[k] for k in ("fraction", "step", "val_loss")} for e in result.evals],
            "n_params": result.n_params,
            "train_s": result.train_s,
            "wall_s": result.wall_s,
            "tokens_per_s": result.tokens_per_s,
            "peak_rss_bytes": result.peak_rss_bytes,
            "startup_s_median": startup,
        },
        "plain_pytorch_loop": plain,
        "trainer_vs_plain_tokens_per_s_full_runs": result.tokens_per_s / plain["tokens_per_s"],
        "interleaved_speed": speed,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    t, p = report["archsearch_trainer"], plain
    print(f"baby GPT, {args.iters} iters, batch {BATCH} x block {BLOCK}, {args.threads} threads")
    print(f"{'':22} {'val loss':>9} {'train s':>8} {'wall s':>8} {'tokens/s':>9}")
    print(f"{'nanoGPT (reported)':22} {NANOGPT_VAL_LOSS:>9.4f}")
    print(
        f"{'archsearch trainer':22} {t['val_loss']:>9.4f} {t['train_s']:>8.1f} "
        f"{t['wall_s']:>8.1f} {t['tokens_per_s']:>9.0f}"
    )
    print(
        f"{'plain PyTorch loop':22} {p['val_loss']:>9.4f} {p['train_s']:>8.1f} "
        f"{p['wall_s']:>8.1f} {p['tokens_per_s']:>9.0f}"
    )
    print(
        f"interleaved {args.speed_repeats} x {args.speed_steps} steps, median tokens/s: trainer "
        f"{speed['trainer_median']:.0f}, plain {speed['plain_median']:.0f} "
        f"(ratio {speed['ratio_trainer_over_plain']:.3f})"
    )
    print(f"trial start-up on a warm cache (median of 5): {startup:.2f} s")
    print(f"load average before/after: {load_before} / {report['machine']['loadavg_after']}")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
