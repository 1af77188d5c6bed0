"""Fitting the kernel-level latency predictor on this machine (part of `archsearch calibrate`).

1. The dispatch overhead per operator (`kernel_timing.dispatch_seconds`).
2. Per kernel (`archsearch.cost.kernels.KERNELS`; `gemm` first, since the other kernels'
   analytic times use its predictions), adaptive sampling after nn-Meter (Zhang et al.,
   MobiSys 2021): time half the budget at random points of the kernel's grid and fit; then,
   in rounds, time fresh random points, record the fitted predictor's error on them (an
   out-of-sample figure: `fresh_error`), time grid neighbours of the worst predicted ones, add
   all and refit. The target is log(measured / analytic) time, fitted by gradient boosting
   (`archsearch.cost.trees`; why: `archsearch.cost.kernels`).
3. The model-level terms (`glue`): whole models (`glue_models`, 4-97 MB of weights) are timed
   and fitted as scale x (sum of their kernels) + a + b x layers + w x weight bytes per phase
   (relative least squares; the scale within 0.5-2, the others >= 0): the scale and w cover
   what timing a kernel alone misses (its weights stay in the cache between calls; in a model
   larger than the cache the other layers evict them), a and b the Python and bookkeeping per
   model and per layer.
4. A held-out check: other whole models (`validation_models`, other families, widths, depths,
   vocabularies, prompt and context lengths than anything fitted above) are timed and
   predicted; their errors are the profile's `validation` figures.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from archsearch.arch import (
    ArchConfig,
    AttentionConfig,
    InvalidArch,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
    MoEConfig,
)
from archsearch.cost import kernel_timing as timing
from archsearch.cost import trees
from archsearch.cost.counts import params
from archsearch.cost.devices import DeviceProfile
from archsearch.cost.kernel_latency import gemm_seconds, kernel_analytic
from archsearch.cost.kernels import KERNELS, PHASES, Kernels
from archsearch.cost.ops import Columns
from archsearch.runtimes import ExportError

__all__ = [
    "QUICK_KERNELS",
    "fit_kernel",
    "fit_kernels",
    "glue_models",
    "kernel_steps",
    "validation_models",
]

QUICK_KERNELS = ("gemm", "norm", "residual", "embedding", "ffn", "gqa.forward", "gqa.step")
GLUE_PROMPT = GLUE_CONTEXT = 128
SCALE = (0.5, 2.0)  # the range of the glue's scale of the kernels' sum
VALIDATION_PROMPT, VALIDATION_CONTEXT = 192, 384


def _arch(d: int, depth: int, vocab: int, **sections) -> ArchConfig:
    return ArchConfig(vocab_size=vocab, d_model=d, n_layers=depth, max_seq_len=4096, **sections)


def _linear(family: str) -> dict:
    return dict(layers=LayersConfig(mixer="linear"), linear=LinearConfig(family=family))


def glue_models() -> list[ArchConfig]:
    """Whole models whose unexplained time fits the model-level overhead."""
    v = 2048
    return [
        _arch(256, 4, v, attention=AttentionConfig(n_heads=4, n_kv_heads=2)),
        _arch(192, 3, v, **_linear("gla")),
        _arch(384, 2, v, attention=AttentionConfig(kind="mla", n_heads=4, kv_rank=96)),
        _arch(256, 2, v, **_linear("mamba2")),
        _arch(128, 6, v, **_linear("deltanet")),
        _arch(256, 3, v, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=4)),
        _arch(
            192,
            2,
            v,
            attention=AttentionConfig(n_heads=3, n_kv_heads=1),
            moe=MoEConfig(n_experts=4, top_k=2, d_expert=192),
        ),
        _arch(320, 2, v, **_linear("rwkv6")),
        _arch(768, 2, v, attention=AttentionConfig(n_heads=12, n_kv_heads=4)),
        _arch(640, 3, v, **_linear("retnet")),
        _arch(1024, 2, v, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=8)),
    ]


def validation_models() -> list[ArchConfig]:
    """Held-out whole models: never timed by the fit (other shapes, vocabulary and lengths)."""
    v = 3000
    return [
        _arch(320, 3, v, attention=AttentionConfig(kind="mha", n_heads=5)),
        _arch(256, 3, v, **_linear("retnet")),
        _arch(448, 2, v, attention=AttentionConfig(kind="mqa", n_heads=7)),
        _arch(384, 2, v, **_linear("hgrn2")),
        _arch(
            192,
            4,
            v,
            attention=AttentionConfig(kind="mla", n_heads=3, kv_rank=48, q_rank=96, rope_dim=16),
        ),
        _arch(192, 4, v, **_linear("linear_attention")),
        _arch(320, 2, v, **_linear("gated_deltanet")),
        _arch(
            256,
            4,
            v,
            layers=LayersConfig(pattern="LN"),
            linear=LinearConfig(family="gla"),
            attention=AttentionConfig(n_heads=4, n_kv_heads=2),
        ),
        _arch(448, 2, v, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=8)),
        _arch(896, 2, v, attention=AttentionConfig(kind="mha", n_heads=14)),
        _arch(704, 3, v, **_linear("gla")),
        _arch(
            256,
            3,
            v,
            attention=AttentionConfig(n_heads=4, n_kv_heads=1),
            moe=MoEConfig(n_experts=8, top_k=2, d_expert=128),
        ),
    ]


def _plan(quick: bool, samples: int) -> dict[str, Any]:
    if quick:
        return dict(kernels=QUICK_KERNELS, samples=4, glue=2, validation=2, min_time=0.0)
    return dict(kernels=tuple(KERNELS), samples=samples, glue=None, validation=None, min_time=0.005)


def kernel_steps(quick: bool) -> int:
    """Progress steps `fit_kernels` reports."""
    return len(_plan(quick, 0)["kernels"]) + 3


def _draw(kernel: str, rng: random.Random, n: int, seen: set) -> list[timing.Shape]:
    """Up to n new valid shapes of a kernel's grid."""
    out: list[timing.Shape] = []
    for _ in range(20 * n):
        if len(out) == n:
            break
        shape = timing.random_shape(kernel, rng)
        if shape not in seen and _valid(shape):
            seen.add(shape)
            out.append(shape)
    return out


