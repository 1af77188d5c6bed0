"""The roofline of a calibrated profile: what prices the precisions the learned predictor does not.

Peaks are the best rates of the models' own linear layers (`archsearch.models.gemm`) over the
plan's grid in fp32 and bf16, `half_rows` fitted to eff(m) = m / (m + half_rows) of the bf16
rates; the memory bandwidth the best of a streaming read and copy of 256 MiB, its efficiency a
matrix-vector product's over a weight twice the last-level cache (streamed from memory, as a
large model's decode step streams its weights); the cache bandwidth that of products over
weights that fit it. The half precision's compute, vector and per-operator factors are fitted
to the reference models timed in bf16 (least squares on log times), a decode step's one-query
attention rate is measured (`attention_step`: torch's CPU kernel runs it far below the matmul
law), and both are checked on the held-out models timed in bf16 and predicted at fp16, at
their setting and at the calibration ranges' longest (`LONG`: bf16 attention steps after
thousands of tokens run far slower than the roofline).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import statistics
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from archsearch.cost import model
from archsearch.cost.devices import DeviceProfile, cpu_name, parse_device
from archsearch.latency.calibrate.fit import check
from archsearch.latency.calibrate.models import (
    HELD_OUT_CONTEXT,
    HELD_OUT_PROMPT,
    WholeModel,
    held_out_models,
    reference_models,
)
from archsearch.latency.calibrate.plan import TimingPlan
from archsearch.latency.calibrate.timing import DTYPES, seconds_per_call, time_model

__all__ = ["HALF", "device", "half", "measure", "profile", "references"]

HALF = "fp16"  # the half precision the roofline prices (timed in bf16)
LONG = (512, 2048)  # the longest prompt and context of the calibration ranges
ATTENTION = ((4, 4, 512), (8, 1, 2048), (14, 14, 1024), (10, 10, 4096))  # heads, KV heads, keys


def _median(fn, repeats: int) -> float:
    return seconds_per_call(fn, repeats, 0.02, reduce=statistics.median)


def measure(p: TimingPlan) -> dict[str, Any]:
    """Matmul rates, bandwidths (bytes/s), the cache and one-query attention rates."""
    import torch
    import torch.nn.functional as F

    from archsearch.models.gemm import linear

    out: dict[str, Any] = {}
    for dtype in ("float32", "bfloat16"):
        out[dtype] = []
        for k, n in p.matmul_weights:
            w = torch.randn(n, k, dtype=getattr(torch, dtype))
            for m in p.matmul_rows:
                x = torch.randn(m, k, dtype=w.dtype)
                rate = 2 * m * k * n / _median(lambda x=x, w=w: linear(x, w), p.repeats)
                out[dtype].append({"m": m, "k": k, "n": n, "flops_per_s": rate})
    out["llc"] = llc = cache_capacity()
    a, b = torch.ones(64 * 2**20), torch.empty(64 * 2**20)
    out["read"] = a.numel() * 4 / _median(a.sum, p.repeats)
    out["copy"] = 2 * a.numel() * 4 / _median(lambda: b.copy_(a), p.repeats)
    w, v = torch.randn(int(min(max(2**28, 4 * llc), 2**30) // 2**14), 4096), torch.randn(1, 4096)
    out["gemv"] = w.numel() * 4 / _median(lambda: linear(v, w), p.repeats)
    layers, x = [torch.randn(512, 512) for _ in range(int(llc / 2 // 2**20))], torch.randn(1, 512)
    sweep = lambda: [linear(x, w) for w in layers]  # noqa: E731
    out["cache"] = len(layers) * 2**20 / _median(sweep, p.repeats) if layers else 0.0
    out["attention_step"] = []
    for heads, kv, keys in ATTENTION:
        q = torch.randn(1, heads, 1, 64, dtype=getattr(torch, DTYPES[HALF]))
        k, v2 = (torch.randn(1, kv, keys, 64, dtype=q.dtype) for _ in range(2))
        call = partial(F.scaled_dot_product_attention, q, k, v2, enable_gqa=heads != kv)
        t = seconds_per_call(call, p.repeats, 0.02, warmup=0.05)
        out["attention_step"].append(4.0 * heads * 64 * keys / t)
    return out


def cache_capacity() -> float:
    """Half the last-level cache (the rest holds activations and other tenants), in bytes."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        if text[:-1].isdigit():
            sizes.append(int(text[:-1]) * {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1], 1))
    return max(sizes, default=0) / 2


