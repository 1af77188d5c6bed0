"""The tracing path (what prices plugin mixers) against the analytic formulas, on every built-in.

For every built-in sequence mixer (8 linear families, MHA/GQA/MQA, sliding-window GQA, MLA with
and without query compression, MCSD) and channel mixer (4 FFN kinds), at several widths and
lengths, the per-layer counts of `archsearch.models.tracing` (FlopCounterMode on the meta
device, what `archsearch.cost.traced` uses) are compared with `archsearch.cost`'s formulas:
params, state elements at a context, FLOPs of the training forward, its backward, a prefill
after cached tokens and a decode step; fvcore's FlopCountAnalysis (CPU, JIT trace) is compared on
the training forward at the smallest shape. Errors are relative, |traced - analytic| / analytic,
and the maximum per family and quantity is written to benchmarks/results/traced_vs_analytic.json
(tests/test_plugins.py holds the tracing path to these published errors).

    .venv/bin/python benchmarks/bench_traced_vs_analytic.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from archsearch.arch import (
    FFN_KINDS,
    LINEAR_FAMILIES,
    ArchConfig,
    AttentionConfig,
    FFNConfig,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
)
from archsearch.cost.counts import block_modules, params
from archsearch.cost.ffn import channel_params
from archsearch.cost.ops import Columns, Phase
from archsearch.models import channel_mixer_class, sequence_mixer_class, sequence_mixer_name
from archsearch.models.tracing import fvcore_flops, state_elements, trace

OUT = Path(__file__).parent / "results" / "traced_vs_analytic.json"
WIDTHS = (64, 128, 256)
SHAPES = ((64, 0), (200, 0), (96, 160))  # (T, n0) forward phases
CONTEXTS = (100, 1000)  # decode-step contexts
B = 2


def mixers(d: int) -> dict[str, ArchConfig]:
    base = dict(vocab_size=64, d_model=d, n_layers=1, max_seq_len=4096)
    out = {
        fam: ArchConfig(
            **base, layers=LayersConfig(pattern="L"), linear=LinearConfig(family=fam, n_heads=4)
        )
        for fam in LINEAR_FAMILIES
    }
    out["mha"] = ArchConfig(**base, attention=AttentionConfig(kind="mha", n_heads=4))
    out["gqa"] = ArchConfig(**base, attention=AttentionConfig(kind="gqa", n_heads=4, n_kv_heads=2))
    out["mqa"] = ArchConfig(**base, attention=AttentionConfig(kind="mqa", n_heads=4))
    out["gqa_window"] = ArchConfig(
        **base, attention=AttentionConfig(kind="gqa", n_heads=4, n_kv_heads=2, window=48)
    )
    out["mla"] = ArchConfig(
        **base, attention=AttentionConfig(kind="mla", n_heads=4, kv_rank=d // 4)
    )
    out["mla_q_rank"] = ArchConfig(
        **base, attention=AttentionConfig(kind="mla", n_heads=4, kv_rank=d // 4, q_rank=d // 2)
    )
    out["mcsd"] = ArchConfig(
        **base, layers=LayersConfig(pattern="M"), mcsd=MCSDConfig(n_channels=4)
    )
    return out


def analytic(c: Columns, p: Phase, categories: set[str]) -> tuple[float, float]:
    """(forward, backward) FLOPs of the modules of `categories` (one layer)."""
    fwd = bwd = 0.0
    for category, count, ops in block_modules(c):
        if category in categories and count[0] > 0:
            for op in ops(c, p):
                f = float(np.asarray(op.flops).ravel()[0])
                fwd += f
                bwd += op.backward * f + float(np.asarray(op.backward_extra).ravel()[0])
    return fwd, bwd


def rel(traced: float, want: float) -> float:
    return abs(traced - want) / want if want else abs(traced)


def sequence_errors(name: str, arch: ArchConfig, d: int, errors: dict) -> None:
    r = arch.resolved()
    cls = sequence_mixer_class(sequence_mixer_name(r, r.pattern[0]))
    c = Columns.from_archs([r])
    cats = {"attention", "linear", "mcsd"}
    e = errors.setdefault(name, {})

    def note(key: str, value: float) -> None:
        e[key] = max(e.get(key, 0.0), value)

    def build():
        return cls(r)

    mixer_params = float(params(c)["non_embedding_params"][0]) - float(
        channel_params(c)[0][0] + 3 * d
    )
    for T, n0 in SHAPES:
        p = Phase("forward", T=T, n0=n0, B=B)
        t = trace(build, "forward", T, n0, B, d, backward=n0 == 0)
        fwd, bwd = analytic(c, p, cats)
        note("params", rel(t.params, mixer_params))
        note("forward_flops" if n0 == 0 else "prefill_flops", rel(t.flops, fwd))
        if n0 == 0:
            note("backward_flops", rel(t.backward_flops, bwd))
    for n0 in CONTEXTS:
        t = trace(build, "step", 1, n0, B, d)
        fwd, _ = analytic(c, Phase("step", T=1, n0=n0, B=B), cats)
        note("step_flops", rel(t.flops, fwd))
        from archsearch.cost.counts import state_elements as analytic_state

        want = float(analytic_state(c, n0, B)[0])
        note("state_elements", rel(state_elements(build, n0, B, d), want))
    if d == WIDTHS[0]:
        fwd, _ = analytic(c, Phase("forward", T=SHAPES[0][0], B=B), cats)
        try:
            note("fvcore_forward_flops", rel(fvcore_flops(cls(r), "forward", 64, 0, B, d), fwd))
        except Exception as err:  # fvcore's JIT trace cannot follow every module
            e["fvcore_failed"] = f"{type(err).__name__}: {' '.join(str(err).split())[:120]}"


def channel_errors(kind: str, d: int, errors: dict) -> None:
    arch = ArchConfig(
        vocab_size=64, d_model=d, n_layers=1, attention=AttentionConfig(), ffn=FFNConfig(kind=kind)
    ).resolved()
    cls = channel_mixer_class(kind)
    c = Columns.from_archs([arch])
    e = errors.setdefault(f"ffn:{kind}", {})

    def build():
        return cls(d, arch.ffn.d_ffn)

    for T, _ in SHAPES[:2]:
        t = trace(build, "channel", T, 0, B, d, backward=True)
        fwd, bwd = analytic(c, Phase("forward", T=T, B=B), {"ffn"})
        e["params"] = max(e.get("params", 0.0), rel(t.params, float(channel_params(c)[0][0])))
        e["forward_flops"] = max(e.get("forward_flops", 0.0), rel(t.flops, fwd))
        e["backward_flops"] = max(e.get("backward_flops", 0.0), rel(t.backward_flops, bwd))


def main() -> None:
    t0 = time.perf_counter()
    errors: dict[str, dict[str, float]] = {}
    for d in WIDTHS:
        for name, arch in mixers(d).items():
            sequence_errors(name, arch, d, errors)
        for kind in FFN_KINDS:
            channel_errors(kind, d, errors)
    seconds = time.perf_counter() - t0
    result = {
        "what": "max relative error |traced - analytic| / analytic per built-in mixer and count",
        "widths": list(WIDTHS),
        "forward_shapes_T_n0": [list(s) for s in SHAPES],
        "step_contexts": list(CONTEXTS),
        "batch": B,
        "seconds": round(seconds, 1),
        "errors": errors,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    keys = sorted({k for e in errors.values() for k in e})
    keys = [k for k in keys if k != "fvcore_failed"]
    print(f"{'mixer':<18}" + "".join(f"{k:>16}" for k in keys))
    for name, e in errors.items():
        print(f"{name:<18}" + "".join(f"{e[k]:>16.2e}" if k in e else f"{'-':>16}" for k in keys))
    print(f"{seconds:.1f} s; written {OUT}")


if __name__ == "__main__":
    main()
