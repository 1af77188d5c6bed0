"""Model-level costs: FLOPs/MACs, bytes, peak memory and predicted latency, vectorised.

Conventions that published tables differ on are explicit arguments: `causal` ("full": the
T x n score block as a MATH attention kernel computes it; "half": only the causally visible
pairs), `lm_head` (with or without the output projection), `unit` ("flops" or "macs").

Weights at a precision: fp32 4 bytes, fp16/bf16 2, q8 and q4 in llama.cpp's Q8_0/Q4_0 layout,
blocks of 32 weights with one fp16 scale: 8.5 and 4.5 bits per weight. Norm weights stay fp32.
KV caches and states are 16-bit unless the precision is fp32 (llama.cpp keeps an f16 cache for
quantised weights); `cache_bytes` takes the bit width explicitly ([PLM] eqs. 6-7).

The roofline ([PLM] section 6 and Appendix D: IO time vs compute time) prices a phase per
operation: each op of `counts.model_ops` takes max(FLOPs / (peak x efficiency(rows)),
bytes / (bandwidth x efficiency)), elementwise ops take their memory time, and every op adds a
fixed overhead (`op_seconds`). It is the latency model of the published-fit profiles, and of a
calibrated profile at the precisions its learned predictor does not price;
`archsearch.latency.predict` chooses between them and registers the latency metrics.
`working_set` counts the bytes a phase moves through memory per call.

The cost metrics of `archsearch.metrics` are registered here beside their formulas
(`@evaluator`); the parameter counts are registered in `counts`.
"""

from __future__ import annotations

import numpy as np

from archsearch.cost import traced
from archsearch.cost.counts import model_ops, params, recurrent_state_elements, state_elements
from archsearch.cost.devices import DeviceProfile
from archsearch.cost.evaluate import evaluator
from archsearch.cost.ffn import expert_params, experts_touched
from archsearch.cost.ops import Columns, Op, Phase

WEIGHT_BITS = {"fp32": 32.0, "bf16": 16.0, "fp16": 16.0, "q8": 8.5, "q4": 4.5}
ACT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "q8": 2.0, "q4": 2.0}


def cache_bits(precision: str) -> float:
    return 32.0 if precision == "fp32" else 16.0


def flops(
    c: Columns,
    phase: Phase,
    *,
    lm_head: bool = True,
    unit: str = "flops",
    backward: bool = False,
    extra: bool = False,
) -> np.ndarray:
    """Forward (and optionally backward) FLOPs of a phase, summed over the model per row.

    `extra` adds work a FLOP counter does not see (the delta rule's triangular solves)."""
    total = np.zeros(c.n)
    for count, op in model_ops(c, phase, lm_head=lm_head):
        f = op.flops
        if backward:
            f = f + op.backward * op.flops + op.backward_extra
        if extra:
            f = f + op.extra_flops * (2.0 if backward else 1.0)
        total = total + count * f
    return total / 2.0 if unit == "macs" else total


@evaluator("prefill_flops")
def prefill_flops(c: Columns, tokens: int, batch: float) -> np.ndarray:
    """FLOPs of a prefill of `tokens` tokens (causally visible attention pairs)."""
    return flops(c, Phase("forward", T=tokens, B=batch, causal="half"))


@evaluator("train_flops_per_token")
def train_flops_per_token(c: Columns, context: int) -> np.ndarray:
    """Forward + backward FLOPs per training token at context `context` (causal attention
    counted over visible pairs, LM head included): the unit of FLOPs-matched budgets."""
    p = Phase("forward", T=context, causal="half")
    return flops(c, p, backward=True, extra=True) / context


@evaluator("weight_bytes")
def weight_bytes(c: Columns, precision: str) -> np.ndarray:
    """Parameters at a precision; 1-D parameters (norms, decays) stay 32-bit."""
    p = params(c)["params"]
    small = _vector_params(c)
    return (p - small) * WEIGHT_BITS[precision] / 8.0 + small * 4.0


def _vector_params(c: Columns) -> np.ndarray:
    """Norm weights and other 1-D parameters (kept in fp32 by quantisers)."""
    linear = c.ldv
    if np.any(c.lplug):
        linear = np.where(c.lplug > 0, traced.mixer_vector_params(c), linear)
    return (
        c.L * 2 * c.d
        + c.d
        + c.nN * (c.mla * (c.dc + (c.dq > 0) * c.dq))
        + c.nL * linear
        + c.nM * c.d
    )


@evaluator("cache_bytes")
def cache_bytes(c: Columns, context, bits: float = 16.0, batch: float = 1.0) -> np.ndarray:
    return state_elements(c, context, batch) * bits / 8.0


