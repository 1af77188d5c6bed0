"""Model-level costs: FLOPs/MACs, bytes, peak memory and predicted latency, vectorised.

Conventions that published tables differ on are explicit arguments: `causal` ("full": the
T x n score block as a MATH attention kernel computes it; "half": only the causally visible
pairs), `lm_head` (with or without the output projection), `unit` ("flops" or "macs").

Weights at a precision: fp32 4 bytes, fp16/bf16 2, q8 and q4 in llama.cpp's Q8_0/Q4_0 layout,
blocks of 32 weights with one fp16 scale: 8.5 and 4.5 bits per weight. Norm weights stay fp32.
KV caches and states are 16-bit unless the precision is fp32 (llama.cpp keeps an f16 cache for
quantised weights); `cache_bytes` takes the bit width explicitly ([PLM] eqs. 6-7).

Latency ([PLM] section 6 and Appendix D: IO time vs compute time) is a roofline per
operation: each op of `counts.model_ops` takes max(FLOPs / (peak x efficiency(rows)),
bytes / (bandwidth x efficiency)), elementwise ops take their memory time, and every op adds a
fixed overhead. On a profile with a fitted kernel predictor (`archsearch.cost.kernels`), fp32
latency is instead the sum of the model's kernels' learned times
(`archsearch.cost.kernel_latency`). Time to first token is a forward over the prompt; decode
time per token is one step at context n; end-to-end is TTFT(P) plus G decode steps at the mean
context P + (G-1)/2 (exact when the step time is affine in the context, as it is on either side
of a roofline ridge).

Each predicted latency carries the error its profile states (`latency_errors`): the held-out
error in the band of the row's working set where the profile gives bands, else its one figure.

The cost metrics of `archsearch.metrics` are registered here beside their formulas
(`@evaluator`); the parameter counts are registered in `counts`.
"""

from __future__ import annotations

import numpy as np

