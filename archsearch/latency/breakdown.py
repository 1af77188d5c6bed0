"""What `archsearch cost` reports, as plain data (dicts of numbers) for the CLI to print.

`cost_report` gives one architecture's parameters, memory, FLOPs and predicted latency on a
device, and the FLOPs and time of each part of the model (`ops.CATEGORIES`: attention, FFN,
LM head, ...); `length_curves` gives cache, memory and latency against sequence length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from archsearch.arch import ArchConfig
from archsearch.cost import model, traced
from archsearch.cost.counts import block_modules, model_ops, params, state_elements
from archsearch.cost.devices import ERROR_QUANTITIES, DeviceProfile, describe_error
from archsearch.cost.evaluate import columns
from archsearch.cost.ops import CATEGORIES, Columns, Phase
from archsearch.latency import predict


def cost_report(
    arch: ArchConfig,
    device: DeviceProfile,
    *,
    precision: str,
    prompt: int,
    context: int,
    generate: int,
    batch: int,
) -> dict[str, Any]:
    """Breakdown by part (prefill of `prompt` tokens, one decode step at `context`) and
    totals of one architecture on a device."""
    c = columns(arch)
    settings = {"prompt": prompt, "context": context, "generate": generate, "batch": batch}
    r = arch.resolved()
    notes = []
    if context > r.max_seq_len or prompt + generate > r.max_seq_len:
        notes.append(f"beyond max_seq_len={r.max_seq_len}")
    traced_parts = traced.traced_parts(arch)
    if traced_parts:
        notes.append(
            f"traced ({', '.join(traced_parts)}): params, FLOPs and state counted by torch's "
            "FlopCounterMode, latency from the roofline of the traced FLOPs and bytes"
        )
    return {
        "arch": arch.name,
        "summary": arch.summary(),
        "device": device.name,
        # the relative error each predicted latency carries on this device (None: unknown)
        "latency_error": {m: _error(c, device, m, precision, settings) for m in ERROR_QUANTITIES},
        "latency_provenance": describe_error(device),
        "precision": precision,
        "cache_bits": model.cache_bits(precision),
        "settings": settings,
        "breakdown": _parts(c, device, precision, prompt, context, batch),
        "totals": _totals(c, device, precision, settings),
        "notes": notes,
        "traced": traced_parts,
    }


def _parts(
    c: Columns, device: DeviceProfile, precision: str, prompt: int, context: int, B: int
) -> list[dict[str, Any]]:
    """Each part (`CATEGORIES`) that takes time: its layers, the FLOPs and predicted time of
    the prefill of `prompt` tokens and of one decode step at `context`."""
    prefill = model.prefill_phase(prompt, B)
    step = model.step_phase(context, B)
    last = 1.0 if device.prefill_logits == "last" else None
    t_prefill = _seconds_by_category(
        predict.seconds_by_part(c, prefill, device, precision, lm_head_tokens=last)
    )
    t_step = _seconds_by_category(predict.seconds_by_part(c, step, device, precision))
    f_prefill = _flops_by_category(c, prefill)
    f_step = _flops_by_category(c, step)
    layers: dict[str, float] = {}
    for category, count, _ in block_modules(c):
        layers[category] = layers.get(category, 0.0) + float(count[0])
    return [
        {
            "part": cat,
            "layers": int(layers.get(cat, 0)),
            "prefill_gflops": f_prefill.get(cat, 0.0) / 1e9,
            "decode_mflops": f_step.get(cat, 0.0) / 1e6,
            "ttft_ms": 1e3 * t_prefill.get(cat, 0.0),
            "decode_ms": 1e3 * t_step.get(cat, 0.0),
        }
        for cat in CATEGORIES
        if t_step.get(cat, 0.0) != 0 or t_prefill.get(cat, 0.0) != 0
    ]


def _totals(
    c: Columns, device: DeviceProfile, precision: str, settings: dict[str, int]
) -> dict[str, float]:
    """The whole model: params, weights, cache and memory, FLOPs and predicted latencies."""
    prompt, context, generate, B = (settings[k] for k in ("prompt", "context", "generate", "batch"))
    prefill = model.prefill_phase(prompt, B)
    step = model.step_phase(context, B)
    ttft = 1e3 * float(predict.ttft_s(c, device, prompt, precision, B)[0])
    dec = 1e3 * float(predict.decode_s(c, device, context, precision, B)[0])
    e2e = 1e3 * float(predict.e2e_s(c, device, prompt, generate, precision, B)[0])
    return {
        **{k: float(v[0]) for k, v in params(c).items()},
        "weight_bytes": float(model.weight_bytes(c, precision)[0]),
        **{
            f"cache_bytes_{b}bit": float(model.cache_bytes(c, context, b, B)[0]) for b in (16, 8, 4)
        },
        "state_elements": float(state_elements(c, context, B)[0]),
        "memory_bytes": float(model.memory_bytes(c, context, precision, B)[0]),
        "prefill_flops": float(model.flops(c, prefill)[0]),
        "decode_flops_per_token": float(model.flops(c, step)[0]) / B,
        "train_flops_per_token": float(model.train_flops_per_token(c, prompt)[0]),
        "ttft_ms": ttft,
        "decode_ms": dec,
        "e2e_ms": e2e,
        "decode_tokens_per_s": 1e3 * B / dec,
        "prefill_tokens_per_s": 1e3 * prompt * B / ttft,
    }


def _error(
    c: Columns, device: DeviceProfile, metric: str, precision: str, settings: dict
) -> float | None:
    """The relative error of one architecture's predicted latency (`predict.latency_errors`)."""
    errors = predict.latency_errors(c, device, metric, precision, **settings)
    return None if errors is None else float(errors[0])


def _seconds_by_category(timed: list) -> dict[str, float]:
    out: dict[str, float] = {}
    for op, t in timed:
        out[op.category] = out.get(op.category, 0.0) + float(np.asarray(t).ravel()[0])
    return out


def _flops_by_category(c: Columns, phase: Phase) -> dict[str, float]:
    out: dict[str, float] = {}
    for count, op in model_ops(c, phase):
        v = float(np.asarray(count * op.flops).ravel()[0])
        out[op.category] = out.get(op.category, 0.0) + v
    return out


def length_curves(
    arch: ArchConfig,
    device: DeviceProfile,
    seq_lens: list[int],
    *,
    precision: str,
    prompt: int,
    batch: int,
) -> dict[str, list[float]]:
    """Cache and peak memory at each length, decode time per token at that context, and a
    prompt of `prompt` tokens plus that many generated ones."""
    c = columns(arch)
    lens = np.array(sorted(seq_lens), dtype=np.float64)
    bits = model.cache_bits(precision)
    return {
        "seq_lens": lens.tolist(),
        "cache_bytes": [float(model.cache_bytes(c, n, bits, batch)[0]) for n in lens],
        "memory_bytes": [float(model.memory_bytes(c, n, precision, batch)[0]) for n in lens],
        "decode_ms": [
            1e3 * float(predict.decode_s(c, device, n, precision, batch)[0]) for n in lens
        ],
        "e2e_ms": [
            1e3 * float(predict.e2e_s(c, device, prompt, int(n), precision, batch)[0]) for n in lens
        ],
    }