def half_rows(points: list[dict[str, float]]) -> float:
    """Least squares (in log space) of eff(m) = m / (m + h) over the measured points."""
    peak = max(x["flops_per_s"] for x in points)
    m = np.array([x["m"] for x in points], dtype=float)
    rate = np.log(np.array([x["flops_per_s"] for x in points]) / peak)
    grid = np.geomspace(0.01, 4096, 400)
    return float(grid[int(np.argmin([np.sum((rate - np.log(m / (m + h))) ** 2) for h in grid]))])


def profile(measured: dict[str, Any], p: TimingPlan, factors=(1.0, 0.0, 1.0)) -> dict[str, Any]:
    """The profile's roofline figures, each with its source; `factors`: the half precision's
    (compute, overhead per operator in µs, vector) that `half` fits."""
    peak32, peak16 = (max(r["flops_per_s"] for r in measured[d]) for d in ("float32", "bfloat16"))
    bandwidth = max(measured["read"], measured["copy"])
    where = f"{cpu_name()}, {os.cpu_count()} CPUs, {p.threads} threads, {datetime.date.today()}"
    return {
        "name": "local",
        "description": f"this machine, measured: {cpu_name()}",
        "kind": "cpu",
        "prefill_logits": "all",  # archsearch's own prefill computes every position's logits
        "peak_flops": {
            "fp32": float(f"{peak32:.4g}"),
            "fp16": float(f"{peak16:.4g}"),
            "int8": float(f"{peak32:.4g}"),
        },
        "memory_bandwidth": float(f"{bandwidth:.4g}"),
        "memory_capacity": float(memory_bytes()),
        "efficiency": {
            HALF: {
                "compute": round(factors[0], 4),
                "op_overhead_s": float(f"{factors[1] * 1e-6:.3g}"),
                "vector": round(factors[2], 4),
                "half_rows": round(half_rows(measured["bfloat16"]), 3),
                "bandwidth": round(min(1.0, measured["gemv"] / bandwidth), 4),
                "attention_step": float(f"{np.median(measured['attention_step']) / peak16:.4g}"),
                "source": "archsearch calibrate: half_rows fitted to bf16 linear layers; bandwidth "
                "a GEMV's share of the peak; compute, vector and op_overhead_s fitted to reference "
                "models timed in bf16; attention_step the median rate of bf16 one-query attention",
            }
        },
        "cache_capacity": float(measured["llc"]),
        "cache_bandwidth": float(f"{measured['cache']:.4g}"),
        "sources": {
            "peak_flops": f"best fp32 / bf16 linear layer over {len(measured['float32'])} shapes "
            f"each; int8: no int8 matmul path in eager PyTorch here, the fp32 rate ({where})",
            "memory_bandwidth": f"best of a streaming read and copy of 256 MiB; a GEMV streams "
            f"its weight at {measured['gemv'] / 1e9:.3g} GB/s ({where})",
            "memory_capacity": "MemTotal of /proc/meminfo",
            "cache_capacity": "half the last-level cache of /sys/devices/system/cpu/cpu0/cache",
            "cache_bandwidth": f"matrix-vector products over cache-resident weights ({where})",
        },
    }


def device(measured: dict[str, Any], p: TimingPlan) -> DeviceProfile:
    return parse_device(profile(measured, p), source="calibration", default_name="local")