from archsearch.cost import devices, traced
from archsearch.cost.counts import model_ops, params, state_elements
from archsearch.cost.devices import ERROR_QUANTITIES, DeviceProfile, latency_error, load_device
from archsearch.cost.evaluate import evaluator
from archsearch.cost.kernel_latency import kernel_seconds, working_set
from archsearch.cost.ops import Columns, Op, Phase
from archsearch.metrics import MetricSpec

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

    Matmuls with weights run at peak x efficiency(rows), or, on a measured profile, at the
    rate measured for their weight size and row count (x the fitted efficiency); other kernels
    (attention, scans, norms) over many tokens at `vector` x their roofline; a decode step's
    softmax attention (`attn.sdpa`, one query per sequence) at the rate the profile measured
    for it (`Efficiency.attention_step`) where it gives one; the memory side
    runs at bandwidth x efficiency, or at the measured cache bandwidth when every weight the
    phase reads fits in the last-level cache (small models decoding on a CPU).

    A profile with a fitted kernel predictor (`kernels`, from `archsearch calibrate`) prices
    fp32 as the sum of the model's kernels instead (`kernel_latency.kernel_seconds`: one entry
    per kernel, not per op)."""
    if device.kernels is not None and precision == "fp32":
        return kernel_seconds(c, phase, device, lm_head_tokens=lm_head_tokens)
    eff = device.eff(precision)
    peak_w = device.peak(precision)
    peak_a = device.peak("fp32" if precision == "fp32" else "fp16")
    wb, ab, sb = WEIGHT_BITS[precision] / 8.0, ACT_BYTES[precision], cache_bits(precision) / 8.0
    ops = _cached_ops(c, phase)
    bw = np.full(c.n, device.memory_bandwidth * eff.bandwidth)
    if device.cache_capacity > 0:
        weight_bytes = sum(count * op.weights for count, op in ops) * wb
        bw = np.where(weight_bytes <= device.cache_capacity, device.cache_bandwidth, bw)
    table = device.matmul_table if precision == "fp32" else None
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
            if table is not None and op.kind == "matmul" and np.any(op.kn):
                rate = _table_rate(table, op.kn, rows) * eff.compute
            elif op.name == "attn.sdpa" and phase.kind == "step" and eff.attention_step:
                rate = peak_a * eff.attention_step  # measured: one query per sequence
            else:
                peak = peak_w if op.kind == "matmul" else peak_a
                rate = peak * eff.compute * rows / (rows + eff.half_rows)
                if op.kind != "matmul":
                    rate = rate * vector
            t = np.maximum((flops + op.extra_flops) / rate, mem)
        out.append((op, count * (t + op.launches * eff.op_overhead_s)))
    return out


def _table_rate(table: dict, kn, rows) -> np.ndarray:
    """Measured matmul FLOP/s at weight size `kn` and `rows` rows: bilinear interpolation in
    log-log space over the calibration grid, clamped to its edges."""
    lw, lr = np.log(table["weights"]), np.log(table["rows"])
    grid = np.log(np.asarray(table["rate"]))
    x = np.clip(np.log(np.maximum(np.asarray(kn, dtype=np.float64), 1.0)), lw[0], lw[-1])
    y = np.clip(np.log(rows), lr[0], lr[-1])
    i = np.clip(np.searchsorted(lw, x) - 1, 0, len(lw) - 2)
    j = np.clip(np.searchsorted(lr, y) - 1, 0, len(lr) - 2)
    tx = (x - lw[i]) / (lw[i + 1] - lw[i])
    ty = (y - lr[j]) / (lr[j + 1] - lr[j])
    v = (
        grid[i, j] * (1 - tx) * (1 - ty)
        + grid[i + 1, j] * tx * (1 - ty)
        + grid[i, j + 1] * (1 - tx) * ty
        + grid[i + 1, j + 1] * tx * ty
    )
    return np.exp(v)


def _cached_ops(c: Columns, phase: Phase) -> list:
    """`model_ops` of a phase, computed once per table (devices and precisions share them)."""
    cache = c.__dict__.setdefault("_ops", {})
    key = (phase.kind, phase.T, phase.n0, phase.B, phase.causal)
    if key not in cache:
        cache[key] = model_ops(c, phase, lm_head=True)
    return cache[key]


def phase_seconds(
    c: Columns,
    phase: Phase,
    device: DeviceProfile,
    precision: str,
    *,
    lm_head_tokens: float | None = None,
) -> np.ndarray:
    """Roofline time of one phase (see `op_seconds`)."""
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


def ttft_s(
    c: Columns, device: DeviceProfile, prompt: int, precision: str, batch: float = 1.0
) -> np.ndarray:
    last_only = device.prefill_logits == "last"
    return phase_seconds(
        c,
        prefill_phase(prompt, batch),
        device,
        precision,
        lm_head_tokens=1.0 if last_only else None,
    )


def decode_s(
    c: Columns, device: DeviceProfile, context, precision: str, batch: float = 1.0
) -> np.ndarray:
    return phase_seconds(c, step_phase(context, batch), device, precision)


def e2e_s(
    c: Columns,
    device: DeviceProfile,
    prompt: int,
    generate: int,
    precision: str,
    batch: float = 1.0,
) -> np.ndarray:
    return ttft_s(c, device, prompt, precision, batch) + generate * decode_s(
        c, device, mean_context(prompt, generate), precision, batch
    )


@evaluator("ttft_ms")
def ttft_ms(c: Columns, device: str, prompt: int, precision: str) -> np.ndarray:
    return 1e3 * ttft_s(c, load_device(device), prompt, precision)


@evaluator("decode_ms")
def decode_ms(c: Columns, device: str, context: int, precision: str) -> np.ndarray:
    return 1e3 * decode_s(c, load_device(device), context, precision)


@evaluator("e2e_ms")
def e2e_ms(c: Columns, device: str, prompt: int, generate: int, precision: str) -> np.ndarray:
    return 1e3 * e2e_s(c, load_device(device), prompt, generate, precision)


def latency_errors(
    c: Columns,
    device: DeviceProfile,
    metric: str,
    precision: str,
    *,
    prompt: int = 0,
    context: float = 0,
    generate: int = 0,
    batch: float = 1.0,
) -> np.ndarray | None:
    """The relative error each row's predicted latency metric (`ttft_ms`, `decode_ms`, `e2e_ms`
    at these settings and `precision`) carries on `device`: its profile's held-out check at
    that precision, in the band of the row's working set where the check gives bands (the
    kernel predictor's, at fp32: `devices.latency_errors`; e2e: the prefill's and the
    mean-context step's), else its one figure. None where the profile has no check at that
    precision."""
    one = latency_error(device, metric, precision)
    if one is None:
        return None
    if all(device.check(q, precision).by_working_set is None for q in ERROR_QUANTITIES[metric]):
        return np.full(c.n, one)
    phases = {}
    if metric in ("ttft_ms", "e2e_ms"):
        phases["ttft"] = prefill_phase(prompt, batch)
    if metric in ("decode_ms", "e2e_ms"):
        n0 = context if metric == "decode_ms" else mean_context(prompt, generate)
        phases["decode"] = step_phase(n0, batch)
    out = np.empty(c.n)
    for idx, sub in c.groups():
        sets = {q: working_set(sub, p) for q, p in phases.items()}
        out[idx] = devices.latency_errors(device, metric, precision, sets)
    return out


def spec_errors(c: Columns, spec: MetricSpec) -> np.ndarray | None:
    """`latency_errors` of a latency metric with its device named (None for other metrics, a
    device left to the run, or a profile that states no error)."""
    args = dict(spec.args)
    if spec.metric not in ERROR_QUANTITIES or args.get("device") is None:
        return None
    return latency_errors(
        c,
        load_device(args["device"]),
        spec.metric,
        args["precision"],
        prompt=args.get("prompt", 0),
        context=args.get("context", 0),
        generate=args.get("generate", 0),
    )
