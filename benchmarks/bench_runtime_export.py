"""Which mixers run in which deploy runtime, how exactly, and how fast (`archsearch.runtimes`).

Every mixer family (attention MHA/GQA/MQA/MLA, the eight linear families, MCSD, a GLA+GQA
hybrid (`LLLN`), a GQA model with MoE channel mixers) is built at one size and exported to each
runtime: its prefill and its decode step with the state as inputs and outputs (torch.export,
then ONNX, or lowered to XNNPACK for ExecuTorch). For each: whether it exports (else the
one-line reason) and how long that took, the largest |logit difference| against PyTorch eager
over the prompt and `--steps` decode steps with the state carried through the runtime (and the
largest |logit| for scale), and the median prefill time (TTFT) and decode-step time (at context
prompt + steps) in torch eager and in the runtime, at a fixed thread count. Prints a table and
saves benchmarks/results/runtime_export.json.

    python benchmarks/bench_runtime_export.py --threads 1            # on a quiet machine
    python benchmarks/bench_runtime_export.py --quick                # a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from archsearch.arch import LINEAR_FAMILIES, ArchConfig
from archsearch.models import build_model
from archsearch.runtimes import LOGIT_TOLERANCE, RUNTIMES, ExportError, deploy, logit_error

RESULTS = Path(__file__).parent / "results" / "runtime_export.json"


def families(d: int, n_layers: int, vocab: int) -> dict[str, ArchConfig]:
    heads = max(2, d // 64)
    base = {
        "vocab_size": vocab,
        "d_model": d,
        "n_layers": n_layers,
        "max_seq_len": 1024,
        "tie_embeddings": True,
        "ffn": {"kind": "swiglu"},
        "linear": {"n_heads": heads},
        "mcsd": {"n_channels": 8},
    }
    attention = {
        "mha": {"kind": "mha", "n_heads": heads},
        "gqa": {"kind": "gqa", "n_heads": heads, "n_kv_heads": 2},
        "mqa": {"kind": "mqa", "n_heads": heads},
        "mla": {"kind": "mla", "n_heads": heads, "kv_rank": d // 4, "rope_dim": 16},
    }
    specs = {k: {"layers": {"mixer": "attention"}, "attention": a} for k, a in attention.items()}
    for fam in LINEAR_FAMILIES:
        specs[fam] = {"layers": {"mixer": "linear"}, "linear": {"n_heads": heads, "family": fam}}
    specs["mcsd"] = {"layers": {"mixer": "mcsd"}}
    specs["hybrid gla+gqa"] = {
        "layers": {"pattern": "LLLN" if n_layers % 4 == 0 else "LN"},
        "attention": attention["gqa"],
        "linear": {"n_heads": heads, "family": "gla"},
    }
    specs["gqa + moe"] = {
        "layers": {"mixer": "attention"},
        "attention": attention["gqa"],
        "moe": {"n_experts": 8, "top_k": 2, "d_expert": d},
    }
    return {
        name: ArchConfig.from_dict({**base, **spec, "name": name.split()[0]})
        for name, spec in specs.items()
    }


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def timings(model, run, idx: torch.Tensor, steps: int, repeats: int) -> dict[str, float]:
    """Median prefill ms and decode-step ms at context prompt + steps, in `run`."""
    _, state = run.prefill(idx)
    token = idx[:, -1]
    for _ in range(steps):
        _, state = run.step(token, state)
    return {
        "prefill_ms": median_ms(lambda: run.prefill(idx), repeats),
        "decode_ms": median_ms(lambda: run.step(token, state), repeats),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="d_model 64, 2 layers, prompt 16")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.quick:
        args.d_model, args.layers, args.vocab, args.prompt, args.repeats = 64, 2, 256, 16, 3
    torch.set_num_threads(args.threads)
    rows = []
    for name, arch in families(args.d_model, args.layers, args.vocab).items():
        torch.manual_seed(0)
        model = build_model(arch).eval()
        idx = torch.randint(0, arch.vocab_size, (1, args.prompt))
        row = {"mixer": name, "summary": arch.summary()}
        for runtime in RUNTIMES:
            t = time.perf_counter()
            try:
                run = deploy(
                    model,
                    runtime,
                    prompt=args.prompt,
                    max_context=args.prompt + 2 * args.steps + args.repeats + 2,
                    threads=args.threads,
                )
            except ExportError as e:
                row[runtime] = {"exports": False, "reason": str(e)}
                continue
            export_s = time.perf_counter() - t
            diff, scale = logit_error(model, run, idx, args.steps)
            row[runtime] = {
                "exports": True,
                "export_s": export_s,
                "max_abs_logit_diff": diff,
                "max_abs_logit": scale,
                "within_tolerance": diff <= LOGIT_TOLERANCE * scale,
                **timings(model, run, idx, args.steps, args.repeats),
            }
        rows.append(row)
        print(line(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    args.out.write_text(
        json.dumps(
            {
                "settings": settings,
                "torch": torch.__version__,
                "onnxruntime": _version("onnxruntime"),
                "executorch": _version("executorch"),
                "logit_tolerance_relative": LOGIT_TOLERANCE,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"saved {args.out}")


def line(row: dict) -> str:
    parts = [f"{row['mixer']:<24}"]
    for runtime in RUNTIMES:
        r = row[runtime]
        if not r["exports"]:
            parts.append(f"{runtime}: does not export ({r['reason']})")
            continue
        parts.append(
            f"{runtime}: prefill {r['prefill_ms']:.3g} ms, decode {r['decode_ms']:.3g} ms, "
            f"max|dlogit| {r['max_abs_logit_diff']:.1e}"
        )
    return " | ".join(parts)


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main()