def memory_bytes() -> int:
    """MemTotal of /proc/meminfo (8 GiB where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def references(p: TimingPlan) -> list[WholeModel]:
    return reference_models()[:: p.references]


def half(measured: dict[str, Any], p: TimingPlan, step) -> dict[str, Any]:
    """The half precision's factors fitted to the reference models timed in bf16 (`profile`
    takes them), then its held-out check: one build of each held-out model (the roofline's
    error here dwarfs the spread between builds) at its setting and at `LONG`, the least of the
    plan's `check_repeats` samples."""
    timed, skipped = _in_bf16(references(p), dataclasses.replace(p, span=0.0), step)
    factors = _fit_factors(device(measured, p), timed)
    step("the half precision's factors fitted")
    fitted = profile(measured, p, factors)
    priced = parse_device(fitted, source="calibration", default_name="local", learned=True)
    held = held_out_models()[: p.held_out]
    ran, not_run = _in_bf16(
        [x for m in held for x in (m, m._replace(prompt=LONG[0], context=LONG[1]))],
        dataclasses.replace(p, repeats=min(p.repeats, p.check_repeats)),
        step,
    )
    raw = [
        {**m.setting(), "measured_s": t, "predicted_s": m.predicted(priced, HALF)} for m, t in ran
    ]
    out = {"factors": list(factors), "skipped": skipped + not_run, "check": raw, "validation": {}}
    for i, q in enumerate(("ttft", "decode")) if raw else ():
        signed = np.array([r["predicted_s"][i] / r["measured_s"][i] - 1 for r in raw])
        method = (
            f"{len(raw)} predictions of held-out whole models (prompt {HELD_OUT_PROMPT}, "
            f"context {HELD_OUT_CONTEXT}; prompt {LONG[0]}, context {LONG[1]}) timed in "
            f"{p.runtime} in bfloat16, predicted by the roofline at {HALF}"
        )
        out["validation"][q] = check(
            np.abs(signed),
            method + "".join(f"; not run: {s}" for s in not_run),
            ["bf16", HALF],
            held_out={HALF: signed},
        )
    return out


def _in_bf16(models: list[WholeModel], p: TimingPlan, step) -> tuple[list, list[str]]:
    """(model, its bf16 timings) of each model torch runs in bf16; those it cannot (a line)."""
    ran, skipped = [], []
    for m in models:
        try:
            ran.append((m, time_model(m, dataclasses.replace(p, precision=HALF))))
        except RuntimeError as e:  # torch has no kernel for one of its ops in that dtype
            skipped.append(f"{m.arch.summary()} ({str(e).splitlines()[0][:80]})")
        step(f"{m.arch.summary()} P{m.prompt}/C{m.context} in bf16")
    return ran, skipped


def _fit_factors(device: DeviceProfile, timed: list) -> tuple[float, float, float]:
    """(compute, overhead per operator in µs, vector) at `HALF` by least squares on the log
    ratio of the roofline's time to each reference model's (prefill, step) timing."""
    from scipy.optimize import least_squares

    def residuals(x) -> np.ndarray:
        eff = dataclasses.replace(
            device.eff(HALF), compute=x[0], op_overhead_s=x[1] * 1e-6, vector=x[2]
        )
        dev = dataclasses.replace(device, efficiency={**device.efficiency, HALF: eff})
        return np.array(
            [
                np.log(model.roofline_seconds(m.table(), ph, dev, HALF)[0] / t)
                for m, ts in timed
                for ph, t in zip(m.phases(), ts)
            ]
        )

    start = [device.eff(HALF).compute, max(device.eff(HALF).op_overhead_s * 1e6, 1.0), 1.0]
    fit = least_squares(residuals, start, bounds=([0.02, 0.0, 0.02], [1.0, 100.0, 1.0]))
    return tuple(float(v) for v in fit.x)
