"""Fitting a device's latency-model efficiencies to published throughputs, with leave-one-out.

A published measurement (`Throughput`) is one model at one precision on one device: prefill
tokens/s over a `PROMPT`-token prompt and generation tokens/s over `GENERATE` tokens (the
setting of [PLM] Table 12, llama.cpp's `pp512`/`tg128`). `fit_efficiency` finds the
`Efficiency` (fraction of peak compute a matmul reaches, fraction of peak bandwidth a weight
stream reaches) that minimises the squared log error of the predicted prefill and per-token
decode times of every measurement of one compute class; log errors weigh a 2x miss the same
on a fast and a slow device. `leave_one_out` refits once per model without that model's rows
and predicts them, so each error is one the fit did not see; `validation` summarises them as
`archsearch.cost.devices.Validation` figures.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from archsearch.arch import ArchConfig
from archsearch.cost import model
from archsearch.cost.devices import COMPUTE_CLASS_OF, DeviceProfile, Efficiency
from archsearch.cost.evaluate import columns
from archsearch.metrics import PRECISIONS

__all__ = [
    "GENERATE",
    "PROMPT",
    "Throughput",
    "fit_efficiency",
    "leave_one_out",
    "predict",
    "validation",
]

PROMPT, GENERATE = 512, 128
BOUNDS = (0.005, 1.0)  # efficiencies are fractions of peak


@dataclass(frozen=True)
class Throughput:
    """One published measurement: `model` (a label) with architecture `arch` at `precision`."""

    model: str
    arch: ArchConfig
    precision: str
    prefill_tok_s: float  # prompt tokens per second over a PROMPT-token prompt
    generate_tok_s: float  # tokens per second over GENERATE generated tokens

    @property
    def ttft_s(self) -> float:
        return PROMPT / self.prefill_tok_s

    @property
    def decode_s(self) -> float:
        return 1.0 / self.generate_tok_s


def predict(device: DeviceProfile, row: Throughput, eff: Efficiency) -> tuple[float, float]:
    """(TTFT, mean decode step) in seconds of a measurement's setting under `eff`."""
    dev = dataclasses.replace(device, efficiency={"fp32": eff, "fp16": eff, "int8": eff})
    c = columns(row.arch)
    last = 1.0 if dev.prefill_logits == "last" else None
    prefill = model.prefill_phase(PROMPT)
    ttft = float(model.roofline_seconds(c, prefill, dev, row.precision, lm_head_tokens=last)[0])
    step = model.step_phase(model.mean_context(PROMPT, GENERATE))
    return ttft, float(model.roofline_seconds(c, step, dev, row.precision)[0])


def fit_efficiency(
    device: DeviceProfile, rows: list[Throughput], *, overhead_s: float, source: str = ""
) -> Efficiency:
    """Least squares on log times over `rows` (one compute class) for the compute and bandwidth
    efficiencies, each kept in BOUNDS; matmuls reach full efficiency from one row on
    (`half_rows` 1: llama.cpp's kernels), and every operator costs `overhead_s`."""
    classes = {COMPUTE_CLASS_OF[r.precision] for r in rows}
    if len(classes) != 1 or not rows:
        raise ValueError(f"fit one compute class at a time, got {sorted(classes)}")

    def efficiency(x) -> Efficiency:
        return Efficiency(
            compute=float(np.exp(x[0])),
            half_rows=1.0,
            bandwidth=float(np.exp(x[1])),
            op_overhead_s=overhead_s,
            source=source,
        )

    def residuals(x) -> list[float]:
        eff = efficiency(x)
        out = []
        for r in rows:
            ttft, decode = predict(device, r, eff)
            out += [math.log(ttft / r.ttft_s), math.log(decode / r.decode_s)]
        return out

    lo, hi = (math.log(b) for b in BOUNDS)
    sol = least_squares(residuals, x0=[math.log(0.3), math.log(0.6)], bounds=([lo] * 2, [hi] * 2))
    eff = efficiency(sol.x)
    return dataclasses.replace(
        eff, compute=round(eff.compute, 4), bandwidth=round(eff.bandwidth, 4)
    )


def leave_one_out(
    device: DeviceProfile, rows: list[Throughput], *, overhead_s: float
) -> list[dict]:
    """For each model: fit without its rows, predict them. One record per held-out row with
    the relative errors pred / measured - 1 of TTFT and decode."""
    out = []
    for held in dict.fromkeys(r.model for r in rows):
        train = [r for r in rows if r.model != held]
        eff = fit_efficiency(device, train, overhead_s=overhead_s)
        for r in rows:
            if r.model != held:
                continue
            ttft, decode = predict(device, r, eff)
            out.append(
                {
                    "model": r.model,
                    "precision": r.precision,
                    "ttft": ttft / r.ttft_s - 1.0,
                    "decode": decode / r.decode_s - 1.0,
                }
            )
    return out


def validation(errors: list[dict], quantity: str, method: str) -> dict:
    """`Validation` figures (profile YAML keys) of the held-out errors of one quantity, at the
    precisions its records were measured at."""
    e = np.abs([rec[quantity] for rec in errors])
    precisions = [p for p in PRECISIONS if any(rec["precision"] == p for rec in errors)]
    return {
        "mape": round(float(e.mean()), 4),
        "within_10": round(float((e <= 0.10).mean()), 4),
        "p90": round(float(np.quantile(e, 0.9)), 4),
        "n": len(e),
        "method": method,
        "precisions": precisions,
        # the signed errors by precision: pairs within one are what `latency.order` reads
        "held_out": {
            p: [round(float(rec[quantity]), 4) for rec in errors if rec["precision"] == p]
            for p in precisions
        },
    }
