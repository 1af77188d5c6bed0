"""Which GEMM path should a mixture of experts' routed experts run on? The MoE layer with its
routed experts on `F.linear` (what `models.moe.MoE` does: their row counts change every call)
against the same layer with them on oneDNN (`models.gemm.Linear`'s own rule: oneDNN from
`MIN_ROWS` rows), side by side in one process.

Two measurements, each the least over its rounds, the two paths alternating:

- **forward**: one MoE layer over N tokens (a prefill, inference mode), a fresh input on every
  call, so that routing gives each expert row counts it has not seen: oneDNN's kernel builds
  for new shapes are in its time;
- **train step**: a small MoE language model's forward, backward and AdamW step.

The answer depends on the processor: oneDNN has AVX-512 kernels where MKL (behind `F.linear`)
takes an AVX2 path on AMD CPUs, and on a processor without AVX-512 both run AVX2 and oneDNN's
kernel builds for new row counts are left to pay. The result records the processor
(`cost.devices.processor`: its vector extension and id) and torch's CPU capability.

    python benchmarks/bench_moe_experts.py --out benchmarks/results/moe_experts.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from archsearch.arch import ArchConfig
from archsearch.cost.devices import processor
from archsearch.models import build_model
from archsearch.models.gemm import Linear
from archsearch.models.moe import MoE

VOCAB = 4096
# (d_model, experts, top-k, tokens, expert width / d): held-out-size prefills down to a small one
FORWARD = [
    (896, 8, 2, 1536, 1.0),
    (768, 8, 2, 768, 1.0),
    (512, 8, 2, 512, 1.0),
    (256, 8, 2, 256, 1.0),
    (512, 16, 1, 64, 0.5),
]
# (d_model, experts, top-k, batch, sequence): four layers
TRAIN = [(256, 8, 2, 16, 256), (512, 8, 2, 8, 512)]


def arch(d: int, experts: int, top_k: int, expert_width: float, layers: int = 1) -> ArchConfig:
    return ArchConfig.from_dict(
        {
            "name": "moe",
            "vocab_size": VOCAB,
            "d_model": d,
            "n_layers": layers,
            "max_seq_len": 1024,
            "attention": {"n_heads": max(1, d // 64)},
            "moe": {"n_experts": experts, "top_k": top_k, "d_expert": int(expert_width * d)},
        }
    ).resolved()


def route_on(model: torch.nn.Module, onednn: bool) -> None:
    """Put every routed expert's linear layers on oneDNN (True) or F.linear (False)."""
    for moe in (m for m in model.modules() if isinstance(m, MoE)):
        for layer in moe.experts.modules():
            if isinstance(layer, Linear):
                layer.onednn = onednn


def forward_ms(d, experts, top_k, tokens, width, rounds: int, calls: int) -> dict[str, float]:
    torch.manual_seed(0)
    layer = MoE(arch(d, experts, top_k, width)).eval()
    best = {"f_linear": float("inf"), "onednn": float("inf")}
    for _ in range(rounds):
        for name in best:
            route_on(layer, name == "onednn")
            xs = [torch.randn(tokens, d) for _ in range(calls)]  # new row counts each call
            with torch.inference_mode():
                start = time.perf_counter()
                for x in xs:
                    layer(x)
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e3)
    return best


def train_ms(d, experts, top_k, batch, seq, rounds: int, steps: int) -> dict[str, float]:
    torch.manual_seed(0)
    model = build_model(arch(d, experts, top_k, 1.0, layers=4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    best = {"f_linear": float("inf"), "onednn": float("inf")}
    for _ in range(rounds):
        for name in best:
            route_on(model, name == "onednn")
            for _ in range(steps):
                idx = torch.randint(0, VOCAB, (batch, seq + 1))
                start = time.perf_counter()
                _, loss = model(idx[:, :-1], idx[:, 1:])  # with the MoE aux loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (forward)")
    parser.add_argument("--train-threads", type=int, default=2, help="torch threads (train)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/moe_experts.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    torch.set_num_threads(args.threads)
    for d, e, k, n, w in FORWARD:
        ms = forward_ms(d, e, k, n, w, args.rounds, calls=8)
        rows.append({"kind": "forward", "d": d, "E": e, "topk": k, "tokens": n, "mult": w, **ms})
    torch.set_num_threads(args.train_threads)
    for d, e, k, b, t in TRAIN:
        ms = train_ms(d, e, k, b, t, args.rounds, steps=3)
        rows.append({"kind": "train step", "d": d, "E": e, "topk": k, "B": b, "T": t, **ms})
    for r in rows:
        r["onednn_over_f_linear"] = r["onednn"] / r["f_linear"]
        shown = ("kind", "f_linear", "onednn", "onednn_over_f_linear")
        shape = ", ".join(f"{k} {r[k]}" for k in r if k not in shown)
        print(
            f"{r['kind']:10s} {shape}: F.linear {r['f_linear']:8.2f} ms, "
            f"oneDNN {r['onednn']:8.2f} ms (x{r['onednn_over_f_linear']:.2f})",
            flush=True,
        )
    out = {
        "machine": f"{platform.processor() or platform.machine()} {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}",
        # which kernels MKL and oneDNN run: the answer differs between AVX-512 and AVX2
        "processor": processor(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": {"forward": args.threads, "train": args.train_threads},
        "load_average_before": load_before,
        "rounds": args.rounds,
        "rows": rows,
        "ratio": {
            kind: [r["onednn_over_f_linear"] for r in rows if r["kind"] == kind]
            for kind in ("forward", "train step")
        },
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
