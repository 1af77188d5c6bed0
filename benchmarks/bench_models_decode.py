"""Decode time per token and decode-state bytes at context 256 vs 4096, for every linear mixer
and MCSD (constant: ratio <= 1.1) and for softmax attention (GQA, MLA: growing with context).

For each mixer, a small language model (by default d_model 256, 4 layers, vocabulary 4096,
batch 1) prefills 256 and 4096 random tokens (the chunked/parallel form), then decodes from
both states alternately (one step from the short context, one from the long one, so a change
of machine load hits both), always restarting from the same prefilled state, and the figure is
the median over the steps. fp32, fixed threads. State bytes are `state_nbytes` of the state
after the prefill.

    python benchmarks/bench_models_decode.py [--threads 2] [--steps 60]

Prints a table and saves benchmarks/results/models_decode.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from archsearch.arch import LINEAR_FAMILIES, ArchConfig
from archsearch.models import build_model

RESULTS = Path(__file__).resolve().parent / "results"


def arch_for(name: str, args) -> ArchConfig:
    heads = args.d_model // 64
    data = {
        "name": name,
        "vocab_size": args.vocab,
        "d_model": args.d_model,
        "n_layers": args.layers,
        "max_seq_len": 8192,
        "attention": {"kind": "gqa", "n_heads": heads, "n_kv_heads": max(1, heads // 2)},
        "linear": {"family": "gla", "n_heads": heads},
        "mcsd": {"n_channels": 4},
        "ffn": {"kind": "swiglu"},
    }
    if name == "gqa":
        data["layers"] = {"mixer": "attention"}
    elif name == "mla":
        data["layers"] = {"mixer": "attention"}
        data["attention"] = {
            "kind": "mla",
            "n_heads": heads,
            "kv_rank": args.d_model // 4,
            "rope_dim": 32,
        }
    elif name == "mcsd":
        data["layers"] = {"mixer": "mcsd"}
        data["ffn"] = {"kind": "geglu"}
    else:
        data["layers"] = {"mixer": "linear"}
        data["linear"] = {"family": name, "n_heads": heads}
    return ArchConfig.from_dict(data)


@torch.no_grad()
def measure(name: str, args) -> dict:
    torch.manual_seed(0)
    model = build_model(arch_for(name, args)).eval()
    g = torch.Generator().manual_seed(0)
    states, nbytes = {}, {}
    for ctx in args.contexts:
        _, state = model.prefill(torch.randint(0, args.vocab, (args.batch, ctx), generator=g))
        states[ctx], nbytes[ctx] = state, model.state_nbytes(state)
    token = torch.randint(0, args.vocab, (args.batch,), generator=g)
    times: dict[int, list[float]] = {ctx: [] for ctx in args.contexts}
    for i in range(args.warmup + args.steps):
        for ctx in args.contexts:
            t0 = time.perf_counter()
            model.step(token, states[ctx])
            dt = time.perf_counter() - t0
            if i >= args.warmup:
                times[ctx].append(dt)
    med = {ctx: statistics.median(v) for ctx, v in times.items()}
    lo, hi = args.contexts[0], args.contexts[-1]
    return {
        "summary": model.arch.summary(),
        "params": model.num_params(),
        "ms_per_token": {str(c): med[c] * 1e3 for c in args.contexts},
        "time_ratio": med[hi] / med[lo],
        "state_bytes": {str(c): nbytes[c] for c in args.contexts},
        "state_ratio": nbytes[hi] / nbytes[lo],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--contexts", type=int, nargs=2, default=[256, 4096])
    p.add_argument("--mixers", nargs="*", default=[*LINEAR_FAMILIES, "mcsd", "gqa", "mla"])
    p.add_argument("--out", default=str(RESULTS / "models_decode.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    lo, hi = args.contexts
    results = {}
    print(
        f"{'mixer':>17} {'ms/tok@' + str(lo):>11} {'ms/tok@' + str(hi):>12} {'ratio':>6} "
        f"{'state@' + str(lo):>12} {'state@' + str(hi):>12} {'ratio':>6}"
    )
    for name in args.mixers:
        r = measure(name, args)
        results[name] = r
        ms, sb = r["ms_per_token"], r["state_bytes"]
        print(
            f"{name:>17} {ms[str(lo)]:11.2f} {ms[str(hi)]:12.2f} {r['time_ratio']:6.2f} "
            f"{sb[str(lo)]:12d} {sb[str(hi)]:12d} {r['state_ratio']:6.1f}",
            flush=True,
        )
    out = {
        "benchmark": "decode time per token and state bytes vs context, fp32",
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "torch": torch.__version__,
        "load_avg": os.getloadavg(),
        "results": results,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"saved {path}")


if __name__ == "__main__":
    main()
