"""Accuracy of the latency model on this CPU: predicted vs measured TTFT and decode ms/token.

Over 40 architectures spanning every mixer family (MHA, GQA, MQA, MLA with and without query
compression, the eight linear families, MCSD, hybrids, MoE), widths 128-768 and depths 2-8,
the real PyTorch models are timed here (medians of repeats at a fixed thread count, in
`torch.inference_mode`): the prefill of a 256-token prompt (time to first token) and one decode
step at context 512. The same quantities are predicted by the cost model with the `local`
device profile (`archsearch calibrate` measures it; run it first, with the same threads).
Reported: Kendall's tau (ranking) and the mean absolute percentage error, per quantity.

    archsearch calibrate threads=1 && python benchmarks/bench_latency_accuracy.py --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import kendalltau

from archsearch.arch import (
    LINEAR_FAMILIES,
    ArchConfig,
    AttentionConfig,
    FFNConfig,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
    MoEConfig,
)
from archsearch.cost import columns, model
from archsearch.cost.devices import load_device

PROMPT, CONTEXT = 256, 512


def kinds(d: int) -> dict[str, dict]:
    heads = max(1, d // 64)
    out = {
        "mha": dict(attention=AttentionConfig(kind="mha", n_heads=heads)),
        "gqa": dict(attention=AttentionConfig(n_heads=heads, n_kv_heads=2)),
        "mqa": dict(attention=AttentionConfig(kind="mqa", n_heads=heads)),
        "mla": dict(
            attention=AttentionConfig(kind="mla", n_heads=heads, kv_rank=d // 4, rope_dim=32)
        ),
        "mla_q": dict(
            attention=AttentionConfig(
                kind="mla", n_heads=heads, kv_rank=d // 4, q_rank=d // 2, rope_dim=32
            )
        ),
        "mcsd": dict(layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=8)),
        "hybrid_gla": dict(
            layers=LayersConfig(pattern="LN"),
            linear=LinearConfig(family="gla"),
            attention=AttentionConfig(n_heads=heads, n_kv_heads=2),
        ),
        "moe": dict(
            attention=AttentionConfig(n_heads=heads, n_kv_heads=2),
            moe=MoEConfig(n_experts=8, top_k=2, d_expert=d),
        ),
    }
    for fam in LINEAR_FAMILIES:
        out[fam] = dict(layers=LayersConfig(mixer="linear"), linear=LinearConfig(family=fam))
    return out


SIZES = ((128, 2), (256, 4), (384, 3), (512, 2), (512, 6), (768, 4), (256, 8))


def architectures() -> list[ArchConfig]:
    """Every kind of mixer at two or three of the sizes (width x depth) of SIZES, assigned in a
    fixed rotation, so that the set spans widths 128-768 and depths 2-8."""
    archs = []
    names = list(kinds(64))
    for i, name in enumerate(names):
        for j in range(2 + (i % 2)):
            d, layers = SIZES[(i + 3 * j) % len(SIZES)]
            sections = kinds(d)[name]
            archs.append(
                ArchConfig(
                    vocab_size=8192,
                    d_model=d,
                    n_layers=layers,
                    max_seq_len=4096,
                    ffn=FFNConfig(kind="swiglu"),
                    name=f"{name}-{layers}x{d}",
                    **sections,
                )
            )
    return archs


def median_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(arch: ArchConfig, repeats: int) -> tuple[float, float]:
    from archsearch.models import build_model

    torch.manual_seed(0)
    m = build_model(arch).eval()
    prompt = torch.randint(0, arch.vocab_size, (1, PROMPT))
    context = torch.randint(0, arch.vocab_size, (1, CONTEXT))
    with torch.inference_mode():
        ttft = median_time(lambda: m.prefill(prompt), repeats)
        _, state = m.prefill(context)
        token = context[:, -1]
        decode = median_time(lambda: m.step(token, state), 4 * repeats)
    return ttft, decode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--device", default="local")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = load_device(args.device)
    rows = []
    for arch in architectures():
        ttft, decode = measure(arch, args.repeats)
        c = columns(arch)
        p_ttft = float(model.ttft_s(c, dev, PROMPT, "fp32")[0])
        p_decode = float(model.decode_s(c, dev, CONTEXT, "fp32")[0])
        rows.append(
            {
                "arch": arch.name,
                "summary": arch.summary(),
                "ttft_ms": 1e3 * ttft,
                "ttft_pred_ms": 1e3 * p_ttft,
                "decode_ms": 1e3 * decode,
                "decode_pred_ms": 1e3 * p_decode,
            }
        )
        print(
            f"{arch.name:22s} TTFT {1e3 * ttft:8.2f} ms (pred {1e3 * p_ttft:8.2f})   "
            f"decode {1e3 * decode:7.3f} ms (pred {1e3 * p_decode:7.3f})",
            flush=True,
        )
    summary = {}
    for q in ("ttft", "decode"):
        meas = np.array([r[f"{q}_ms"] for r in rows])
        pred = np.array([r[f"{q}_pred_ms"] for r in rows])
        tau = kendalltau(meas, pred).statistic
        mape = float(np.mean(np.abs(pred - meas) / meas) * 100)
        summary[q] = {"kendall_tau": float(tau), "mape_percent": mape}
        print(f"{q}: Kendall tau {tau:.3f}, MAPE {mape:.1f}% over {len(rows)} architectures")
    out = Path(__file__).parent / "results" / "latency_accuracy.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "threads": args.threads,
                "device": args.device,
                "prompt": PROMPT,
                "context": CONTEXT,
                "summary": summary,
                "rows": rows,
            },
            indent=2,
        )
    )
    print(f"saved {out}")


if __name__ == "__main__":
    main()
