"""The kernel catalogue: the units of a model whose time on a device is a function of their shape.

A kernel is what a runtime dispatches as one unit, as the models run it ([nn-Meter]'s "kernel"):

- `gemm`: one linear layer, x [m, k] @ W [n, k]^T (`archsearch.models.gemm`);
- `norm`, `residual`, `embedding`: a norm, a residual add, the token lookup over N tokens;
- `ffn`, `moe`: a whole channel mixer over N tokens (its GEMMs, activation, routing);
- `<mixer>.forward` and `<mixer>.step` for every sequence mixer (`gqa`, `mla`, each linear
  family, `mcsd`): the real module's forward over T tokens of B sequences from an empty state,
  and its recurrent / cached step after a context.

Per kernel, its **features** (log2 of its sizes, what its learned correction reads) and its
**work** (operators launched, fp32 bytes moved, FLOPs, 1: what its learned roofline weighs),
both read off the cost model's own ops (`archsearch.cost`), and its **resident** bytes (weights
and decode state it reads again on every call: the stalls it meets timed alone).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from archsearch.arch import LINEAR_FAMILIES
from archsearch.cost.attention import attention_ops, mla_ops
from archsearch.cost.ffn import dense_ffn_ops, moe_ops
from archsearch.cost.linear import linear_mixer_ops
from archsearch.cost.mcsd import mcsd_ops
from archsearch.cost.ops import Columns, Op, Phase

__all__ = [
    "FP32",
    "KERNELS",
    "PHASES",
    "features",
    "gemm_features",
    "gemm_work",
    "kernel_ops",
    "module_kernel",
    "resident",
    "work",
]

FP32 = 4.0  # bytes per element: kernels are timed in fp32
PHASES = ("forward", "step")
SEQUENCE_MIXERS = ("gqa", "mla", *LINEAR_FAMILIES, "mcsd")
_OPS = {
    "gqa": attention_ops,
    "mla": mla_ops,
    "mcsd": mcsd_ops,
    "ffn": dense_ffn_ops,
    "moe": moe_ops,
    **dict.fromkeys(LINEAR_FAMILIES, linear_mixer_ops),
}
_ELEMENTWISE = {"norm": 2.0, "residual": 3.0, "embedding": 2.0}  # elements per token and width


def _log2(x) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1.0))


def _phase(c: Columns, p: Phase, attends: bool) -> dict[str, np.ndarray]:
    """The phase's features: T (a forward), or the keys a step attends to (the window caps
    them), and B."""
    batch = {"log2_B": _log2(np.full(c.n, p.B))}
    if p.kind == "forward":
        return {"log2_T": _log2(np.full(c.n, p.T)), **batch}
    keys = np.full(c.n, p.n0 + 1.0)
    keys = np.where(c.W > 0, np.minimum(keys, c.W), keys)
    return {"log2_ctx": _log2(keys), **batch} if attends else batch


def _gqa(c: Columns, p: Phase) -> dict:
    heads = {"log2_d": _log2(c.d), "log2_H": _log2(c.H), "log2_G": _log2(c.G)}
    return {**heads, "log2_dh": _log2(c.dh), **_phase(c, p, True)}


def _mla(c: Columns, p: Phase) -> dict:
    sizes = (("d", c.d), ("H", c.H), ("dh", c.dh), ("dv", c.dv), ("dc", c.dc))
    ranks = {"log2_1+dq": _log2(1 + c.dq), "log2_1+dr": _log2(1 + c.dr)}
    return {**{f"log2_{k}": _log2(v) for k, v in sizes}, **ranks, **_phase(c, p, True)}


def _linear(c: Columns, p: Phase) -> dict:
    sizes = {"log2_d": _log2(c.d), "log2_H": _log2(c.lH), "log2_dk": _log2(c.dk)}
    rest = {"log2_dv": _log2(c.ldv), "gate": c.gate, "log2_1+R": _log2(1 + c.R)}
    return {**sizes, **rest, "log2_1+K": _log2(1 + c.K), **_phase(c, p, False)}


def _mcsd(c: Columns, p: Phase) -> dict:
    return {"log2_d": _log2(c.d), "log2_C": _log2(c.C), **_phase(c, p, False)}


def _tokens(c: Columns, p: Phase) -> dict:
    return {"log2_N": _log2(np.full(c.n, p.tokens)), "log2_d": _log2(c.d)}


def _ffn(c: Columns, p: Phase) -> dict:
    return {**_tokens(c, p), "log2_F": _log2(c.F), "gated": c.gated}


def _moe(c: Columns, p: Phase) -> dict:
    experts = {"log2_Fe": _log2(c.Fe), "log2_E": _log2(c.E), "topk": c.topk}
    return {**_tokens(c, p), **experts, "log2_1+S": _log2(1 + c.S)}


Features = Callable[[Columns, Phase], dict]
_MIXERS: dict[str, Features] = {"gqa": _gqa, "mla": _mla, "mcsd": _mcsd}
_MIXERS.update(dict.fromkeys(LINEAR_FAMILIES, _linear))
_FEATURES: dict[str, Features] = {"norm": _tokens, "residual": _tokens, "embedding": _tokens}
_FEATURES.update(ffn=_ffn, moe=_moe)
_FEATURES.update({f"{m}.{kind}": fn for m, fn in _MIXERS.items() for kind in PHASES})


def _names(fn: Features, kernel: str) -> tuple[str, ...]:
    probe = Columns(**{k: np.ones(1) for k in Columns.__dataclass_fields__})
    return tuple(fn(probe, Phase(kernel.rpartition(".")[2] if "." in kernel else "forward", 1.0)))


# kernel name -> its feature names, in column order
KERNELS: dict[str, tuple[str, ...]] = {
    "gemm": ("log2_m", "log2_k", "log2_n"),
    **{k: _names(fn, k) for k, fn in _FEATURES.items()},
}


def features(kernel: str, c: Columns, p: Phase) -> np.ndarray:
    """The feature rows [c.n, len(KERNELS[kernel])] of a (non-GEMM) kernel."""
    cols = _FEATURES[kernel](c, p).values()
    return np.column_stack([np.broadcast_to(np.asarray(v, dtype=np.float64), (c.n,)) for v in cols])


def gemm_features(m, k, n) -> np.ndarray:
    """[rows, 3] log2 (m, k, n), a scalar broadcast over the others."""
    return np.column_stack(np.broadcast_arrays(_log2(m), _log2(k), _log2(n)))


def module_kernel(fn, c: Columns, p: Phase) -> str | None:
    """The kernel a module of `counts.block_modules` runs as on table `c` (one group: one
    family), or None (a plugin's traced module)."""
    if fn is linear_mixer_ops:
        return f"{LINEAR_FAMILIES[int(c.fam[0])]}.{p.kind}"
    named = {dense_ffn_ops: "ffn", moe_ops: "moe"}.get(fn)
    if named is not None:
        return named
    mixer = {attention_ops: "gqa", mla_ops: "mla", mcsd_ops: "mcsd"}.get(fn)
    return None if mixer is None else f"{mixer}.{p.kind}"


def kernel_ops(kernel: str, c: Columns, p: Phase) -> list[Op]:
    """A kernel's ops: its module's, or one norm / residual add / embedding lookup over N tokens
    of width d (one operator each). An attention step also writes its cache anew (`torch.cat`
    in `archsearch.models`), traffic the ideal kernel's ops do not count but its time grows
    with beyond the contexts calibration timed."""
    module = kernel.partition(".")[0]
    if module in _ELEMENTWISE:
        return [Op(kernel, acts=_ELEMENTWISE[module] * p.tokens * c.d, launches=1.0)]
    ops = _OPS[module](c, p)
    keys = np.where(c.W > 0, np.minimum(p.n0 + 1, c.W), p.n0 + 1)
    if kernel == "gqa.step":
        ops.append(Op("attn.cache_copy", acts=p.B * 2 * c.G * c.dh * keys))
    elif kernel == "mla.step":
        ops.append(Op("mla.cache_copy", acts=p.B * keys * (c.dc + c.dr)))
    return ops


def work(kernel: str, c: Columns, p: Phase) -> np.ndarray:
    """The work terms [c.n, 4] of a (non-GEMM) kernel: operators launched, fp32 bytes moved
    (weights, activations, state), FLOPs, and 1 (the call)."""
    out = np.zeros((c.n, 4))
    out[:, 3] = 1.0
    for op in kernel_ops(kernel, c, p):
        out[:, 0] += np.asarray(op.launches, dtype=np.float64)
        out[:, 1] += FP32 * (np.asarray(op.weights, dtype=np.float64) + op.acts + op.state)
        out[:, 2] += np.asarray(op.flops, dtype=np.float64) + op.extra_flops
    return out


def gemm_work(m, k, n) -> np.ndarray:
    """The work terms [rows, 4] (launches, bytes, FLOPs, 1) of x [m, k] @ W [n, k]^T."""
    m, k, n = np.broadcast_arrays(*(np.maximum(np.asarray(v, dtype=float), 1.0) for v in (m, k, n)))
    ones = np.ones(m.shape)
    return np.column_stack([ones, FP32 * (m * k + k * n + m * n), 2.0 * m * k * n, ones])


def resident(kernel: str, c: Columns, p: Phase) -> np.ndarray:
    """fp32 bytes a kernel reads again on every call: its weights and decode state."""
    out = np.zeros(c.n)
    for op in kernel_ops(kernel, c, p):
        out = out + FP32 * (np.asarray(op.weights, dtype=np.float64) + op.state)
    return out