def _valid(shape: timing.Shape) -> bool:
    if not timing.affordable(shape):
        return False
    try:
        timing.shape_rows(shape)
    except InvalidArch:
        return False
    return True


def fit_kernel(
    kernel: str,
    measure: Callable[[timing.Shape], float | None],
    device: DeviceProfile,
    samples: int,
    rng: random.Random,
) -> tuple[trees.Ensemble | None, int, float]:
    """Adaptive sampling and fit of one kernel: (ensemble, shapes timed, relative error on the
    last round's fresh shapes before they were added). `measure(shape)` gives seconds, or None
    where the runtime cannot run the shape (no ensemble when it runs none of the first ones)."""
    seen: set = set()
    X: list[np.ndarray] = []
    y: list[float] = []

    def take(shapes: list[timing.Shape]) -> list[tuple[timing.Shape, np.ndarray, float]]:
        rows = []
        for shape in shapes:
            x, c, p = timing.shape_rows(shape)
            if kernel == "gemm":
                v = shape.values()
                base = gemm_seconds(device, device.kernels, v["m"], v["k"], v["n"])
            else:
                base = kernel_analytic(kernel, c, p, device)
            seconds = measure(shape)
            if seconds is not None:
                rows.append((shape, x[0], math.log(seconds / float(base[0]))))
        return rows

    def add(rows) -> trees.Ensemble:
        for _, x, target in rows:
            X.append(x)
            y.append(target)
        return trees.fit(np.array(X), np.array(y), KERNELS[kernel])

    first = max(2, samples // 2)
    per_round = max(1, samples // 8)
    rows = take(_draw(kernel, rng, first, seen))
    if not rows:
        return None, 0, float("nan")
    ens = add(rows)
    fresh_error = float("nan")
    for _ in range(max(1, (samples - first) // (2 * per_round))):
        fresh = take(_draw(kernel, rng, per_round, seen))
        if not fresh:
            break
        errors = np.abs(
            np.exp(ens.predict(np.array([x for _, x, _ in fresh])) - [t for *_, t in fresh]) - 1
        )
        fresh_error = float(np.mean(errors))
        worst = [fresh[i][0] for i in np.argsort(-errors)[:per_round]]
        near = [s for s in (timing.neighbour(w, rng) for w in worst) if s not in seen and _valid(s)]
        seen.update(near)
        ens = add(fresh + take(near))
    return ens, len(y), fresh_error


def _with(device: DeviceProfile, kernels: Kernels) -> DeviceProfile:
    return dataclasses.replace(device, kernels=kernels)


def _predict(
    device: DeviceProfile, arch: ArchConfig, prompt: int, context: int
) -> tuple[float, float]:
    from archsearch.cost import model

    c = Columns.from_archs([arch])
    return (
        float(model.ttft_s(c, device, prompt, "fp32")[0]),
        float(model.decode_s(c, device, context, "fp32")[0]),
    )


def _fit_glue(measured, predicted, layers, weights) -> dict[str, tuple[float, ...]]:
    """measured = scale x predicted + a + b x layers + w x weight bytes per phase, by relative
    least squares (scale in SCALE, a, b, w >= 0)."""
    from scipy.optimize import lsq_linear

    glue = {}
    for i, phase in enumerate(PHASES):
        meas = np.array([m[i] for m in measured])
        pred = np.array([p[i] for p in predicted])
        A = np.column_stack(
            [pred, np.ones(len(meas)), np.array(layers, float), np.array(weights, float)]
        )
        bounds = ([SCALE[0], 0.0, 0.0, 0.0], [SCALE[1], np.inf, np.inf, np.inf])
        coef = lsq_linear(A / meas[:, None], np.ones(len(meas)), bounds=bounds, method="bvls").x
        glue[phase] = tuple(float(v) for v in coef)
    return glue


def _validation(measured, predicted) -> dict[str, dict[str, Any]]:
    out = {}
    for i, quantity in enumerate(("ttft", "decode")):
        err = np.array([abs(p[i] / m[i] - 1) for m, p in zip(measured, predicted)])
        what = (
            f"{len(err)} held-out whole models no calibration step timed (prompt "
            f"{VALIDATION_PROMPT}, context {VALIDATION_CONTEXT})"
        )
        out[quantity] = {
            "mape": round(float(err.mean()), 4),
            "within_10": round(float(np.mean(err <= 0.10)), 4),
            "n": len(err),
            "method": what,
            "p90": round(float(np.quantile(err, 0.9)), 4),
        }
    return out


def fit_kernels(
    device: DeviceProfile,
    *,
    runtime: str = "torch",
    threads: int = 1,
    repeats: int = 5,
    quick: bool = False,
    samples: int = 48,
    cpu: str = "",
    seed: int = 0,
    step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure and fit the kernel predictor of this machine on top of `device` (the measured
    roofline profile, whose peaks give the analytic times). Returns `kernels` (the profile
    section), `validation` (held-out figures; empty when no held-out model runs in the
    runtime), and the raw whole-model timings."""
    import torch

    plan = _plan(quick, samples)
    rng = random.Random(seed)
    reps = 1 if quick else repeats

    def note(text: str) -> None:
        if step is not None:
            step(text)

    kernels = Kernels(
        runtime=runtime,
        torch=str(torch.__version__),
        threads=threads,
        date=datetime.date.today().isoformat(),
        cpu=cpu or "unknown",
        dispatch_s=timing.dispatch_seconds(runtime, reps),
        glue={phase: (1.0, 0.0, 0.0, 0.0) for phase in PHASES},
    )
    note("dispatch overhead per operator")

    def measure(shape: timing.Shape) -> float | None:
        try:
            return timing.time_shape(shape, runtime, reps, plan["min_time"])
        except ExportError:  # the runtime cannot run it: that kernel keeps its analytic time
            return None

    for kernel in plan["kernels"]:
        ens, n, fresh = fit_kernel(kernel, measure, _with(device, kernels), plan["samples"], rng)
        if ens is None:
            note(f"kernel {kernel}: does not run in {runtime}, analytic time kept")
            continue
        kernels = dataclasses.replace(
            kernels,
            predictors={**kernels.predictors, kernel: ens},
            samples={**kernels.samples, kernel: n},
            fresh_error={**kernels.fresh_error, kernel: 0.0 if math.isnan(fresh) else fresh},
        )
        note(f"kernel {kernel} ({n} shapes)")

    def timed(archs, prompt, context):
        """(the models that run in the runtime, their timings)."""
        ran, times = [], []
        for a in archs:
            try:
                times.append(timing.time_model(a, runtime, prompt, context, reps, plan["min_time"]))
            except ExportError:
                continue
            ran.append(a)
        return ran, times

    glue_archs, glue_meas = timed(glue_models()[: plan["glue"]], GLUE_PROMPT, GLUE_CONTEXT)
    glue_pred = [_predict(_with(device, kernels), a, GLUE_PROMPT, GLUE_CONTEXT) for a in glue_archs]
    weights = [4.0 * params(Columns.from_archs([a]))["active_params"][0] for a in glue_archs]
    if glue_archs:  # else no whole model runs in the runtime: the kernels' sum alone
        glue = _fit_glue(glue_meas, glue_pred, [a.n_layers for a in glue_archs], weights)
        kernels = dataclasses.replace(kernels, glue=glue)
    note("model-level overhead")
    held_out, val_meas = timed(
        validation_models()[: plan["validation"]], VALIDATION_PROMPT, VALIDATION_CONTEXT
    )
    fitted = _with(device, kernels)
    val_pred = [_predict(fitted, a, VALIDATION_PROMPT, VALIDATION_CONTEXT) for a in held_out]
    note("held-out models")
    return {
        "kernels": kernels.to_dict(),
        "validation": _validation(val_meas, val_pred) if held_out else {},
        "raw": {
            "glue": [
                {"arch": a.summary(), "measured_s": m, "predicted_s": p}
                for a, m, p in zip(glue_archs, glue_meas, glue_pred)
            ],
            "validation": [
                {"arch": a.summary(), "measured_s": m, "predicted_s": p}
                for a, m, p in zip(held_out, val_meas, val_pred)
            ],
        },
    }
