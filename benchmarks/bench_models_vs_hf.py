"""Training throughput of archsearch's Llama-style GQA model vs Hugging Face `LlamaForCausalLM`.

The archsearch model runs its GEMMs on oneDNN (`archsearch.models.gemm`); the same model with
its GEMMs on PyTorch's default F.linear (MKL) is timed too, to show where the speed comes from.
Both models have identical shapes (vocab, width, depth, heads, KV heads, SwiGLU width, tied
embeddings, RoPE base, RMSNorm eps). Before timing, the script copies the HF weights into the
archsearch model and checks that both compute the same logits, so the comparison is between
two implementations of one function. Timing: fp32 on CPU with a fixed number of threads; a step
is forward + cross-entropy + backward (no optimiser); the three runs alternate step by step so
that a change of machine load hits all of them; the figure is the median over repeats and the
ratios are of the medians (the ratio of the fastest steps is reported too). The HF model is
built offline from a LlamaConfig (no download), with its SDPA attention.

    python benchmarks/bench_models_vs_hf.py [--threads 2] [--repeats 12] [--batch 8] [--seq 256]

Prints a table and saves benchmarks/results/models_vs_hf.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from archsearch.arch import ArchConfig
from archsearch.models import build_model, gemm

RESULTS = Path(__file__).resolve().parent / "results"


def configs(args):
    arch = ArchConfig.from_dict(
        {
            "name": "llama_style_bench",
            "vocab_size": args.vocab,
            "d_model": args.d_model,
            "n_layers": args.layers,
            "max_seq_len": max(args.seq, 256),
            "norm": "rmsnorm",
            "norm_eps": 1e-5,
            "tie_embeddings": True,
            "layers": {"mixer": "attention"},
            "attention": {
                "kind": "gqa",
                "n_heads": args.heads,
                "n_kv_heads": args.kv_heads,
                "rope_theta": 10000.0,
            },
            "ffn": {"kind": "swiglu", "d_ffn": args.ffn},
        }
    )
    return arch, llama_config(arch)


def llama_config(arch: ArchConfig):
    """The Hugging Face `LlamaConfig` of a Llama-style GQA architecture: the same vocabulary,
    width, depth, heads, KV heads, head size, SwiGLU width, context, RMSNorm eps, RoPE base and
    tied embeddings; no biases; SDPA attention."""
    from transformers import LlamaConfig

    r = arch.resolved()
    a = r.attention
    return LlamaConfig(
        vocab_size=r.vocab_size,
        hidden_size=r.d_model,
        intermediate_size=r.ffn.d_ffn,
        num_hidden_layers=r.n_layers,
        num_attention_heads=a.n_heads,
        num_key_value_heads=a.n_kv_heads,
        head_dim=a.head_dim,
        max_position_embeddings=r.max_seq_len,
        rms_norm_eps=r.norm_eps,
        rope_theta=a.rope_theta,
        tie_word_embeddings=r.tie_embeddings,
        attention_bias=False,
        mlp_bias=False,
        attn_implementation="sdpa",
    )


@torch.no_grad()
def copy_hf_weights(ours, hf) -> None:
    """Load the HF model's weights into ours (with the fused QKV projection)."""
    ours.wte.weight.copy_(hf.model.embed_tokens.weight)
    ours.norm_f.weight.copy_(hf.model.norm.weight)
    if not ours.arch.tie_embeddings:
        ours.lm_head.weight.copy_(hf.lm_head.weight)
    for block, layer in zip(ours.blocks, hf.model.layers):
        at = layer.self_attn
        block.mixer.qkv.weight.copy_(
            torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight])
        )
        block.mixer.o_proj.weight.copy_(at.o_proj.weight)
        block.ffn.gate.weight.copy_(layer.mlp.gate_proj.weight)
        block.ffn.up.weight.copy_(layer.mlp.up_proj.weight)
        block.ffn.down.weight.copy_(layer.mlp.down_proj.weight)
        block.norm1.weight.copy_(layer.input_layernorm.weight)
        block.norm2.weight.copy_(layer.post_attention_layernorm.weight)


def ours_step(model, idx, targets):
    _, loss = model(idx, targets)
    loss.backward()


def ours_mkl_step(model, idx, targets):
    """The same model with its GEMMs on PyTorch's default path (F.linear, MKL)."""
    gemm.set_enabled(False)
    try:
        ours_step(model, idx, targets)
    finally:
        gemm.set_enabled(True)


def hf_step(model, idx, targets):
    logits = model(input_ids=idx, use_cache=False).logits
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
    loss.backward()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=1408)
    p.add_argument("--out", default=str(RESULTS / "models_vs_hf.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import LlamaForCausalLM

    arch, hf_cfg = configs(args)
    torch.manual_seed(0)
    hf = LlamaForCausalLM(hf_cfg).train()
    ours = build_model(arch).train()
    copy_hf_weights(ours, hf)
    n_ours, n_hf = ours.num_params(), sum(p.numel() for p in hf.parameters())
    assert n_ours == n_hf, (n_ours, n_hf)

    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    targets = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    with torch.no_grad():
        a, _ = ours(idx)
        b = hf(input_ids=idx, use_cache=False).logits
    max_diff = (a - b).abs().max().item()
    assert max_diff < 1e-3, f"the two models disagree: max |logit diff| = {max_diff}"

    load_before = os.getloadavg()
    runs = {
        "archsearch": (ours, ours_step),
        "archsearch_mkl": (ours, ours_mkl_step),
        "transformers": (hf, hf_step),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(args.warmup + args.repeats):
        for name, (model, fn) in runs.items():
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            fn(model, idx, targets)
            dt = time.perf_counter() - t0
            if i >= args.warmup:
                times[name].append(dt)
    tokens = args.batch * args.seq
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "benchmark": "training throughput, forward + backward, fp32",
        "config": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "params": n_ours,
        "tied_embeddings": True,
        "max_abs_logit_diff": max_diff,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
        },
        "seconds_per_step": {k: sorted(v) for k, v in times.items()},
        "median_s": med,
        "tokens_per_s": {k: tokens / v for k, v in med.items()},
        "speedup_vs_transformers": med["transformers"] / med["archsearch"],
        "speedup_of_fastest_steps": min(times["transformers"]) / min(times["archsearch"]),
        "speedup_without_onednn": med["transformers"] / med["archsearch_mkl"],
    }
    print(
        f"config: {arch.summary()}  batch {args.batch} x seq {args.seq}, "
        f"{n_ours / 1e6:.1f}M params, {args.threads} threads"
    )
    print(f"max |logit difference| after copying HF weights: {max_diff:.2e}")
    for k in runs:
        print(f"{k:>15}: median {med[k] * 1e3:8.1f} ms/step  {tokens / med[k]:9.0f} tokens/s")
    print(
        f"fastest steps: {min(times['archsearch']) * 1e3:.1f} vs "
        f"{min(times['transformers']) * 1e3:.1f} ms, "
        f"ratio {result['speedup_of_fastest_steps']:.3f}x"
    )
    print(
        f"archsearch with its GEMMs on MKL (F.linear) / transformers: "
        f"{result['speedup_without_onednn']:.3f}x"
    )
    print(
        f"speedup archsearch / transformers (medians): {result['speedup_vs_transformers']:.3f}x"
        f"  (load avg before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f})"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
