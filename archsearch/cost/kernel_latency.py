"""A model's latency as the sum of its kernels' predicted times (a profile with `kernels`).

The kernels of a model (`archsearch.cost.kernels`) are read off the cost model's own modules
(`counts.block_modules`, multiplicity included): per layer its sequence mixer and channel
mixer, two norms and two residual adds; per model the embedding, the final norm, the LM head
(a `gemm`) and the model-level terms the profile measured (`kernels.Glue`: Python and
bookkeeping per model and per layer, and the memory stalls of a working set larger than the
cache, which a kernel timed alone never sees; fitted to whole models by `archsearch
calibrate`).

A kernel's time is its learned roofline (`work` x the kernel's fitted coefficients: seconds
per launch, byte, FLOP and call) times the learned correction of its shape. The work terms of
a module are summed over its `Op`s in the cost model. A kernel without a fit (one the deploy
runtime cannot run) takes its analytic time instead: the predicted `gemm` time of each linear
layer (m = rows, k, n) and the roofline of every other op at the profile's measured peaks
(FLOPs at the fp32 peak, bytes at the cache bandwidth when they fit the cache, else at the
memory bandwidth), plus its dispatched operators at the measured overhead each; so do the
traced ops of plugins' mixers (`archsearch.plugins`).

Everything is numpy over the candidate table: rows with the same modules are priced together
(`Columns.groups`), and a predictor is evaluated once per distinct shape.
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from archsearch.arch import LINEAR_FAMILIES
from archsearch.cost.attention import attention_ops, mla_ops
from archsearch.cost.counts import (
    block_modules,
    params,
    recurrent_state_elements,
    state_elements,
)
from archsearch.cost.devices import DeviceProfile
from archsearch.cost.ffn import ROUTED, dense_ffn_ops, expert_params, experts_touched, moe_ops
from archsearch.cost.kernels import Kernels, Passes, features, gemm_features
from archsearch.cost.linear import linear_mixer_ops
from archsearch.cost.mcsd import mcsd_ops
from archsearch.cost.ops import Columns, Op, Phase

__all__ = [
    "analytic_seconds",
    "gemm_seconds",
    "gemm_work",
    "kernel_analytic",
    "kernel_seconds",
    "kernel_time",
    "module_kernel",
    "resident",
    "restreamed_bytes",
    "weight_gemms",
    "work",
]

FP32 = 4.0  # bytes per element: the kernels are timed in fp32
# the cost model's ops of each kernel's module
_OPS = {
    "gqa": attention_ops,
    "mla": mla_ops,
    "mcsd": mcsd_ops,
    "ffn": dense_ffn_ops,
    "moe": moe_ops,
    **{f: linear_mixer_ops for f in LINEAR_FAMILIES},
}
_ELEMENTWISE = {"norm": 2.0, "residual": 3.0, "embedding": 2.0}  # elements per token and width


def module_kernel(fn, c: Columns, p: Phase) -> str | None:
    """The kernel a module of `block_modules` runs as on table `c` (one group: one family), or
    None (a plugin's traced module)."""
    if fn is dense_ffn_ops:
        return "ffn"
    if fn is moe_ops:
        return "moe"
    if fn is linear_mixer_ops:
        return f"{LINEAR_FAMILIES[int(c.fam[0])]}.{p.kind}"
    mixer = {attention_ops: "gqa", mla_ops: "mla", mcsd_ops: "mcsd"}.get(fn)
    return None if mixer is None else f"{mixer}.{p.kind}"


def _roofline(device: DeviceProfile, flops, nbytes) -> np.ndarray:
    """max(compute time at the fp32 peak, memory time): at the measured cache bandwidth when
    the bytes fit in the cache the profile models, else at the memory bandwidth."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    bandwidth = device.memory_bandwidth
    if device.cache_capacity > 0 and device.cache_bandwidth > 0:
        bandwidth = np.where(nbytes <= device.cache_capacity, device.cache_bandwidth, bandwidth)
    return np.maximum(np.asarray(flops, dtype=np.float64) / device.peak("fp32"), nbytes / bandwidth)


def gemm_work(m, k, n) -> np.ndarray:
    """The work terms [rows, 4] (launches, bytes, FLOPs, 1) of x [m, k] @ W [n, k]^T."""
    m, k, n = np.broadcast_arrays(
        *(np.maximum(np.asarray(v, dtype=np.float64), 1.0) for v in (m, k, n))
    )
    ones = np.ones(m.shape)
    return np.column_stack([ones, FP32 * (m * k + k * n + m * n), 2.0 * m * k * n, ones])


def gemm_seconds(device: DeviceProfile, kernels: Kernels, m, k, n) -> np.ndarray:
    """Predicted seconds of x [m, k] @ W [n, k]^T."""
    w = gemm_work(m, k, n)
    coef = kernels.bases.get("gemm")
    base = w @ np.asarray(coef) if coef is not None else _roofline(device, w[:, 2], w[:, 1])
    return base * kernels.correction("gemm", gemm_features(m, k, n))


def analytic_seconds(ops: list[Op], device: DeviceProfile, kernels: Kernels, n: int) -> np.ndarray:
    """The analytic time of a module's ops (see the module docstring), per row."""
    total = np.zeros(n)
    for op in ops:
        k = np.asarray(op.k, dtype=np.float64)
        if op.kind == "matmul" and np.any(k > 0):
            rows = np.maximum(np.asarray(op.rows, dtype=np.float64), 1.0)
            width = np.where(k > 0, np.asarray(op.kn, dtype=np.float64) / np.maximum(k, 1.0), 0)
            one = 2.0 * rows * k * width
            copies = np.divide(op.flops, one, out=np.zeros(n), where=one > 0)
            total = total + copies * gemm_seconds(device, kernels, rows, k, width)
        else:
            nbytes = FP32 * (np.asarray(op.weights) + op.acts + op.state)
            total = total + _roofline(device, op.flops + op.extra_flops, nbytes)
        total = total + np.asarray(op.launches) * kernels.dispatch_s
    return total


def _implementation_traffic(kernel: str, c: Columns, p: Phase) -> list[Op]:
    """Memory traffic of how `archsearch.models` runs a decode step beyond the ideal kernel's
    (which the cost model's ops count): the step writes its cache anew (`torch.cat`). Without
    it the analytic time would not grow with the context as the measured one does, beyond the
    contexts calibration timed."""
    if kernel not in ("gqa.step", "mla.step"):
        return []
    m = np.where(c.W > 0, np.minimum(p.n0 + 1, c.W), p.n0 + 1)
    if kernel == "gqa.step":
        return [Op("attn.cache_copy", acts=p.B * 2 * c.G * c.dh * m)]
    return [Op("mla.cache_copy", acts=p.B * m * (c.dc + c.dr))]


def _kernel_ops(kernel: str, c: Columns, p: Phase) -> list[Op]:
    """A kernel's ops: its module's, or one norm / residual add / embedding lookup over N
    tokens of width d (one operator each)."""
    module = kernel.partition(".")[0]
    if module in _ELEMENTWISE:
        ops = [Op(kernel, acts=_ELEMENTWISE[module] * p.tokens * c.d, launches=1.0)]
    else:
        ops = _OPS[module](c, p)
    return ops + _implementation_traffic(kernel, c, p)


def work(kernel: str, c: Columns, p: Phase) -> np.ndarray:
    """The work terms [c.n, 4] of a (non-GEMM) kernel: operators launched, fp32 bytes moved
    (weights, activations, state), FLOPs, and 1 (the call)."""
    out = np.zeros((c.n, 4))
    out[:, 3] = 1.0
    for op in _kernel_ops(kernel, c, p):
        out[:, 0] += np.asarray(op.launches, dtype=np.float64)
        out[:, 1] += FP32 * (np.asarray(op.weights, dtype=np.float64) + op.acts + op.state)
        out[:, 2] += np.asarray(op.flops, dtype=np.float64) + op.extra_flops
    return out


def resident(kernel: str, c: Columns, p: Phase) -> np.ndarray:
    """fp32 bytes a kernel reads again on every call: its weights and decode state (a kernel
    timed alone finds them in the cache while they fit; `kernels.Glue.stalls`)."""
    out = np.zeros(c.n)
    for op in _kernel_ops(kernel, c, p):
        out = out + FP32 * (np.asarray(op.weights, dtype=np.float64) + op.state)
    return out


def kernel_analytic(kernel: str, c: Columns, p: Phase, device: DeviceProfile) -> np.ndarray:
    """The analytic time of a kernel from the device's peaks (see the module docstring)."""
    assert device.kernels is not None
    return analytic_seconds(_kernel_ops(kernel, c, p), device, device.kernels, c.n)


def kernel_time(kernel: str, c: Columns, p: Phase, device: DeviceProfile) -> np.ndarray:
    """Predicted seconds of one call of a kernel, per row of `c`: its learned roofline (its
    analytic time where it has none) times its learned correction."""
    kernels = device.kernels
    assert kernels is not None
    coef = kernels.bases.get(kernel)
    if coef is None:
        base = kernel_analytic(kernel, c, p, device)
    else:
        base = work(kernel, c, p) @ np.asarray(coef)
    return base * kernels.correction(kernel, features(kernel, c, p))


def _group_seconds(
    c: Columns, p: Phase, device: DeviceProfile, lm_head_tokens: float | None
) -> list[tuple[Op, np.ndarray]]:
    kernels = device.kernels
    assert kernels is not None
    out = []
    for category, count, fn in block_modules(c):
        if not np.any(count):
            continue
        kernel = module_kernel(fn, c, p)
        if kernel is None:
            t = analytic_seconds(fn(c, p), device, kernels, c.n)
        else:
            t = kernel_time(kernel, c, p, device)
        out.append((Op(kernel or fn.__name__, category=category), count * t))
    elementwise = (
        ("norm", "norms+residual", 2 * c.L + 1),
        ("residual", "norms+residual", 2 * c.L),
        ("embedding", "embedding", np.ones(c.n)),
    )
    for kernel, category, count in elementwise:
        out.append((Op(kernel, category=category), count * kernel_time(kernel, c, p, device)))
    lm_head = gemm_seconds(device, kernels, _lm_head_rows(p, lm_head_tokens), c.d, c.V)
    out.append((Op("lm_head", category="lm head"), lm_head))
    glue = kernels.glue[p.kind]
    out.append((Op("glue", category="norms+residual"), glue.overhead(c.L) + np.zeros(c.n)))
    nbytes = working_set(c, p)
    stalls = glue.stalls(nbytes, c.L)
    if glue.overlap and p.B > 1:  # on one sequence no GEMM has rows beyond one to hide behind
        stalls = stalls - glue.hidden(nbytes, *weight_gemms(c, p, device, lm_head_tokens))
    if kernels.passes is not None and p.tokens > 1:  # one row: one pass
        stalls = stalls + glue.shares(
            nbytes, restreamed_bytes(c, p, kernels.passes, lm_head_tokens)
        )
    out.append((Op("memory stalls", category="norms+residual"), stalls))
    return out


def _lm_head_rows(p: Phase, lm_head_tokens: float | None) -> float:
    """The LM head's rows: every token of the phase, or `lm_head_tokens` of each sequence."""
    return p.tokens if lm_head_tokens is None else p.B * lm_head_tokens


def weight_gemms(
    c: Columns, p: Phase, device: DeviceProfile, lm_head_tokens: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(extra seconds, fp32 weight bytes) of each GEMM with weights of a phase on B sequences,
    [GEMMs, rows], multiplicity included: its predicted `gemm` time at the phase's rows less at
    those of one sequence, which can hide its weights' stalls (`kernels.Glue.hidden`)."""
    kernels = device.kernels
    assert kernels is not None
    one = Phase(p.kind, p.T, p.n0, 1.0, p.causal)
    extra, nbytes = [], []
    for _, count, fn in block_modules(c):
        if not np.any(count):
            continue
        for op, op1 in zip(fn(c, p), fn(c, one)):
            k = np.asarray(op.k, dtype=np.float64)
            if op.kind != "matmul" or not np.any(k > 0) or not np.any(op.weights):
                continue
            seconds = [analytic_seconds([o], device, kernels, c.n) for o in (op, op1)]
            extra.append(count * (seconds[0] - seconds[1]))
            nbytes.append(count * FP32 * np.asarray(op.weights, dtype=np.float64))
    rows = _lm_head_rows(p, lm_head_tokens)
    extra.append(
        gemm_seconds(device, kernels, rows, c.d, c.V)
        - gemm_seconds(device, kernels, rows / p.B, c.d, c.V)
    )
    nbytes.append(FP32 * c.d * c.V)
    return np.maximum(np.array(extra), 0.0), np.array(nbytes) + np.zeros(c.n)


def restreamed_bytes(
    c: Columns, p: Phase, passes: Passes, lm_head_tokens: float | None = None
) -> np.ndarray:
    """fp32 weight bytes a phase's GEMMs stream beyond their one pass (`kernels.Passes`):
    over every weight GEMM, its extra passes at its rows and weight size x its bytes,
    multiplicity included. Each routed expert runs the tokens routed to it, Binomial(N, k/E)
    of the phase's N under uniform routing (as `ffn.experts_touched`): its extra passes are
    their expectation over that count (at batch 8, top-2 of 8 experts, an expert runs 1 row
    as often as 2, and one row makes one pass)."""
    out = np.zeros(c.n)
    for _, count, fn in block_modules(c):
        if not np.any(count):
            continue
        for op in fn(c, p):
            kn = np.asarray(op.kn, dtype=np.float64)
            if op.kind != "matmul" or not np.any(kn > 0):
                continue
            nbytes = FP32 * kn
            if op.name.startswith(f"{ROUTED}."):  # its weights are counted once elsewhere
                extra = c.E * _routed_passes(c, p.tokens, passes, nbytes)
            else:
                matrices = np.divide(op.weights, kn, out=np.zeros(c.n), where=kn > 0)
                extra = matrices * passes(op.rows, nbytes)
            out = out + count * extra * nbytes
    lm_head = FP32 * c.d * c.V
    return out + passes(_lm_head_rows(p, lm_head_tokens), lm_head) * lm_head


def _routed_passes(c: Columns, tokens: float, passes: Passes, nbytes) -> np.ndarray:
    """An expert's expected extra passes over weights of `nbytes` when `tokens` tokens are
    each routed to k of E experts uniformly: its rows are Binomial(tokens, k/E); counts past
    the table's last row make one pass."""
    q = np.divide(c.topk, c.E, out=np.zeros(c.n), where=c.E > 0)
    N = round(float(tokens))
    out = np.zeros(c.n)
    for n in range(1, min(N, math.ceil(passes.rows[-1])) + 1):
        out = out + math.comb(N, n) * q**n * (1.0 - q) ** (N - n) * passes(n, nbytes)
    return out


def working_set(c: Columns, p: Phase) -> np.ndarray:
    """fp32 bytes a phase moves through memory per call: the active weights (with every routed
    expert the phase's tokens touch: `ffn.experts_touched`) and the decode state it reads (after
    the context for a step, after the prompt for a prefill); a step also writes its recurrent
    and MCSD states back whole (`counts.recurrent_state_elements`), so they count twice there."""
    context = p.n0 if p.kind == "step" else p.n0 + p.T
    routed = c.L * (experts_touched(c, p.tokens) - np.where(c.E > 0, c.topk, 0)) * expert_params(c)
    state = state_elements(c, context, p.B)
    if p.kind == "step":
        state = state + recurrent_state_elements(c, context, p.B)
    return FP32 * (params(c)["active_params"] + routed + state)


def kernel_seconds(
    c: Columns, p: Phase, device: DeviceProfile, *, lm_head_tokens: float | None = None
) -> list[tuple[Op, np.ndarray]]:
    """(kernel, seconds per row) of a phase on a profile with `kernels`, multiplicity included;
    each kernel is an `Op` that carries its name and breakdown category. Each distinct row is
    priced once (a table of a million candidates drawn from a space holds a few thousand)."""
    distinct, inverse = _distinct(c)
    if inverse is not None:
        parts = kernel_seconds(distinct, p, device, lm_head_tokens=lm_head_tokens)
        return [(op, t[inverse]) for op, t in parts]
    groups = c.groups()
    if len(groups) == 1:
        return _group_seconds(c, p, device, lm_head_tokens)
    totals: dict[tuple[str, str], np.ndarray] = {}
    for idx, sub in groups:
        for op, t in _group_seconds(sub, p, device, lm_head_tokens):
            key = (op.name, op.category)
            if key not in totals:
                totals[key] = np.zeros(c.n)
            totals[key][idx] = t
    return [(Op(name, category=category), t) for (name, category), t in totals.items()]


def _distinct(c: Columns) -> tuple[Columns, np.ndarray | None]:
    """(the table of c's distinct rows, the index of each row of c in it), or (c, None) when
    its rows are all distinct; computed once per table."""
    cached = c.__dict__.get("_distinct")
    if cached is None:
        names = [f.name for f in fields(Columns)]
        weights = np.random.default_rng(7).uniform(1.0, 2.0, len(names)) * np.pi
        key = sum(w * getattr(c, k) for w, k in zip(weights, names))
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        cached = (c, None)
        if len(first) < c.n:
            distinct = Columns(**{k: getattr(c, k)[first] for k in names})
            same = all(np.array_equal(getattr(distinct, k)[inverse], getattr(c, k)) for k in names)
            if same:  # else two distinct rows share a key: price every row
                cached = (distinct, inverse.reshape(-1))
        c.__dict__["_distinct"] = cached
    return cached