@evaluator("memory_bytes")
def memory_bytes(c: Columns, context, precision: str, batch: float = 1.0) -> np.ndarray:
    """Peak inference memory: weights + cache at `context` + the prefill working set (the
    widest per-token activation of a layer, for every token of the context) + one row of
    logits per sequence in fp32."""
    widest = np.maximum.reduce(
        [
            4 * c.d,
            (1 + c.gated) * np.maximum(c.F, c.Fe) + c.d,
            c.H * (c.dh + c.dr) + 2 * c.d,
            c.lH * (2 * c.dk + c.ldv) + c.d,
        ]
    )
    acts = batch * np.asarray(context, dtype=np.float64) * widest * ACT_BYTES[precision]
    return (
        weight_bytes(c, precision)
        + cache_bytes(c, context, cache_bits(precision), batch)
        + acts
        + batch * c.V * 4.0
    )


# ---- latency ----------------------------------------------------------------------------------


def op_seconds(
    c: Columns,
    phase: Phase,
    device: DeviceProfile,
    precision: str,
    *,
    lm_head_tokens: float | None = None,
) -> list[tuple[Op, np.ndarray]]:
    """Roofline time of every op of a phase (multiplicity included), with the op.
    `lm_head_tokens` limits the LM head to that many tokens per sequence (a prefill that needs
    only the last token's logits).

    Matmuls with weights run at peak x efficiency(rows); other kernels
    (attention, scans, norms) over many tokens at `vector` x their roofline; a decode step's
    softmax attention (`attn.sdpa`, one query per sequence) at the rate the profile measured
    for it (`Efficiency.attention_step`) where it gives one; the memory side
    runs at bandwidth x efficiency, or at the measured cache bandwidth when every weight the
    phase reads fits in the last-level cache (small models decoding on a CPU)."""
    eff = device.eff(precision)
    peak_w = device.peak(precision)
    peak_a = device.peak("fp32" if precision == "fp32" else "fp16")
    wb, ab, sb = WEIGHT_BITS[precision] / 8.0, ACT_BYTES[precision], cache_bits(precision) / 8.0
    ops = _cached_ops(c, phase)
    bw = np.full(c.n, device.memory_bandwidth * eff.bandwidth)
    if device.cache_capacity > 0:
        weight_bytes = sum(count * op.weights for count, op in ops) * wb
        bw = np.where(weight_bytes <= device.cache_capacity, device.cache_bandwidth, bw)
    # non-matmul kernels over many tokens run below their roofline; on one decoded token their
    # cost is the per-operator overhead
    vector = eff.vector if phase.kind == "forward" else 1.0
    out = []
    for count, op in ops:
        flops, acts, rows = op.flops, op.acts, op.rows
        if op.name == "lm_head" and lm_head_tokens is not None:
            scale = phase.B * lm_head_tokens / phase.tokens
            flops, acts, rows = flops * scale, acts * scale, phase.B * lm_head_tokens
        mem = (op.weights * wb + acts * ab + op.state * sb) / bw
        if op.kind == "elementwise":
            t = mem / vector
        else:
            rows = np.maximum(np.asarray(rows, dtype=np.float64), 1.0)
            if op.name == "attn.sdpa" and phase.kind == "step" and eff.attention_step:
                rate = peak_a * eff.attention_step  # measured: one query per sequence
            else:
                peak = peak_w if op.kind == "matmul" else peak_a
                rate = peak * eff.compute * rows / (rows + eff.half_rows)
                if op.kind != "matmul":
                    rate = rate * vector
            t = np.maximum((flops + op.extra_flops) / rate, mem)
        out.append((op, count * (t + op.launches * eff.op_overhead_s)))
    return out


def _cached_ops(c: Columns, phase: Phase) -> list:
    """`model_ops` of a phase, computed once per table (devices and precisions share them)."""
    cache = c.__dict__.setdefault("_ops", {})
    key = (phase.kind, phase.T, phase.n0, phase.B, phase.causal)
    if key not in cache:
        cache[key] = model_ops(c, phase, lm_head=True)
    return cache[key]


def roofline_seconds(
    c: Columns,
    phase: Phase,
    device: DeviceProfile,
    precision: str,
    *,
    lm_head_tokens: float | None = None,
) -> np.ndarray:
    """Roofline time of one phase (`op_seconds`, summed)."""
    total = np.zeros(c.n)
    for _, t in op_seconds(c, phase, device, precision, lm_head_tokens=lm_head_tokens):
        total = total + t
    return total


def prefill_phase(prompt: int, batch: float = 1.0) -> Phase:
    """The forward pass over a prompt that time to first token times."""
    return Phase("forward", T=prompt, B=batch, causal="half")


def step_phase(context, batch: float = 1.0) -> Phase:
    """One decode step at `context`."""
    return Phase("step", T=1, n0=context, B=batch)


def mean_context(prompt: int, generate: int) -> float:
    """The context of end to end's average decode step: P + (G - 1) / 2."""
    return prompt + (generate - 1) / 2.0


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
    return 4.0 * (params(c)["active_params"] + routed + state)
